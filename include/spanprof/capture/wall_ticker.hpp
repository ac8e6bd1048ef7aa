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
#ifndef SPANPROF_CAPTURE_WALL_TICKER_HPP_
#define SPANPROF_CAPTURE_WALL_TICKER_HPP_

#include <spanprof/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/base/thread_name.hpp>
#include <spanprof/capture/cpu_tick_source.hpp>
#include <spanprof/capture/stack_sampler_list.hpp>
#include <spanprof/capture/thread_stack_sampler.hpp>
#include <spanprof/config.hpp>

#if SPANPROF_ENABLED

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <new>
#include <thread>

#include <time.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class WallTicker {
 public:
  // How long the ticker keeps ticking after the last wall span closed, before it
  // parks: a service whose threads go briefly idle between requests never wakes
  // it with a system call.
  static constexpr std::chrono::milliseconds linger{1000};

  // A thread opened its first wall span: count it, and make sure the ticker runs.
  // Costs two atomic operations unless the ticker is parked or not started.
  void thread_started_wall_span(std::int64_t mean_period_ns) noexcept {
    mean_period_ns_.store(mean_period_ns, std::memory_order_relaxed);
    threads_.fetch_add(1, std::memory_order_seq_cst);
    if (SPANPROF_UNLIKELY(!started_.load(std::memory_order_acquire))) start();
    if (SPANPROF_UNLIKELY(parked_.load(std::memory_order_seq_cst))) wake();
  }

  // A thread closed its last wall span.
  void thread_ended_wall_span() noexcept { threads_.fetch_sub(1, std::memory_order_seq_cst); }

  std::uint32_t threads_in_wall_spans() const noexcept { return threads_.load(std::memory_order_relaxed); }

  // In a forked child: the ticker thread stayed in the parent. The next wall span
  // starts a new one; `open_here` counts a wall span the forking thread has open.
  void reset_after_fork(bool open_here) noexcept {
    new (&mutex_) std::mutex();
    new (&wake_) std::condition_variable();
    threads_.store(open_here ? 1 : 0, std::memory_order_relaxed);
    started_.store(false, std::memory_order_relaxed);
    parked_.store(false, std::memory_order_relaxed);
  }

 private:
  void start() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_.load(std::memory_order_relaxed)) return;
    SPANPROF_TRY {
      std::thread([this] { run(); }).detach();  // lives as long as the process
      started_.store(true, std::memory_order_release);
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::sampler_failed, "cannot start the wall-clock ticker thread; wall profiles stay empty");
    }
  }

  void wake() noexcept {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_one();
  }

  void run() noexcept {
    name_this_thread(wall_thread_name);
    // The ticker takes wall samples; it must not be sampled itself.
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::uint64_t random = 0x2545F4914F6CDD1Dull ^ static_cast<std::uint64_t>(monotonic_now_ns());
    std::int64_t idle_since = monotonic_now_ns();
    for (;;) {
      if (threads_.load(std::memory_order_seq_cst) == 0) {
        if (monotonic_now_ns() - idle_since >= std::chrono::nanoseconds(linger).count()) park();
      } else {
        idle_since = monotonic_now_ns();
      }
      const std::int64_t mean = mean_period_ns_.load(std::memory_order_relaxed);
      const std::int64_t interval = random_interval_ns(random, mean);
      timespec sleep{static_cast<time_t>(interval / 1'000'000'000), static_cast<long>(interval % 1'000'000'000)};
      while (::nanosleep(&sleep, &sleep) != 0 && errno == EINTR) {
      }
      tick(mean);
    }
  }

  void park() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    parked_.store(true, std::memory_order_seq_cst);
    wake_.wait(lock, [&] { return threads_.load(std::memory_order_seq_cst) != 0; });
    parked_.store(false, std::memory_order_seq_cst);
  }

  void tick(std::int64_t mean_period_ns) noexcept {
    const std::int64_t now = monotonic_now_ns();
    std::uint64_t signalled = 0, confirmed = 0;
    {
      // The list's mutex keeps each sampler alive while it is looked at (a thread
      // removes its sampler under it before freeing it).
      StackSamplerList& list = stack_sampler_list();
      std::lock_guard<std::mutex> lock(list.mutex);
      for (ThreadStackSampler* sampler = list.head; sampler != nullptr; sampler = sampler->registry_next) {
        switch (sampler->wall_tick(now, mean_period_ns)) {
          case ThreadStackSampler::WallTick::signalled: ++signalled; break;
          case ThreadStackSampler::WallTick::confirmed: ++confirmed; break;
          default: break;
        }
      }
    }
    if (signalled != 0) count(Counter::wall_ticks_signalled, signalled);
    if (confirmed != 0) count(Counter::wall_ticks_confirmed, confirmed);
  }

  std::atomic<std::uint32_t> threads_{0};  // threads with a wall span open
  std::atomic<std::int64_t> mean_period_ns_{10'000'000};
  std::atomic<bool> started_{false};
  std::atomic<bool> parked_{false};
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

#endif  // SPANPROF_CAPTURE_WALL_TICKER_HPP_
