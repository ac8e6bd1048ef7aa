// Everything that can be configured, with defaults meant for production.
//
// One precedence rule for every setting: code > environment > built-in default.
//
//   spanprof::Options options;      // built-in defaults, overlaid with the environment
//   options.frequency_hz = 250;     // code wins over SPANPROF_FREQUENCY
//   spanprof::start(options);       // reports every problem, and returns them
//
// Options(spanprof::ignore_environment) starts from the built-in defaults alone.
// The built-in defaults are the initializers below, stated nowhere else. Each
// member's variable, range and meaning is its row in the table of
// detail/runtime/settings.hpp, which docs/configuration.md shows; a new member needs a
// row there. What reads the environment is in options-inl.hpp, compiled with the
// runtime (config.hpp).
#ifndef SPANPROF_RUNTIME_OPTIONS_HPP_
#define SPANPROF_RUNTIME_OPTIONS_HPP_

#include <spanprof/base/clock.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/delivery/file_uploader.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

struct IgnoreEnvironment {
  explicit constexpr IgnoreEnvironment() = default;
};
inline constexpr IgnoreEnvironment ignore_environment{};

struct Options {
  // The built-in defaults, overlaid with every variable the environment sets.
  SPANPROF_API Options() noexcept;
  // The built-in defaults alone.
  explicit Options(IgnoreEnvironment) noexcept {}

  // ---- what is recorded ------------------------------------------------------------
  ProfileKinds profiles = cpu;  // what a guard records unless it says otherwise
  CpuEngine cpu_engine = CpuEngine::sampling;
  HeapEngine heap_engine = HeapEngine::sampling;
  CpuSampleSource cpu_sample_source = CpuSampleSource::automatic;
  int frequency_hz = 100;     // CPU samples per CPU-second
  // Wall-clock samples per second of a thread in a wall-profiled span.
  // Its cost grows with the threads in wall spans, not the cores (docs/wall.md).
  int wall_frequency_hz = 100;
  int max_stack_depth = 64;   // frames kept per sample
  // Mean allocated bytes between two heap samples (exponentially distributed, as in
  // Go and tcmalloc). Smaller is more precise and costs more stack captures.
  std::size_t heap_sample_interval_bytes = 512 * 1024;
  // Per profiling thread; holds the samples of its open spans. At 100 Hz and ~25
  // frames a sample this is over two minutes of CPU inside one span.
  std::size_t thread_buffer_bytes = 512 * 1024;
  // Real-time signal that carries samples. 0 picks a free one from SIGRTMIN+4 up.
  // SIGPROF is left to gperftools so the classic engine and CPUPROFILE keep working.
  int signal_number = 0;
  // A thread whose sampler fired this many times with no open span disarms it
  // (re-armed by its next guard): idle threads stop paying for signals.
  std::uint32_t idle_ticks_before_disarm = 200;
  // The ticker thread sends the POSIX CPU timer's sampling points the kernel is late
  // with, and the edges of spans that run long take those they passed, so that each
  // span keeps its own CPU on a saturated machine (docs/engines.md, "Under load" and
  // "At a span's edges"; its cost: docs/cost.md). Off: the timer alone, as the kernel
  // delivers.
  bool watch_cpu_ticks = true;
  // Each profiled span's elapsed time split into running, waiting for a CPU and
  // blocked, with its context switches, from the kernel's accounting of the thread
  // (docs/time_split.md): three system calls at its open and close, a few µs a span.
  bool time_split = false;

  // ---- the whole process, all the time (docs/continuous.md) ------------------------------
  // Every thread of the process sampled on its own CPU clock at frequency_hz, in a
  // span or not (threads started before start(), later, and by libraries): one CPU
  // profile of the process per window, each sample taken in a span labelled with it.
  bool continuous = false;
  // Which open span a continuous sample is labelled with: the thread's outermost (a
  // request's own span, as Pyroscope's SDKs label), the innermost, or none.
  ContinuousSpanLabels continuous_span_labels = ContinuousSpanLabels::local_root;
  // The continuous profile's window, aligned to the wall clock.
  std::uint32_t continuous_window_ms = 10'000;

