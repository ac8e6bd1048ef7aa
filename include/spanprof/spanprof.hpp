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
// The umbrella: everything public. Header-only by default; define
// SPANPROF_COMPILED_LIB and link spanprof's compiled library to compile the
// runtime once (config.hpp). Source files that only open guards may include
// the lighter <spanprof/guard.hpp> instead, as long as one source file of the
// program includes this one.
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

// Header-only (the default): the backends' uploaders, the encoders, the ELF
// symbolizer and the runtime itself. With SPANPROF_COMPILED_LIB the compiled
// library holds the runtime (config.hpp), and a source file includes the backend
// header it uses, as with spdlog's sinks: <spanprof/delivery/pyroscope_uploader.hpp>,
// <spanprof/delivery/otlp_uploader.hpp>, <spanprof/profile/pprof_encoder.hpp>,
// <spanprof/symbolization/elf_symbolizer.hpp>. So a file that opens guards and
// calls start() compiles no HTTP client, encoder or ELF reader.
#if SPANPROF_DEFINE_RUNTIME
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>
#include <spanprof/runtime/runtime-inl.hpp>
#endif

#endif  // SPANPROF_SPANPROF_HPP_
