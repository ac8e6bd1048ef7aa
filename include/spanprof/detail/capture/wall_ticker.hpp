// The wall ticker: one background thread that, while any thread runs a
// wall-profiled span, looks at those threads at random wall-clock intervals
// (exponential around 1 / wall_frequency_hz) and has each take a sample of its
// stack, running or waiting.
//
// A thread found blocked exactly where its previous sample found it (the same
// system call site in /proc/self/task/<tid>/syscall, and almost no CPU time since)
// is not signalled again: the ticker confirms it is still there and the thread
// adds that time to its previous sample. So a thread waiting in one call gets one
// signal per wait, not one per tick: a signal makes an interrupted nanosleep,
// poll, epoll_wait or select return EINTR (SA_RESTART does not restart those),
// and a host loop around them would otherwise spin (async-profiler ran into this
// with event loops and made the same check). docs/wall.md lists what a host sees.
//
// Nothing runs for threads without a wall span: the ticker skips them, and once no
// wall span has been open for a second it parks until one opens (the only time a
// guard makes a system call for it).
#ifndef SPANPROF_DETAIL_CAPTURE_WALL_TICKER_HPP_
#define SPANPROF_DETAIL_CAPTURE_WALL_TICKER_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/thread_name.hpp>
#include <spanprof/detail/capture/cpu_tick_source.hpp>
#include <spanprof/detail/capture/stack_sampler_list.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>
#include <spanprof/detail/capture/ticker_side.hpp>
#include <spanprof/config.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <thread>

#include <time.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Whether the ticker watches no thread's CPU (parked, not started, or its last look
// found no thread to watch): a guard that opens a CPU span on a POSIX-timer thread
// then wakes it (WallTicker::watch_cpu), the first guard to take the flag. A plain
// flag, so the guard's look costs one load.
SPANPROF_API inline std::atomic<bool>& ticker_watches_none() noexcept {
  static std::atomic<bool> watches_none{true};
  return watches_none;
}

class WallTicker {
 public:
  // How long the ticker keeps ticking after the last wall span closed, or the last
  // CPU span it watched, before it parks: a service whose threads go briefly idle
  // between requests never wakes it with a system call.
  static constexpr std::chrono::milliseconds linger{1000};

  // A thread opened its first wall span, or its first lock span (whose waits on
  // glibc's own locks the ticker looks for at the wall ticks: internal_lock_waits.hpp):
  // count it, and make sure the ticker runs.
  // Costs two atomic operations unless the ticker is parked or not started.
  // A ticker that sleeps longer than a wall period (it only watched CPU spans, up to
  // 40 ms between looks) is woken too: a wall span's first tick is due within a
  // period, and a short wait would otherwise pass unsampled.
  void thread_started_wall_span(std::int64_t mean_period_ns) noexcept {
    mean_period_ns_.store(mean_period_ns, std::memory_order_relaxed);
    threads_.fetch_add(1, std::memory_order_seq_cst);
    if (SPANPROF_UNLIKELY(!started_.load(std::memory_order_acquire))) start();
    if (SPANPROF_UNLIKELY(parked_.load(std::memory_order_seq_cst))) wake();
    const std::int64_t sleeping_until = sleeping_until_.load(std::memory_order_seq_cst);
    if (SPANPROF_UNLIKELY(sleeping_until != 0) && sleeping_until - monotonic_now_ns() > mean_period_ns) wake_for_wall();
  }

  // A thread closed its last wall span (or lock span).
  void thread_ended_wall_span() noexcept { threads_.fetch_sub(1, std::memory_order_seq_cst); }

  // A CPU span opened on a thread sampled by a POSIX CPU timer while the ticker
  // watched none: the CPU watch (ThreadStackSampler::cpu_watch) starts again, with
  // a look at once.
  void watch_cpu() noexcept {
    if (SPANPROF_UNLIKELY(!started_.load(std::memory_order_acquire))) start();
    {
      std::lock_guard<std::mutex> held(mutex_);
      cpu_wanted_ = true;
    }
    wake_.notify_one();
  }

