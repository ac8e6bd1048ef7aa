// Everything that can be configured, with defaults meant for production.
#ifndef SPANPROF_OPTIONS_HPP_
#define SPANPROF_OPTIONS_HPP_

#include <spanprof/adaptive_trigger.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery_policy.hpp>
#include <spanprof/error.hpp>
#include <spanprof/profile.hpp>
#include <spanprof/sampler.hpp>
#include <spanprof/symbolizer.hpp>
#include <spanprof/tail_policy.hpp>
#include <spanprof/uploader.hpp>
#include <spanprof/file_uploader.hpp>
#if SPANPROF_WITH_CURL
#include <spanprof/environment_uploaders.hpp>
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

enum class Engine : std::uint8_t {
  // Per-thread CPU-time sampling, armed once per thread; a guard only marks the
  // thread's active span. Concurrent spans get exactly their own samples.
  sampling,
  // gperftools' ProfilerStart/ProfilerStop around the scope. One scope at a time
  // per process and ~5 ms per scope: for comparison and for environments where the
  // sampling engine cannot run.
  classic,
};

enum class HeapEngine : std::uint8_t {
  // tcmalloc's allocation hooks, live only while a heap-profiled scope is open, record
  // one allocation per ~heap_sample_interval_bytes of the profiled threads and scale
  // the counts to unbiased estimates. Concurrent scopes get their own allocations.
  sampling,
  // gperftools' HeapProfilerStart/GetHeapProfile/HeapProfilerStop around the scope:
  // every allocation of every thread, one scope at a time, and an alloc-heavy loop
  // runs ~30x slower. For comparison and for exact counts in a test rig.
  classic,
};

enum class SamplingSource : std::uint8_t {
  automatic,    // perf_event when the kernel allows it, else posix_timer (reported)
  perf_event,   // perf task-clock event: hrtimer driven, unbiased for any span length
  posix_timer,  // timer_create(CLOCK_THREAD_CPUTIME_ID): tick bound, misses spans < ~5 ms
};

constexpr std::string_view to_string(Engine e) noexcept { return e == Engine::sampling ? "sampling" : "classic"; }
constexpr std::string_view to_string(HeapEngine e) noexcept {
  return e == HeapEngine::sampling ? "sampling" : "classic";
}
constexpr std::string_view to_string(SamplingSource s) noexcept {
  switch (s) {
    case SamplingSource::automatic: return "automatic";
    case SamplingSource::perf_event: return "perf_event";
    case SamplingSource::posix_timer: return "posix_timer";
  }
  return "unknown";
}

struct Options {
  ProfileKinds profiles = cpu;  // what a guard records unless it says otherwise
  Engine engine = Engine::sampling;
  HeapEngine heap_engine = HeapEngine::sampling;
  // Mean allocated bytes between two heap samples (exponentially distributed, as in
  // Go and tcmalloc). Smaller is more precise and costs more stack captures.
  std::size_t heap_sample_interval_bytes = 512 * 1024;
  SamplingSource source = SamplingSource::automatic;
  int frequency_hz = 100;      // CPU samples per CPU-second (1..4000)
  int max_stack_depth = 64;    // frames kept per sample (1..256)
  // Per profiling thread; holds the samples of its open spans. At 100 Hz and ~25
  // frames a sample this is over two minutes of CPU inside one span.
  std::size_t thread_buffer_bytes = 512 * 1024;
  // Real-time signal that carries samples. 0 picks a free one from SIGRTMIN+4 up.
  // SIGPROF is left to gperftools so the classic engine and CPUPROFILE keep working.
  int signal_number = 0;
  // A thread whose sampler fired this many times with no open span disarms it
  // (re-armed by its next guard): idle threads stop paying for signals.
  std::uint32_t idle_ticks_before_disarm = 200;
  std::size_t queue_capacity = 256;  // finished profiles waiting for the worker
  OverflowPolicy queue_overflow = OverflowPolicy::drop_newest;
  RetryPolicy retry;
  // Where profiles an uploader could not deliver wait to be re-sent (also after a
  // restart), bounded; the oldest are dropped first. Empty: no spool.
  std::string spool_directory;
  std::uint64_t spool_max_bytes = 256u << 20;
  // Conditional profiling (docs/sampling.md). The head sampler decides when a guard
  // opens (null: every span); the tail policy, when it closes, keeps or discards
  // what was recorded (null: keep all); the adaptive trigger profiles the next
  // spans of a name whose latency jumped (null: off).
  std::shared_ptr<Sampler> sampler;
  std::shared_ptr<TailPolicy> tail_policy;
  std::shared_ptr<AdaptiveTrigger> trigger;
  std::shared_ptr<Symbolizer> symbolizer;  // null: ELF symbol tables of the process
  std::vector<std::shared_ptr<Uploader>> uploaders;  // empty: a FileUploader
  std::string service_name;  // recorded in every profile as a comment; empty: $OTEL_SERVICE_NAME
};

