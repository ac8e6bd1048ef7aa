// spanprof — span-scoped CPU and heap profiles for C++ services, labelled with the
// span's trace and span ids so Pyroscope, Grafana and `go tool pprof` can find the
// profile of one slow request.
//
//   #include <spanprof/spanprof.hpp>
//   void handle(Request& r, const Span& span) {
//     spanprof::ScopedProfile guard(span);
//     ...
//   }
//
// The umbrella: everything public. Header-only, the runtime is compiled once per
// program, in the one source file that says so (config.hpp):
//
//   #define SPANPROF_IMPLEMENTATION
//   #include <spanprof/spanprof.hpp>
//
// or in spanprof's compiled library (SPANPROF_COMPILED_LIB). Every other source
// file compiles only the guard's fast path.
//
// Layout, lowest layer first (a header includes only its own layer and lower ones):
//   base/           error channel, counters, clock, text helpers
//   span/           span identity: ids, traceparent, adapters for span types
//   symbolization/  program counters to function names
//   profile/        the profile model and its encoders (pprof, OTLP)
//   policy/         which spans are profiled: head samplers, tail policies, trigger
//   capture/        the engines that record samples on request threads
//   delivery/       uploaders, the background worker, the spool
//   runtime/        options, environment, start/flush/shutdown/stats
//   detail/         internals of the guard and the runtime: not for inclusion
//   guard.hpp       ScopedProfile, on top of all of it
#ifndef SPANPROF_SPANPROF_HPP_
#define SPANPROF_SPANPROF_HPP_

#include <spanprof/config.hpp>

#include <spanprof/base/clock.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/delivery/file_uploader.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/guard.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/request.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/runtime/runtime.hpp>
#include <spanprof/runtime/stats.hpp>
#include <spanprof/span/span_adapter.hpp>
#include <spanprof/span/span_context.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

// The runtime, in the one source file that defines SPANPROF_IMPLEMENTATION (or in
// spanprof's compiled library, SPANPROF_COMPILED_LIB): config.hpp. Other source
// files include the backend header they use, as with spdlog's sinks:
// <spanprof/delivery/pyroscope_uploader.hpp>, <spanprof/delivery/otlp_uploader.hpp>,
// <spanprof/profile/pprof_encoder.hpp>, <spanprof/symbolization/elf_symbolizer.hpp>.
#if SPANPROF_DEFINE_RUNTIME
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>
#include <spanprof/detail/runtime/runtime-inl.hpp>
#include <spanprof/detail/guard_core-inl.hpp>
#include <spanprof/detail/request-inl.hpp>
#include <spanprof/detail/capture/lock_hooks-inl.hpp>
#endif

#endif  // SPANPROF_SPANPROF_HPP_
