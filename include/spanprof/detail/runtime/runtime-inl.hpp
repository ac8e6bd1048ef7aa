// The runtime behind start(), flush(), shutdown() and stats() (runtime.hpp): the
// running configuration, the background worker, fork handling. Compiled once per
// program: in the source file that defines SPANPROF_IMPLEMENTATION, or in the
// compiled library (config.hpp).
#ifndef SPANPROF_DETAIL_RUNTIME_RUNTIME_INL_HPP_
#define SPANPROF_DETAIL_RUNTIME_RUNTIME_INL_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/loader_lock_gate.hpp>
#include <spanprof/detail/capture/process_sampler.hpp>
#include <spanprof/detail/capture/stack_sampler.hpp>
#include <spanprof/detail/capture/heap_sampler.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/wall_ticker.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/file_uploader.hpp>
#include <spanprof/detail/delivery/http_client.hpp>
#include <spanprof/detail/delivery/worker.hpp>
#include <spanprof/detail/runtime/config_retirement.hpp>
#include <spanprof/detail/runtime/running_config.hpp>
#include <spanprof/detail/runtime/guard_host.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/detail/runtime/options-inl.hpp>
#include <spanprof/detail/runtime/process_context.hpp>
#include <spanprof/runtime/runtime.hpp>
#include <spanprof/detail/runtime/runtime_marker.hpp>
#include <spanprof/detail/runtime/settings.hpp>
#include <spanprof/runtime/stats.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#if SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME

// Which ABI namespace started first. Outside every ABI namespace (and the same text
// in all of them) so that all copies see one variable: two configurations in one
// process run two independent copies of spanprof, which is worth a word.
namespace spanprof {
namespace process_wide {
SPANPROF_API inline std::atomic<const char*>& abi_in_use() noexcept {
  static std::atomic<const char*> abi{nullptr};
  return abi;
}
}  // namespace process_wide
}  // namespace spanprof

SPANPROF_NAMESPACE_BEGIN

namespace detail {

class Runtime final : public GuardHost {
 public:
  enum Lifecycle : int { never_started, running, stopped };

  Runtime() noexcept { ::pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child); }

  void start_for_guard() noexcept override {
    const int lifecycle = lifecycle_.load(std::memory_order_acquire);
    if (lifecycle == never_started) start(Options(), /*only_if_never_started=*/true);
    else if (lifecycle == stopped && SPANPROF_UNLIKELY(stopped_by_fork_.load(std::memory_order_relaxed)))
      report_stopped_by_fork();
  }

  bool submit(std::unique_ptr<CapturedProfile> captured) noexcept override { return worker_.submit(std::move(captured)); }