namespace detail {

inline bool parse_int_env(const char* name, long min, long max, long& out) noexcept {
  const char* text = std::getenv(name);
  if (!text || !*text) return false;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) {
    char message[256];
    std::snprintf(message, sizeof message, "%s=\"%.64s\" is not a number in [%ld, %ld]; using the default", name,
                  text, min, max);
    report_error(ErrorCode::invalid_configuration, message);
    return false;
  }
  out = value;
  return true;
}

inline std::shared_ptr<TailPolicy> tail_policy_from_environment() noexcept {
  const char* keep = std::getenv("SPANPROF_KEEP");
  if (!keep || !*keep) return nullptr;
  const std::string_view k = keep;
  long threshold_ms = 100;
  parse_int_env("SPANPROF_SLOW_THRESHOLD_MS", 0, 86'400'000, threshold_ms);
  try {
    auto slow = std::make_shared<KeepSlowSpans>(std::chrono::milliseconds(threshold_ms));
    auto errors = std::make_shared<KeepErroredSpans>();
    if (k == "all") return nullptr;
    if (k == "slow") return slow;
    if (k == "error") return errors;
    if (k == "slow,error") return keep_any_of({slow, errors});
    if (k == "error,slow") return keep_any_of({errors, slow});
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory reading SPANPROF_KEEP");
    return nullptr;
  }
  report_error(ErrorCode::invalid_configuration, "SPANPROF_KEEP must be all, slow, error or slow,error; keeping all");
  return nullptr;
}

inline std::shared_ptr<AdaptiveTrigger> trigger_from_environment() noexcept {
  const char* factor_text = std::getenv("SPANPROF_TRIGGER_FACTOR");
  if (!factor_text || !*factor_text) return nullptr;
  char* end = nullptr;
  const double factor = std::strtod(factor_text, &end);
  if (*end != '\0' || !(factor > 1.0) || factor > 1000.0) {
    report_error(ErrorCode::invalid_configuration, "SPANPROF_TRIGGER_FACTOR must be a number in (1, 1000]; trigger off");
    return nullptr;
  }
  AdaptiveTriggerOptions trigger;
  trigger.factor = factor;
  long spans = 0;
  if (parse_int_env("SPANPROF_TRIGGER_SPANS", 1, 1000, spans)) trigger.spans_to_profile = static_cast<std::uint32_t>(spans);
  try {
    return std::make_shared<AdaptiveTrigger>(trigger);
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory creating the adaptive trigger");
    return nullptr;
  }
}

}  // namespace detail

