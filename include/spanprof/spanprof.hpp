// spanprof — span-scoped CPU and heap profiles for C++ services, labelled with the span's
// trace and span ids so Pyroscope, Grafana and `go tool pprof` can find the
// profile of one slow request.
//
//   #include <spanprof/spanprof.hpp>
//   void handle(Request& r, const Span& span) {
//     spanprof::ScopedProfile guard(span);
//     ...
//   }
#ifndef SPANPROF_SPANPROF_HPP_
#define SPANPROF_SPANPROF_HPP_

#include <spanprof/config.hpp>
#include <spanprof/error.hpp>
#include <spanprof/span_context.hpp>
#include <spanprof/span_adapter.hpp>
#include <spanprof/scoped_profile.hpp>
#include <spanprof/tail_policy.hpp>

#if SPANPROF_ENABLED
#include <spanprof/adaptive_trigger.hpp>
#include <spanprof/clock.hpp>
#include <spanprof/file_uploader.hpp>
#include <spanprof/options.hpp>
#include <spanprof/pprof_encoder.hpp>
#include <spanprof/profile.hpp>
#include <spanprof/runtime.hpp>
#include <spanprof/sampler.hpp>
#include <spanprof/stats.hpp>
#include <spanprof/symbolizer.hpp>
#include <spanprof/uploader.hpp>
#if SPANPROF_WITH_CURL
#include <spanprof/environment_uploaders.hpp>
#include <spanprof/otlp_uploader.hpp>
#include <spanprof/pyroscope_uploader.hpp>
#endif
#endif

#endif  // SPANPROF_SPANPROF_HPP_