  StartResult start(Options options, bool only_if_never_started = false) noexcept {
    StartResult result;
    std::lock_guard<std::mutex> held(lifecycle_mutex_);
    GuardHostState& host = guard_host_state();
    if (only_if_never_started && lifecycle_.load() != never_started) {
      if (host.config.load() == nullptr) result = StartResult(Status(ErrorCode::not_running, "spanprof was shut down"));
      return result;
    }
    SPANPROF_TRY {
      result.problems = std::move(options.environment_problems);
      normalize(options, result.problems);
      check_abi(result.problems);
      check_other_runtimes(result.problems);
      for (const ConfigurationProblem& problem : result.problems) report_error(ErrorCode::invalid_configuration, problem.message);

      StartPlan plan = plan_start(options);
      auto config = std::make_unique<RunningConfig>();
      static_cast<CaptureSettings&>(*config) = std::move(plan.capture);
      config->head_threshold = config->head_sampler ? config->head_sampler->trace_id_threshold() : 0;
      config->has_trigger = config->trigger != nullptr;
      config->sampler.generation = ++generation_;
      // The signal carries the sampling engine's CPU ticks and, whatever the CPU
      // engine, every wall tick.
      config->sampler.signal_number = install_sample_signal_handler(plan.signal_number);
      if (config->sampler.signal_number == 0) {
        report_error(ErrorCode::sampler_failed, "the sampling engine cannot run: no signal for samples");
      } else if (config->cpu_engine == CpuEngine::sampling && config->sampler.source != CpuSampleSource::posix_timer) {
        wall_ticker().hold_perf_hooks_on();
      }

      // The process's continuous profile: every thread's timer is made by the
      // merger, at each of its looks, which takes the samples too.
      ProcessSampler& process = ProcessSampler::instance();
      lock_hooks_on.every_thread.store(false, std::memory_order_relaxed);
      if (plan.continuous.on && config->sampler.signal_number != 0) {
        std::string why;
        if (process.start(plan.continuous, config->sampler.signal_number, why)) {
          config->labels_spans = plan.continuous.span_labels != ContinuousSpanLabels::none;
          // With the lock kind, every thread's lock waits too (docs/locks.md).
          if (config->profiles.contains(ProfileKind::lock)) {
            lock_hooks_on.every_thread.store(true, std::memory_order_relaxed);
            lock_hooks_on.store(true, std::memory_order_relaxed);
          }
          plan.delivery.continuous = &take_continuous_samples;
          scan_continuous_threads();  // the threads there are now, sampled from now
        } else {
          report_error(ErrorCode::sampler_failed, "the continuous profile cannot run: " + why);
        }
      } else {
        if (plan.continuous.on) report_error(ErrorCode::sampler_failed, "the continuous profile cannot run: no signal for samples");
        process.stop();
      }

      Worker::Config& worker = plan.delivery;
      if (worker.uploaders.empty()) worker.uploaders.push_back(std::make_shared<FileUploader>(plan.output_directory));
      if (!worker.symbolizer) worker.symbolizer = make_elf_symbolizer(std::move(plan.symbolizer));
      worker.comments.push_back(std::string("spanprof ") + SPANPROF_VERSION_STRING);
      worker.watchdog = [signal = config->sampler.signal_number] { watch_sample_signal(signal); };
      // Each look reads every sampled thread's CPU clock, a system call each, on
      // the core a saturated server's requests want. A thread that blocked the
      // signal is refused at its second look: 200 periods of ticks queued at most
      // (the kernel's queue holds ~1,000 per user by default), and a second at most
      // at the default 100 Hz.
      worker.watchdog_interval = std::chrono::milliseconds(
          std::clamp<std::int64_t>(config->sampler.period_ns / 10'000, 100, 1000));
      if (!plan.service_name.empty()) worker.comments.push_back("service.name=" + plan.service_name);

      if (lifecycle_.load() == running) {
        host.config.store(nullptr, std::memory_order_release);
        worker_.stop(std::chrono::seconds(1));
      }
      retirement_.retire(std::move(current_config_));
      trigger_.reset();
      if (!worker_.start(std::move(worker))) {
        retirement_.reclaim();
        static_cast<Status&>(result) = Status(ErrorCode::internal, "spanprof::start: the delivery threads could not start");
        return result;
      }
      signal_number_ = config->sampler.signal_number;
      trigger_ = config->trigger;
      host.config.store(config.get(), std::memory_order_release);
      current_config_ = std::move(config);
      retirement_.reclaim();
      lifecycle_.store(running, std::memory_order_release);
      started_implicitly_ = only_if_never_started;
      stopped_by_fork_.store(false, std::memory_order_relaxed);
      register_exit_flush();
      // For profilers outside the process (OTEP 4719); a failure is reported and
      // profiling runs on.
      if (plan.publish_process_context) process_context_.publish(plan.service_name);
      else process_context_.withdraw();
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "spanprof::start failed: out of memory");
      static_cast<Status&>(result) = Status(ErrorCode::internal, "spanprof::start failed: out of memory");
    }
    return result;
  }

  Status flush(std::chrono::milliseconds timeout) noexcept { return delivered(worker_.flush(timeout), "flush", timeout); }

  Status shutdown(std::chrono::milliseconds timeout) noexcept { return delivered(stop(timeout), "shutdown", timeout); }

  static Status delivered(bool drained, const char* call, std::chrono::milliseconds timeout) noexcept {
    if (drained) return Status::ok();
    char message[96];
    std::snprintf(message, sizeof message, "%s: profiles still pending after %lld ms", call,
                  static_cast<long long>(timeout.count()));
    return Status(ErrorCode::timed_out, message);
  }

  bool stop(std::chrono::milliseconds timeout) noexcept {
    std::lock_guard<std::mutex> held(lifecycle_mutex_);
    guard_host_state().config.store(nullptr, std::memory_order_release);
    if (lifecycle_.load() != never_started) lifecycle_.store(stopped, std::memory_order_release);
    process_context_.withdraw();
    retirement_.retire(std::move(current_config_));
    trigger_.reset();
    retirement_.reclaim();
    // The continuous profile's timers go; its last samples go out with the flush below.
    lock_hooks_on.every_thread.store(false, std::memory_order_relaxed);
    ProcessSampler::instance().stop();
    // Threads keep their sampler objects (freed at thread exit) but stop receiving
    // signals now, instead of after their idle countdown.
    {
      auto& list = stack_sampler_list();
      std::lock_guard<std::mutex> list_lock(list.mutex);
      for (ThreadStackSampler* s = list.head; s; s = s->registry_next) s->disarm();
    }
    return worker_.stop(timeout);
  }

  Stats stats() noexcept {
    Stats s;
    {
      auto& list = stack_sampler_list();
      std::lock_guard<std::mutex> held(list.mutex);
      s.cpu_sample_source = list.last_source;
      for (ThreadStackSampler* t = list.head; t; t = t->registry_next)
        if (t->armed()) ++s.threads_armed;
    }
    const CounterTotals c = counter_registry().totals();
    s.guards_opened = c[Counter::cpu_guards_opened];
    s.spans_without_samples = c[Counter::spans_without_samples];
    s.spans_moved = c[Counter::spans_moved];
    s.samples_captured = c[Counter::cpu_samples_captured];
    s.samples_dropped = c[Counter::cpu_samples_dropped];
    s.wall_guards_opened = c[Counter::wall_guards_opened];
    s.wall_samples_captured = c[Counter::wall_samples_captured];
    s.wall_samples_dropped = c[Counter::wall_samples_dropped];
    s.wall_ticks_signalled = c[Counter::wall_ticks_signalled];
    s.cpu_ticks_watched = c[Counter::cpu_ticks_watched];
    s.cpu_ticks_at_close = c[Counter::cpu_ticks_at_close];
    s.cpu_ticks_behind = c[Counter::cpu_ticks_behind];
    s.cpu_source_changes = c[Counter::cpu_source_changes];
    s.wall_ticks_confirmed = c[Counter::wall_ticks_confirmed];
    s.heap_guards_opened = c[Counter::heap_guards_opened];
    s.heap_samples_captured = c[Counter::heap_samples_captured];
    s.heap_samples_dropped = c[Counter::heap_samples_dropped];
    s.heap_hooks_installed = heap_hooks().installed();
    s.lock_waits_recorded = c[Counter::lock_waits_recorded];
    s.lock_waits_dropped = c[Counter::lock_waits_dropped];
    s.lock_waits_untracked = c[Counter::lock_waits_untracked];
    s.classic_busy = c[Counter::classic_busy];
    s.continuous_threads = ProcessSampler::instance().threads_sampled();
    s.continuous_threads_on_perf_event = ProcessSampler::instance().threads_on_events();
    s.continuous_threads_left_out = ProcessSampler::instance().threads_left_out();
    s.continuous_samples = c[Counter::continuous_samples];
    s.continuous_samples_dropped = c[Counter::continuous_samples_dropped];
    s.continuous_timers_refused = c[Counter::continuous_timers_refused];
    s.head_declined = c[Counter::head_declined];
    s.profiles_started = c[Counter::profiles_started];
    s.kept_sampled = c[Counter::kept_sampled];
    s.kept_slow = c[Counter::kept_slow];
    s.kept_error = c[Counter::kept_error];
    s.kept_triggered = c[Counter::kept_triggered];
    s.kept_without_samples = c[Counter::kept_without_samples];
    s.discarded_by_tail_policy = c[Counter::discarded_by_tail_policy];
    s.discarded_explicitly = c[Counter::discarded_explicitly];
    s.requests_abandoned = c[Counter::requests_abandoned];
    s.otel_spans_ended_elsewhere = c[Counter::otel_spans_ended_elsewhere];
    s.otel_spans_too_deep = c[Counter::otel_spans_too_deep];
    {
      std::lock_guard<std::mutex> held(lifecycle_mutex_);
      if (trigger_) s.triggers_armed = trigger_->counters().armed;
      s.configs_retained = retirement_.retained();
    }
    s.profiles_enqueued = c[Counter::profiles_enqueued];
    s.profiles_dropped = c[Counter::profiles_dropped];
    s.profiles_refused = c[Counter::profiles_refused];
    s.profiles_uploaded = c[Counter::profiles_uploaded];
    s.upload_failures = c[Counter::upload_failures];
    s.upload_retries = c[Counter::upload_retries];
    s.upload_requests = c[Counter::upload_requests];
    s.profiles_spooled = c[Counter::profiles_spooled];
    s.spool_resent = c[Counter::spool_resent];
    s.spool_evicted = c[Counter::spool_evicted];
    s.source_lines_dropped = c[Counter::source_lines_dropped];
    s.spool_pending = worker_.spool_pending();
    s.queue_length = worker_.queue_length();
    s.invalid_spans = error_count(ErrorCode::invalid_span_context);
    s.signal_number = signal_number_;
    return s;
  }

 private:
  // fork(): the child has one thread, the forking one. What the parent's other
  // threads were doing is left to the parent: the child closes its copies of the
  // samplers' perf events (the parent's events too: disabling them would stop the
  // parent's samples), forgets the worker's threads and queue, and rebuilds every
  // lock some parent thread may have held. The lists the child walks (counters,
  // stack samplers, heap threads) are locked across the fork, so it finds them
  // whole: a thread starting or exiting in the parent holds one of them.
  //
  // A child of a process that spanprof started by itself (the first guard, from
  // the environment) starts afresh at its own first guard. A child of one started
  // by spanprof::start(options) is stopped, and says so at its first guard: the
  // uploaders in those options may be mid-upload in the parent, their locks held
  // for good in the child. spanprof::start() in the child profiles it.
  // The merger's look at the continuous profile: a timer for each new thread, and
  // the samples since the last look.
  static void take_continuous_samples(std::vector<RawProfile>& out) {
    scan_continuous_threads();
    ContinuousSamples samples;
    ProcessSampler::instance().take(samples);
    std::uint64_t taken = 0;
    for (const RawProfile& profile : samples.profiles)
      if (profile.kind == ProfileKind::cpu)
        for (const RawSample& sample : profile.samples) taken += static_cast<std::uint64_t>(sample.values.at(0));
    if (taken != 0) count(Counter::continuous_samples, taken);
    if (samples.dropped != 0) count(Counter::continuous_samples_dropped, samples.dropped);
    out = std::move(samples.profiles);
  }

  static void scan_continuous_threads() noexcept {
    const ProcessSampler::ScanResult scan = ProcessSampler::instance().scan();
    if (scan.refused != 0) count(Counter::continuous_timers_refused, scan.refused);
    if (scan.report_refusal) {
      char message[200];
      std::snprintf(message, sizeof message,
                    "continuous profile: the kernel refused a thread's CPU timer (%s): that thread is not sampled, "
                    "the rest of the process is (counted in Stats::continuous_timers_refused)",
                    error_text(scan.refused_errno));
      report_error(ErrorCode::sampler_failed, message);
    }
  }

  static void before_fork() noexcept {
    // Every static the child's handler touches is made before the fork: one that
    // another thread was making at that moment would leave the child waiting on its
    // initialization guard for good (a first guard starting the ticker did, 1 child
    // in 200).
    (void)wall_ticker();
    (void)heap_hooks();
    (void)heap_thread_registry();
    (void)captured_profile_pool();
    (void)error_channel();
    (void)sample_signal_installation();
    ProcessSampler::instance().lock_for_fork();
    loader_lock_gate().close_and_wait(std::chrono::milliseconds(100));
    counter_registry().mutex.lock();
    stack_sampler_list().mutex.lock();
    heap_thread_registry().mutex.lock();
  }
  static void after_fork_in_parent() noexcept {
    heap_thread_registry().mutex.unlock();
    stack_sampler_list().mutex.unlock();
    counter_registry().mutex.unlock();
    loader_lock_gate().open();
    ProcessSampler::instance().unlock_after_fork_in_parent();
  }
  static void after_fork_in_child() noexcept { runtime_instance().reset_after_fork(); }

  void reset_after_fork() noexcept {
    loader_lock_gate().reset_after_fork();
    ProcessSampler::instance().reset_after_fork_in_child();
    counter_registry().reset_after_fork(thread_counters.registered ? &thread_counters : nullptr);
    stack_sampler_list().reset_after_fork();
    heap_thread_registry().reset_after_fork(&heap_thread);
    ThreadStackSampler* mine = current_stack_sampler;
    wall_ticker().reset_after_fork(mine == nullptr ? 0
                                                   : (mine->in_wall_span() ? 1 : 0) +
                                                         (mine->internal_lock_waits().span_open() ? 1 : 0));
    heap_hooks().reset_after_fork(heap_spans_open_here());
    captured_profile_pool().reset_after_fork();
    lock_wait_table.reset_after_fork();
    error_channel().reset_after_fork();
    new (&sample_signal_installation().mutex) std::mutex();

    new (&lifecycle_mutex_) std::mutex();
    guard_host_state().config.store(nullptr, std::memory_order_release);
    (void)current_config_.release();  // a guard open on this thread may hold it
    new (&trigger_) std::shared_ptr<AdaptiveTrigger>();
    process_context_.forget_after_fork();  // not inherited: the child publishes its own at its start()
    retirement_.forget_after_fork();
    worker_.close_files_after_fork();
#if SPANPROF_WITH_CURL
    http_close_sockets_after_fork();  // the parent's connections are the parent's
#endif
    new (&worker_) Worker();
    if (lifecycle_.load(std::memory_order_relaxed) == running) {
      if (started_implicitly_) {
        lifecycle_.store(never_started, std::memory_order_release);
      } else {
        lifecycle_.store(stopped, std::memory_order_release);
        stopped_by_fork_.store(true, std::memory_order_relaxed);
      }
    }
  }

  SPANPROF_NOINLINE void report_stopped_by_fork() noexcept {
    if (!stopped_by_fork_.exchange(false, std::memory_order_relaxed)) return;
    char message[200];
    std::snprintf(message, sizeof message,
                  "spanprof is stopped in this forked child (pid %d): call spanprof::start() in the child to "
                  "profile it (the parent's uploaders may be mid-upload)",
                  static_cast<int>(::getpid()));
    report_error(ErrorCode::invalid_configuration, message);
  }

  static void normalize(Options& options, std::vector<ConfigurationProblem>& problems) {
    check_code_values(options, problems);  // the ranges of the settings table
    if (!(options.retry.jitter >= 0.0 && options.retry.jitter <= 1.0)) {
      options.retry.jitter = RetryPolicy{}.jitter;
      char jitter[32];
      std::snprintf(jitter, sizeof jitter, "%g", options.retry.jitter);
      problems.push_back({"retry.jitter", std::string("retry.jitter is not in [0, 1]; using ") + jitter});
    }
    if (options.retry.initial_backoff.count() < 1) options.retry.initial_backoff = std::chrono::milliseconds(1);
    if (options.retry.max_backoff < options.retry.initial_backoff) options.retry.max_backoff = options.retry.initial_backoff;
    if (options.output_directory.empty()) options.output_directory = FileUploader::default_directory;
  }

  // Another copy of the runtime in this process (runtime_marker.hpp) is worth one
  // line: it profiles with its own options, signal and uploaders. Looked for at
  // every start of this process (a forked child starts again).
  void check_other_runtimes(std::vector<ConfigurationProblem>& problems) {
    const std::int64_t pid = ::getpid();
    if (marker_pid_ == pid) return;
    marker_pid_ = pid;
    const void* owner = &guard_host_state();
    const std::string others = other_runtimes(owner);
    leave_runtime_marker(owner);
    if (others.empty()) return;
    problems.push_back({"runtime", "another copy of spanprof's runtime runs in this process (" + others +
                                       "): this copy (" SPANPROF_ABI_NAME ") profiles with its own options, signal "
                                       "and uploaders. It happens when spanprof is compiled into more than one shared "
                                       "object or executable (header-only, or a static compiled library) and their "
                                       "symbols do not meet (an executable built without -rdynamic): link "
                                       "spanprof::spanprof_compiled as a shared library to share one runtime "
                                       "(docs/consuming.md)"});
  }

  static void check_abi(std::vector<ConfigurationProblem>& problems) {
    const char* expected = nullptr;
    if (!spanprof::process_wide::abi_in_use().compare_exchange_strong(expected, SPANPROF_ABI_NAME) &&
        std::strcmp(expected, SPANPROF_ABI_NAME) != 0) {
      problems.push_back({"SPANPROF_WITH_CURL", std::string("this process also runs spanprof built as ") + expected +
                                                    ", and this copy is " + SPANPROF_ABI_NAME +
                                                    ": build every source file with the same SPANPROF_* settings"});
    }
  }

  // Profiles still queued at exit would be lost; give the worker a short, bounded
  // time to deliver them.
  void register_exit_flush() noexcept {
    if (exit_flush_registered_) return;
    exit_flush_registered_ = true;
    std::atexit([] { runtime_instance().shutdown(std::chrono::milliseconds(2000)); });
  }

  static Runtime& runtime_instance() noexcept;

  std::atomic<int> lifecycle_{never_started};
  std::mutex lifecycle_mutex_;
  std::unique_ptr<RunningConfig> current_config_;  // the one guards load, if running
  std::shared_ptr<AdaptiveTrigger> trigger_;       // current_config_'s, for stats()
  ConfigRetirement retirement_;                    // those replaced, until no guard reads them
  std::uint64_t generation_ = 0;
  int signal_number_ = 0;
  bool exit_flush_registered_ = false;
  std::int64_t marker_pid_ = 0;                 // the process this copy left its marker in
  bool started_implicitly_ = false;             // by a guard, from the environment
  std::atomic<bool> stopped_by_fork_{false};   // a forked child, not yet told
  ProcessContextPublisher process_context_;     // OTEL_CTX, when Options::publish_process_context
  Worker worker_;
};

// Deliberately leaked: guards on other threads may still use it while static
// destructors run at exit.
SPANPROF_API inline Runtime& runtime() noexcept {
  static Runtime* instance = new Runtime();
  return *instance;
}

inline Runtime& Runtime::runtime_instance() noexcept { return runtime(); }

const char define_SPANPROF_IMPLEMENTATION_in_one_source_file = 1;

// The source file that compiles the runtime (SPANPROF_IMPLEMENTATION, or the
// compiled library) makes it the guards' host before main() runs.
inline const bool runtime_is_guard_host = [] {
  guard_host_state().host.store(&runtime(), std::memory_order_release);
  return true;
}();

}  // namespace detail

StartResult start(Options options) noexcept { return detail::runtime().start(std::move(options)); }
Status flush(std::chrono::milliseconds timeout) noexcept { return detail::runtime().flush(timeout); }
Status shutdown(std::chrono::milliseconds timeout) noexcept { return detail::runtime().shutdown(timeout); }
Stats stats() noexcept { return detail::runtime().stats(); }

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME

#endif  // SPANPROF_DETAIL_RUNTIME_RUNTIME_INL_HPP_
