// Process-wide lifecycle: start, flush, shutdown, stats.
//
// spanprof::start(options) is optional: the first guard of a process that never
// called it starts spanprof with options_from_environment(). After
// spanprof::shutdown() guards do nothing until start() is called again.
#ifndef SPANPROF_RUNTIME_HPP_
#define SPANPROF_RUNTIME_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/decision_counters.hpp>
#include <spanprof/detail/heap_sampler.hpp>
#include <spanprof/detail/thread_sampler.hpp>
#include <spanprof/detail/worker.hpp>
#include <spanprof/error.hpp>
#include <spanprof/file_uploader.hpp>
#include <spanprof/options.hpp>
#include <spanprof/stats.hpp>
#include <spanprof/symbolizer.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What one start() configured. Guards read it through an atomic pointer and it is
// never freed while the process runs, so a guard racing a restart reads a stale but
// valid configuration instead of freed memory.
struct RunningConfig {
  ProfileKinds profiles = cpu;
  Engine engine = Engine::sampling;
  HeapEngine heap_engine = HeapEngine::sampling;
  SamplerSettings sampler;
  HeapSettings heap;
  std::shared_ptr<Sampler> head_sampler;  // null: profile every span
  std::shared_ptr<TailPolicy> tail_policy;  // null: keep every profile
  std::shared_ptr<AdaptiveTrigger> trigger;  // null: off
};

class Runtime {
 public:
  enum Lifecycle : int { never_started, running, stopped };

  const RunningConfig* config_for_guard() noexcept {
    const RunningConfig* config = config_.load(std::memory_order_acquire);
    if (SPANPROF_LIKELY(config != nullptr)) return config;
    if (lifecycle_.load(std::memory_order_acquire) != never_started) return nullptr;
    start(options_from_environment(), /*only_if_never_started=*/true);
    return config_.load(std::memory_order_acquire);
  }

  bool start(Options options, bool only_if_never_started = false) noexcept {
    std::lock_guard<std::mutex> lock(lifecycle_mutex_);
    if (only_if_never_started && lifecycle_.load() != never_started) return config_.load() != nullptr;
    try {
      auto config = std::make_unique<RunningConfig>();
      normalize(options);
      config->profiles = options.profiles;
      config->engine = options.engine;
      config->heap_engine = options.heap_engine;
      config->heap.interval_bytes = static_cast<std::int64_t>(options.heap_sample_interval_bytes);
      config->heap.max_depth = options.max_stack_depth;
      config->heap.log_words = options.thread_buffer_bytes / sizeof(std::uint64_t);
      config->head_sampler = options.sampler;
      config->tail_policy = options.tail_policy;
      config->trigger = options.trigger;
      config->sampler.generation = ++generation_;
      config->sampler.source = options.source;
      config->sampler.period_ns = 1'000'000'000LL / options.frequency_hz;
      config->sampler.max_depth = options.max_stack_depth;
      config->sampler.buffer_words = options.thread_buffer_bytes / sizeof(std::uint64_t);
      config->sampler.idle_ticks_before_disarm = options.idle_ticks_before_disarm;
      if (options.engine == Engine::sampling) {
        config->sampler.signal_number = install_sample_signal_handler(options.signal_number);
        if (config->sampler.signal_number == 0) {
          report_error(ErrorCode::sampler_failed, "the sampling engine cannot run: no signal for samples");
        }
      }

      Worker::Config worker;
      worker.capacity = options.queue_capacity;
      worker.overflow = options.queue_overflow;
      worker.retry = options.retry;
      worker.spool_directory = options.spool_directory;
      worker.spool_max_bytes = options.spool_max_bytes;
      worker.uploaders = options.uploaders;
      if (worker.uploaders.empty()) worker.uploaders.push_back(std::make_shared<FileUploader>());
      worker.symbolizer = options.symbolizer ? options.symbolizer : std::shared_ptr<Symbolizer>(make_elf_symbolizer());
      worker.comments.push_back(std::string("spanprof ") + SPANPROF_VERSION_STRING);
      if (!options.service_name.empty()) worker.comments.push_back("service.name=" + options.service_name);

      if (lifecycle_.load() == running) {
        config_.store(nullptr, std::memory_order_release);
        worker_.stop(std::chrono::seconds(1));
      }
      if (!worker_.start(std::move(worker))) return false;
      signal_number_ = config->sampler.signal_number;
      config_.store(config.get(), std::memory_order_release);
      configs_.push_back(std::move(config));
      lifecycle_.store(running, std::memory_order_release);
      register_exit_flush();
      return true;
    } catch (...) {
      report_error(ErrorCode::internal, "spanprof::start failed: out of memory");
      return false;
    }
  }