  // ---- which spans are profiled (docs/sampling.md) -----------------------------------
  // The head sampler decides when a guard opens (null: every span); the tail policy,
  // when it closes, keeps or discards what was recorded (null: keep all); the
  // adaptive trigger profiles the next spans of a name whose latency jumped (null: off).
  std::shared_ptr<HeadSampler> head_sampler;
  std::shared_ptr<TailPolicy> tail_policy;
  std::shared_ptr<AdaptiveTrigger> trigger;

  // ---- where profiles go (docs/delivery.md) ------------------------------------------
  std::vector<std::shared_ptr<Uploader>> uploaders;  // empty: a FileUploader into output_directory
  std::string output_directory = FileUploader::default_directory;
  std::size_t queue_capacity = 256;  // finished profiles waiting in the hand-off, and items in the sender's outbox
  OverflowPolicy queue_overflow = OverflowPolicy::drop_newest;
  RetryPolicy retry;
  // Where profiles an uploader could not deliver wait to be re-sent (also after a
  // restart), bounded; the oldest are dropped first. Empty: no spool.
  std::string spool_directory;
  std::uint64_t spool_max_bytes = 256u << 20;
  std::shared_ptr<Symbolizer> symbolizer;  // null: ELF symbol tables of the process
  // Where the default symbolizer looks for separate debug files (stripped programs
  // and libraries), colon-separated, in order: by build id, DIR/.build-id/ab/cdef....debug
  // (docs/source-lines.md).
  std::string debug_directories = detail::default_debug_directory;
  // What the default symbolizer's sources of lines (DWARF read or inflated, and what
  // was learned of it) keep together, for the whole process. Past it, the objects
  // looked up least recently lose their lines and keep their names
  // (Stats::source_lines_dropped; docs/source-lines.md).
  std::uint64_t source_lines_max_bytes = detail::default_source_lines_max_bytes;
  // How much of a system library's DWARF (a distribution's debug package) the
  // default symbolizer reads: names only by default; the program's is read whole.
  SystemLibraryLines system_library_lines = detail::default_system_library_lines;
  std::string service_name;  // recorded in every profile as a comment
  // Publishes the process context for profilers outside the process (OTEP 4719): a
  // mapping named OTEL_CTX with service.name, process.pid, the SDK and the names of
  // the thread context's attribute keys (docs/otel-context.md). Off: none.
  bool publish_process_context = false;
  // The time batch windows, retry backoff and the spool's re-sends run on (null:
  // the monotonic clock). A test gives a ManualClock and advances it instead of
  // sleeping through a 10 s window or a backoff.
  std::shared_ptr<const Clock> clock;

  // What the environment got wrong when these options were made; start() reports
  // each and returns them with its own findings.
  std::vector<ConfigurationProblem> environment_problems;
};

#if !SPANPROF_ENABLED
inline Options::Options() noexcept {}
#endif

// The head sampler SPANPROF_SAMPLER, SPANPROF_SAMPLER_ARG and
// SPANPROF_MAX_PROFILES_PER_SECOND describe (null: every span), reporting each bad
// value. What Options() does for its head_sampler, on its own.
#if SPANPROF_ENABLED
SPANPROF_API std::shared_ptr<HeadSampler> head_sampler_from_environment() noexcept;

// The uploaders PYROSCOPE_* and OTEL_EXPORTER_OTLP_* describe, reporting each bad
// value. What Options() does for its uploaders, on its own.
SPANPROF_API std::vector<std::shared_ptr<Uploader>> uploaders_from_environment() noexcept;

// Every setting as `name=value` lines, in the order of the struct: for a startup
// log line, and to see what the environment changed.
SPANPROF_API std::string describe(const Options& options);
#else
// Compiled out, nothing reads the environment.
inline std::shared_ptr<HeadSampler> head_sampler_from_environment() noexcept { return nullptr; }
inline std::vector<std::shared_ptr<Uploader>> uploaders_from_environment() noexcept { return {}; }
inline std::string describe(const Options&) { return "spanprof is compiled out (SPANPROF_ENABLED=0)\n"; }
#endif

// The name of 0.1, kept for one release. Options() now reads the environment
// itself, and code wins over it; this returns `options` unchanged.
[[deprecated("Options() reads the environment itself; code now wins over it")]] inline Options
options_from_environment(Options options = {}) noexcept {
  return options;
}
[[deprecated("renamed spanprof::head_sampler_from_environment")]] inline std::shared_ptr<HeadSampler>
sampler_from_environment() noexcept {
  return head_sampler_from_environment();
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_OPTIONS_HPP_