  // Threads may move to a perf event (Options::cpu_sample_source is not
  // posix_timer). The kernel turns its scheduler's perf hooks on when the system's
  // first per-thread perf event opens, and off again about a second after the
  // last one closes; turning them on blocks that first perf_event_open for ~8 ms
  // (one voluntary switch, quiet or loaded), and a thread moves to its event in
  // its signal handler, inside a span. So the ticker holds one disabled event on
  // itself for as long as the process runs, and each thread's open takes ~40 µs
  // without blocking. Starts (or wakes) the ticker, which opens it.
  void hold_perf_hooks_on() noexcept {
    perf_hooks_wanted_.store(true, std::memory_order_release);
    watch_cpu();
  }

  std::uint32_t threads_in_wall_spans() const noexcept { return threads_.load(std::memory_order_relaxed); }

  // In a forked child: the ticker thread stayed in the parent. The next wall span
  // starts a new one; `open_here` counts the forking thread's (a wall span open,
  // a lock span open).
  void reset_after_fork(std::uint32_t open_here) noexcept {
    new (&mutex_) std::mutex();
    new (&wake_) std::condition_variable();
    threads_.store(open_here, std::memory_order_relaxed);
    started_.store(false, std::memory_order_relaxed);
    parked_.store(false, std::memory_order_relaxed);
    cpu_wanted_ = false;
    wall_wanted_ = false;
    sleeping_until_.store(0, std::memory_order_relaxed);
    ticker_watches_none().store(true, std::memory_order_relaxed);  // the child's first watched span starts it
    // The parent's event is its ticker's; the child's start() asks for its own.
    if (perf_hooks_fd_ >= 0) ::close(perf_hooks_fd_);
    perf_hooks_fd_ = -1;
    perf_hooks_tried_ = false;
    perf_hooks_wanted_.store(false, std::memory_order_relaxed);
  }