  bool flush(std::chrono::milliseconds timeout) noexcept { return worker_.flush(timeout); }

  bool shutdown(std::chrono::milliseconds timeout) noexcept {
    std::lock_guard<std::mutex> lock(lifecycle_mutex_);
    config_.store(nullptr, std::memory_order_release);
    if (lifecycle_.load() != never_started) lifecycle_.store(stopped, std::memory_order_release);
    // Threads keep their sampler objects (freed at thread exit) but stop receiving
    // signals now, instead of after their idle countdown.
    {
      auto& registry = sampler_registry();
      std::lock_guard<std::mutex> registry_lock(registry.mutex);
      for (ThreadSampler* s = registry.head; s; s = s->registry_next) s->disarm();
    }
    return worker_.stop(timeout);
  }

  void submit(std::unique_ptr<PendingProfile> pending) noexcept { worker_.submit(std::move(pending)); }

  void count_classic_busy() noexcept { classic_busy_.fetch_add(1, std::memory_order_relaxed); }

  Stats stats() noexcept {
    Stats s;
    {
      auto& registry = sampler_registry();
      std::lock_guard<std::mutex> lock(registry.mutex);
      s.guards_opened = registry.retired_guards_opened;
      s.spans_without_samples = registry.retired_spans_without_samples;
      s.samples_captured = registry.retired_samples_captured;
      s.samples_dropped = registry.retired_samples_dropped;
      s.source = registry.last_source;
      for (ThreadSampler* t = registry.head; t; t = t->registry_next) {
        s.guards_opened += t->counters().guards_opened.load(std::memory_order_relaxed);
        s.spans_without_samples += t->counters().spans_without_samples.load(std::memory_order_relaxed);
        s.samples_captured += t->counters().samples_captured.load(std::memory_order_relaxed);
        s.samples_dropped += t->dropped();
        if (t->armed()) ++s.threads_armed;
      }
    }
    s.guards_opened += classic_guards_opened_.load(std::memory_order_relaxed);
    const HeapCounters& heap = heap_counters();
    s.heap_guards_opened = heap.guards_opened.load(std::memory_order_relaxed);
    s.heap_samples_captured = heap.samples_captured.load(std::memory_order_relaxed);
    s.heap_samples_dropped = heap.samples_dropped.load(std::memory_order_relaxed);
    s.heap_hooks_installed = heap_hooks().installed();
    const DecisionCounts decisions = decision_registry().total();
    s.head_declined = decisions.head_declined;
    s.profiles_started = decisions.started;
    s.kept_sampled = decisions.kept[static_cast<std::size_t>(ProfileReason::sampled)];
    s.kept_slow = decisions.kept[static_cast<std::size_t>(ProfileReason::slow)];
    s.kept_error = decisions.kept[static_cast<std::size_t>(ProfileReason::error)];
    s.kept_triggered = decisions.kept[static_cast<std::size_t>(ProfileReason::triggered)];
    s.discarded_by_tail_policy = decisions.discarded;
    if (const RunningConfig* config = config_.load(std::memory_order_acquire); config && config->trigger) {
      const auto trigger = config->trigger->counters();
      s.triggers_armed = trigger.armed;
    }
    const auto& worker = worker_.counters();
    s.profiles_enqueued = worker.enqueued.load(std::memory_order_relaxed);
    s.profiles_dropped = worker.dropped.load(std::memory_order_relaxed);
    s.profiles_uploaded = worker.uploaded.load(std::memory_order_relaxed);
    s.upload_failures = worker.upload_failures.load(std::memory_order_relaxed);
    s.upload_retries = worker.upload_retries.load(std::memory_order_relaxed);
    s.profiles_spooled = worker.spooled.load(std::memory_order_relaxed);
    s.spool_resent = worker.spool_resent.load(std::memory_order_relaxed);
    s.spool_evicted = worker.spool_evicted.load(std::memory_order_relaxed);
    s.spool_pending = worker.spool_pending.load(std::memory_order_relaxed);
    s.queue_length = worker_.queue_length();
    s.classic_busy = classic_busy_.load(std::memory_order_relaxed);
    s.invalid_spans = error_count(ErrorCode::invalid_span_context);
    s.signal_number = signal_number_;
    return s;
  }