// Options with environment overrides, for operators who cannot rebuild:
//   SPANPROF_ENGINE=sampling|classic   SPANPROF_SOURCE=automatic|perf_event|posix_timer
//   SPANPROF_FREQUENCY=<hz>            SPANPROF_OUTPUT_DIR=<dir> (FileUploader)
//   SPANPROF_SIGNAL=<number>           OTEL_SERVICE_NAME=<name>
//   SPANPROF_PROFILES=cpu|heap|cpu,heap
//   SPANPROF_HEAP_ENGINE=sampling|classic  SPANPROF_HEAP_INTERVAL=<bytes>
//   SPANPROF_SAMPLER, SPANPROF_SAMPLER_ARG, SPANPROF_MAX_PROFILES_PER_SECOND (head)
//   SPANPROF_KEEP=all|slow|error|slow,error  SPANPROF_SLOW_THRESHOLD_MS=<ms> (tail)
//   SPANPROF_TRIGGER_FACTOR=<x>        SPANPROF_TRIGGER_SPANS=<n> (adaptive trigger)
//   SPANPROF_SPOOL_DIR=<dir>  SPANPROF_SPOOL_MAX_MB=<n>  SPANPROF_UPLOAD_ATTEMPTS=<n>
//   SPANPROF_QUEUE_OVERFLOW=drop_newest|drop_oldest
// A bad value is reported and the default kept.
inline Options options_from_environment(Options options = {}) noexcept {
  long value = 0;
  if (!options.sampler) options.sampler = sampler_from_environment();
  if (const char* spool = std::getenv("SPANPROF_SPOOL_DIR"); spool && *spool && options.spool_directory.empty()) {
    try {
      options.spool_directory = spool;
    } catch (...) {
    }
  }
  if (detail::parse_int_env("SPANPROF_SPOOL_MAX_MB", 1, 1L << 20, value))
    options.spool_max_bytes = static_cast<std::uint64_t>(value) << 20;
  if (detail::parse_int_env("SPANPROF_UPLOAD_ATTEMPTS", 1, 100, value)) options.retry.max_attempts = static_cast<int>(value);
  if (const char* overflow = std::getenv("SPANPROF_QUEUE_OVERFLOW"); overflow && *overflow) {
    const std::string_view o = overflow;
    if (o == "drop_newest") options.queue_overflow = OverflowPolicy::drop_newest;
    else if (o == "drop_oldest") options.queue_overflow = OverflowPolicy::drop_oldest;
    else
      report_error(ErrorCode::invalid_configuration,
                   "SPANPROF_QUEUE_OVERFLOW must be drop_newest or drop_oldest; using drop_newest");
  }
  if (!options.tail_policy) options.tail_policy = detail::tail_policy_from_environment();
  if (!options.trigger) options.trigger = detail::trigger_from_environment();
  if (detail::parse_int_env("SPANPROF_HEAP_INTERVAL", 1, 1L << 30, value))
    options.heap_sample_interval_bytes = static_cast<std::size_t>(value);
  if (const char* profiles = std::getenv("SPANPROF_PROFILES"); profiles && *profiles) {
    const std::string_view p = profiles;
    if (p == "cpu") options.profiles = cpu;
    else if (p == "heap") options.profiles = heap;
    else if (p == "cpu,heap" || p == "heap,cpu") options.profiles = cpu | heap;
    else report_error(ErrorCode::invalid_configuration, "SPANPROF_PROFILES must be cpu, heap or cpu,heap; using cpu");
  }
  if (const char* engine = std::getenv("SPANPROF_HEAP_ENGINE"); engine && *engine) {
    const std::string_view e = engine;
    if (e == "sampling") options.heap_engine = HeapEngine::sampling;
    else if (e == "classic") options.heap_engine = HeapEngine::classic;
    else
      report_error(ErrorCode::invalid_configuration, "SPANPROF_HEAP_ENGINE must be sampling or classic; using sampling");
  }
  if (detail::parse_int_env("SPANPROF_FREQUENCY", 1, 4000, value)) options.frequency_hz = static_cast<int>(value);
  if (detail::parse_int_env("SPANPROF_SIGNAL", 1, 64, value)) options.signal_number = static_cast<int>(value);
  if (const char* engine = std::getenv("SPANPROF_ENGINE"); engine && *engine) {
    const std::string_view e = engine;
    if (e == "sampling") options.engine = Engine::sampling;
    else if (e == "classic") options.engine = Engine::classic;
    else report_error(ErrorCode::invalid_configuration, "SPANPROF_ENGINE must be sampling or classic; using sampling");
  }
  if (const char* source = std::getenv("SPANPROF_SOURCE"); source && *source) {
    const std::string_view s = source;
    if (s == "automatic") options.source = SamplingSource::automatic;
    else if (s == "perf_event") options.source = SamplingSource::perf_event;
    else if (s == "posix_timer") options.source = SamplingSource::posix_timer;
    else
      report_error(ErrorCode::invalid_configuration,
                   "SPANPROF_SOURCE must be automatic, perf_event or posix_timer; using automatic");
  }
  if (options.service_name.empty()) {
    if (const char* name = std::getenv("OTEL_SERVICE_NAME"); name && *name) {
      try {
        options.service_name = name;
      } catch (...) {
      }
    }
  }
#if SPANPROF_WITH_CURL
  // Backends named in the environment join the configured uploaders. An explicit
  // SPANPROF_OUTPUT_DIR keeps the file uploader too (it is the default only when
  // nothing else is configured).
  try {
    auto remote = uploaders_from_environment();
    if (!remote.empty()) {
      const char* dir = std::getenv(FileUploader::directory_env);
      if (options.uploaders.empty() && dir && *dir) options.uploaders.push_back(std::make_shared<FileUploader>());
      for (auto& uploader : remote) options.uploaders.push_back(std::move(uploader));
    }
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory configuring uploaders from the environment");
  }
#endif
  return options;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_OPTIONS_HPP_