 private:
  void start() noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    if (started_.load(std::memory_order_relaxed)) return;
    SPANPROF_TRY {
      std::thread([this] { run(); }).detach();  // lives as long as the process
      started_.store(true, std::memory_order_release);
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::sampler_failed, "cannot start the ticker thread; wall profiles stay empty");
    }
  }

  void wake() noexcept {
    { std::lock_guard<std::mutex> held(mutex_); }
    wake_.notify_one();
  }

  void wake_for_wall() noexcept {
    {
      std::lock_guard<std::mutex> held(mutex_);
      wall_wanted_ = true;
    }
    wake_.notify_one();
  }

  // Sleeps until `until`, or until a thread opens its first wall span. Without
  // wall spans (`wall` false) the sleep is published first and the count read
  // again: a span that opened meanwhile either sees the sleep and wakes it, or is
  // seen here.
  void sleep_until(std::int64_t until, bool wall) noexcept {
    std::unique_lock<std::mutex> held(mutex_);
    if (!wall) {
      sleeping_until_.store(until, std::memory_order_seq_cst);
      if (threads_.load(std::memory_order_seq_cst) != 0) wall_wanted_ = true;
    }
    const std::int64_t interval = until - monotonic_now_ns();
    if (interval > 0 && !wall_wanted_ && !cpu_wanted_)
      wake_.wait_for(held, std::chrono::nanoseconds(interval), [&] { return wall_wanted_ || cpu_wanted_; });
    sleeping_until_.store(0, std::memory_order_relaxed);
    wall_wanted_ = false;
    cpu_wanted_ = false;
  }

  void run() noexcept {
    // The ticker takes wall samples; with every signal blocked, it is not sampled itself.
    begin_spanprof_thread(wall_thread_name);
    ticker_watches_none().store(false, std::memory_order_seq_cst);
    std::uint64_t random = 0x2545F4914F6CDD1Dull ^ static_cast<std::uint64_t>(monotonic_now_ns());
    std::int64_t now = monotonic_now_ns();
    std::int64_t last_busy = now;  // the last look that found a wall span or a CPU span open
    std::int64_t next_wall = now;
    // The first look comes at once, at the start and after each park: the span that
    // woke the ticker may be its thread's first, whose points beside busy processes
    // the kernel's timer can miss for all of it (docs/engines.md), and a look in 40 ms
    // would come after a 20 ms span closed.
    Look look;
    look.watch_interval_ns = 0;
    for (;;) {
      if (SPANPROF_UNLIKELY(!perf_hooks_tried_) && perf_hooks_wanted_.load(std::memory_order_acquire)) {
        perf_hooks_tried_ = true;
        perf_hooks_fd_ = CpuTickSource::open_task_clock(1'000'000'000);  // refused: each thread finds out itself
      }
      const bool wall = threads_.load(std::memory_order_seq_cst) != 0;
      if (wall || look.span_open) {
        last_busy = now;
      } else if (now - last_busy >= std::chrono::nanoseconds(linger).count()) {
        // Woken by a span: busy from now. Timed out: one look, and parked again.
        const bool woken = park();
        now = monotonic_now_ns();
        next_wall = now;
        if (woken) last_busy = now;
        look.watch_interval_ns = 0;
      }
      const std::int64_t mean = mean_period_ns_.load(std::memory_order_relaxed);
      // Wall ticks at random intervals (random_interval_ns says why); CPU watches as
      // often as the last look asked (Look::watch_interval_ns).
      // (Drawn only while wall spans are open: a look for the CPU watch alone costs no
      // logarithm.)
      if (!wall) next_wall = now;
      else if (next_wall <= now) next_wall = now + random_interval_ns(random, mean);
      std::int64_t until = wall ? next_wall : now + look.watch_interval_ns;
      if (now + look.watch_interval_ns < until) until = now + look.watch_interval_ns;
      sleep_until(until, wall);
      now = monotonic_now_ns();
      const bool wall_due = wall && now >= next_wall;
      look = tick(now, wall_due, mean);
      if (wall_due) next_wall = now;  // drawn anew above
      // Watching no thread, it sleeps up to 40 ms: a span opening meanwhile wakes it,
      // or its first look could come after a 20 ms span closed.
      if (!look.cpu_watched) ticker_watches_none().store(true, std::memory_order_seq_cst);
    }
  }

  // True when a span woke it; false when it only timed out.
  bool park() noexcept {
    std::unique_lock<std::mutex> held(mutex_);
    parked_.store(true, std::memory_order_seq_cst);
    ticker_watches_none().store(true, std::memory_order_seq_cst);
    // A guard that took the flag since the last look has asked already: no sleep.
    const bool woken = wake_.wait_for(held, linger, [&] {
      return cpu_wanted_ || threads_.load(std::memory_order_seq_cst) != 0;
    });
    cpu_wanted_ = false;
    ticker_watches_none().store(false, std::memory_order_seq_cst);
    parked_.store(false, std::memory_order_seq_cst);
    return woken;
  }

  // What one look found: whether any thread had a CPU span open, and when to look
  // again for the CPU watch (the threads' shortest interval; with none watched, as
  // often as for the default 100 Hz at ease, until the ticker parks).
  struct Look {
    bool span_open = false;
    bool cpu_watched = false;  // a thread's CPU was watched
    bool lock_wait_under_way = false;  // a thread waits on one of glibc's own locks (internal_lock_waits.hpp)
    std::int64_t watch_interval_ns = 40'000'000;
  };

  // One look at every thread: wall ticks when due, the CPU watch always.
  Look tick(std::int64_t now, bool wall_due, std::int64_t mean_period_ns) noexcept {
    std::uint64_t signalled = 0, confirmed = 0, cpu_ticks = 0;
    Look look;
    {
      // The list's mutex keeps each sampler alive while it is looked at (a thread
      // removes its sampler under it before freeing it).
      StackSamplerList& list = stack_sampler_list();
      std::lock_guard<std::mutex> held(list.mutex);
      for (ThreadStackSampler* sampler = list.head; sampler != nullptr; sampler = sampler->registry_next) {
        if (wall_due) {
          switch (sampler->wall_tick(now, mean_period_ns)) {
            case ThreadStackSampler::WallTick::signalled: ++signalled; break;
            case ThreadStackSampler::WallTick::confirmed: ++confirmed; break;
            default: break;
          }
        }
        if (sampler->look_for_internal_lock_wait(now, wall_due)) look.lock_wait_under_way = true;
        if (!sampler->cpu_watch_wanted()) continue;
        look.cpu_watched = true;
        const bool span_open = sampler->span_open_now();
        const bool long_span_open = sampler->outermost_span_older_than(now, sampler->cpu_watch_slack_ns());
        switch (sampler->cpu_watch(looks_, now)) {
          case ThreadStackSampler::CpuWatch::signalled: ++cpu_ticks; [[fallthrough]];
          case ThreadStackSampler::CpuWatch::late:
            // Looks come faster for a span older than the slack only: one a point
            // can be late in by more than the slack. A pool thread between
            // requests, or a server's short request, found late would quadruple a
            // busy server's looks for nothing of its own (its point lands in a
            // later request whenever it is sent).
            if (long_span_open) last_late_ns_ = now;
            break;
          default: break;
        }
        if (span_open) look.span_open = true;
        // A period while the kernel has been late in the last second; four periods
        // otherwise, when its own ticks come in time and the watch only makes sure
        // they still do. A look is a wake-up and a switch on a busy core (~25 µs of
        // the ticker's CPU on a saturated one), so looks are few: a point overdue
        // in a long span is still sent within a period, and the edges of a span
        // take the points passed near them (ThreadStackSampler::settle_edge).
        const std::int64_t period = sampler->settings().period_ns;
        const bool late_lately = now - last_late_ns_ < std::chrono::nanoseconds(linger).count();
        const std::int64_t interval = std::max<std::int64_t>(late_lately ? period : 4 * period, 1'000'000);
        if (interval < look.watch_interval_ns) look.watch_interval_ns = interval;
      }
    }
    // A wait on one of glibc's own locks is timed to the millisecond.
    if (look.lock_wait_under_way) look.watch_interval_ns = std::min<std::int64_t>(look.watch_interval_ns, 1'000'000);
    if (signalled != 0) count(Counter::wall_ticks_signalled, signalled);
    if (confirmed != 0) count(Counter::wall_ticks_confirmed, confirmed);
    if (cpu_ticks != 0) count(Counter::cpu_ticks_watched, cpu_ticks);
    ++looks_;
    return look;
  }

  std::atomic<std::uint32_t> threads_{0};  // threads with a wall span open, and those with a lock span
  std::atomic<std::int64_t> mean_period_ns_{10'000'000};
  std::atomic<bool> started_{false};
  std::atomic<bool> parked_{false};
  bool cpu_wanted_ = false;  // under mutex_: a guard asked for the CPU watch
  bool wall_wanted_ = false;  // under mutex_: a thread opened its first wall span
  std::atomic<std::int64_t> sleeping_until_{0};  // when the ticker's sleep without wall spans ends; 0: awake
  std::atomic<bool> perf_hooks_wanted_{false};  // hold_perf_hooks_on
  // The ticker thread's own.
  int perf_hooks_fd_ = -1;  // the event that holds the hooks on
  bool perf_hooks_tried_ = false;
  std::uint64_t looks_ = 0;
  std::int64_t last_late_ns_ = std::numeric_limits<std::int64_t>::min() / 2;  // a thread's point found overdue
  std::mutex mutex_;
  std::condition_variable wake_;
};

// Process-wide and deliberately leaked: its thread runs until the process ends.
SPANPROF_API inline WallTicker& wall_ticker() noexcept {
  static WallTicker* ticker = new WallTicker();
  return *ticker;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_WALL_TICKER_HPP_