  void count_classic_guard() noexcept { classic_guards_opened_.fetch_add(1, std::memory_order_relaxed); }

 private:
  static void normalize(Options& options) noexcept {
    auto clamp = [](auto& value, auto low, auto high, const char* what) {
      if (value < low || value > high) {
        char message[160];
        std::snprintf(message, sizeof message, "%s=%lld is outside [%lld, %lld]; clamped", what,
                      static_cast<long long>(value), static_cast<long long>(low), static_cast<long long>(high));
        report_error(ErrorCode::invalid_configuration, message);
        value = value < low ? low : high;
      }
    };
    clamp(options.frequency_hz, 1, 4000, "frequency_hz");
    clamp(options.max_stack_depth, 1, max_stack_depth_limit, "max_stack_depth");
    clamp(options.thread_buffer_bytes, std::size_t{4096}, std::size_t{1} << 30, "thread_buffer_bytes");
    clamp(options.queue_capacity, std::size_t{1}, std::size_t{1} << 20, "queue_capacity");
    clamp(options.retry.max_attempts, 1, 100, "retry.max_attempts");
    if (!(options.retry.jitter >= 0.0 && options.retry.jitter <= 1.0)) options.retry.jitter = 0.2;
    if (options.retry.initial_backoff.count() < 1) options.retry.initial_backoff = std::chrono::milliseconds(1);
    if (options.retry.max_backoff < options.retry.initial_backoff) options.retry.max_backoff = options.retry.initial_backoff;
    clamp(options.heap_sample_interval_bytes, std::size_t{1}, std::size_t{1} << 30, "heap_sample_interval_bytes");
    clamp(options.idle_ticks_before_disarm, std::uint32_t{1}, std::uint32_t{1} << 30, "idle_ticks_before_disarm");
  }

  // Profiles still queued at exit would be lost; give the worker a short, bounded
  // time to deliver them.
  void register_exit_flush() noexcept {
    if (exit_flush_registered_) return;
    exit_flush_registered_ = true;
    std::atexit([] { runtime_instance().shutdown(std::chrono::milliseconds(2000)); });
  }

  static Runtime& runtime_instance() noexcept;

  std::atomic<const RunningConfig*> config_{nullptr};
  std::atomic<int> lifecycle_{never_started};
  std::mutex lifecycle_mutex_;
  std::vector<std::unique_ptr<RunningConfig>> configs_;  // kept alive: see RunningConfig
  std::uint64_t generation_ = 0;
  int signal_number_ = 0;
  bool exit_flush_registered_ = false;
  Worker worker_;
  std::atomic<std::uint64_t> classic_busy_{0};
  std::atomic<std::uint64_t> classic_guards_opened_{0};
};

// Deliberately leaked: guards on other threads may still use it while static
// destructors run at exit.
SPANPROF_API inline Runtime& runtime() noexcept {
  static Runtime* instance = new Runtime();
  return *instance;
}

inline Runtime& Runtime::runtime_instance() noexcept { return runtime(); }

}  // namespace detail

// Starts (or restarts with new options) profiling. Returns false if the
// background worker could not be started; errors go to the error handler.
inline bool start(Options options = options_from_environment()) noexcept {
  return detail::runtime().start(std::move(options));
}

// Waits until every profile finished so far has been uploaded, or the timeout.
inline bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(5)) noexcept {
  return detail::runtime().flush(timeout);
}

// Stops profiling; delivers what it can within the timeout. Returns false if
// profiles were still pending when the timeout expired.
inline bool shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(5)) noexcept {
  return detail::runtime().shutdown(timeout);
}

inline Stats stats() noexcept { return detail::runtime().stats(); }

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_HPP_
