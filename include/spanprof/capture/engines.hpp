// The capture engines a guard can use, and where the CPU engine's samples come
// from. docs/engines.md explains the choice and what each costs.
#ifndef SPANPROF_CAPTURE_ENGINES_HPP_
#define SPANPROF_CAPTURE_ENGINES_HPP_

#include <spanprof/config.hpp>

#include <cstdint>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

enum class CpuEngine : std::uint8_t {
  // Per-thread CPU-time sampling, armed once per thread; a guard only marks the
  // thread's active span. Concurrent spans get exactly their own samples.
  sampling,
  // gperftools' ProfilerStart/ProfilerStop around the scope. One scope at a time
  // per process and ~0.5-5 ms per scope: for comparison, and for environments where
  // the sampling engine cannot run.
  classic,
};

enum class HeapEngine : std::uint8_t {
  // Allocation hooks (spanprof's operator new/delete, or tcmalloc's MallocHook, live
  // only while a heap-profiled scope is open) record one allocation per
  // ~heap_sample_interval_bytes of the profiled threads and scale the counts to
  // unbiased estimates. Concurrent scopes get their own allocations.
  sampling,
  // gperftools' HeapProfilerStart/GetHeapProfile/HeapProfilerStop around the scope:
  // every allocation of every thread, one scope at a time, and an alloc-heavy loop
  // runs ~30x slower. For comparison and for exact counts in a test rig.
  classic,
};

// Where the sampling CPU engine's ticks come from.
enum class CpuSampleSource : std::uint8_t {
  automatic,    // posix_timer: no cost at context switches (docs/cost.md)
  perf_event,   // perf task-clock event: exact to the microsecond, paid at every context switch
  posix_timer,  // timer_create(CLOCK_THREAD_CPUTIME_ID): fires on the scheduler tick, weighted
};

// Which open span labels a sample of the process's continuous profile
// (Options::continuous, docs/continuous.md).
enum class ContinuousSpanLabels : std::uint8_t {
  local_root,  // the outermost span open on the thread (a request's own), as every Pyroscope SDK labels
  innermost,   // the span the thread runs in
  none,        // no span labels
};

constexpr std::string_view to_string(CpuEngine e) noexcept { return e == CpuEngine::sampling ? "sampling" : "classic"; }
constexpr std::string_view to_string(HeapEngine e) noexcept {
  return e == HeapEngine::sampling ? "sampling" : "classic";
}
constexpr std::string_view to_string(CpuSampleSource s) noexcept {
  switch (s) {
    case CpuSampleSource::automatic: return "automatic";
    case CpuSampleSource::perf_event: return "perf_event";
    case CpuSampleSource::posix_timer: return "posix_timer";
  }
  return "unknown";
}

constexpr std::string_view to_string(ContinuousSpanLabels l) noexcept {
  switch (l) {
    case ContinuousSpanLabels::local_root: return "local_root";
    case ContinuousSpanLabels::innermost: return "innermost";
    case ContinuousSpanLabels::none: return "none";
  }
  return "unknown";
}

// The names of 0.1, kept for one release.
using Engine [[deprecated("renamed spanprof::CpuEngine")]] = CpuEngine;
using SamplingSource [[deprecated("renamed spanprof::CpuSampleSource")]] = CpuSampleSource;

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_CAPTURE_ENGINES_HPP_
