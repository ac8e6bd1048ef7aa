// Time for the decisions that depend on it (rate limits, latency baselines,
// cooldowns, delivery windows, retry backoff, the spool's re-sends). Every
// component that reads time takes a Clock, so tests drive it with a ManualClock
// instead of sleeping. (Timeouts a caller passes — flush(), shutdown(), HTTP —
// stay real time: they bound how long the caller waits.)
#ifndef SPANPROF_BASE_CLOCK_HPP_
#define SPANPROF_BASE_CLOCK_HPP_

#include <spanprof/config.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <time.h>

SPANPROF_NAMESPACE_BEGIN

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds from an arbitrary origin. Called on request threads.
  virtual std::int64_t now_ns() const noexcept = 0;
  // How long a background thread waits, in real time, for this clock to move on
  // by `ns`: that long for a real clock; a short poll for one a test moves.
  virtual std::chrono::nanoseconds real_wait(std::int64_t ns) const noexcept {
    return std::chrono::nanoseconds(std::max<std::int64_t>(ns, 0));
  }
};

class SteadyClock final : public Clock {
 public:
  std::int64_t now_ns() const noexcept override {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
};

// Time that moves only when told to; safe to read and advance from any thread.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::int64_t start_ns = 1'000'000'000) noexcept : now_(start_ns) {}
  std::int64_t now_ns() const noexcept override { return now_.load(std::memory_order_acquire); }
  void set(std::int64_t ns) noexcept { now_.store(ns, std::memory_order_release); }
  void advance(std::int64_t ns) noexcept { now_.fetch_add(ns, std::memory_order_acq_rel); }
  // A thread waiting for this clock looks again every millisecond of real time.
  std::chrono::nanoseconds real_wait(std::int64_t ns) const noexcept override {
    return std::chrono::nanoseconds(std::clamp<std::int64_t>(ns, 0, 1'000'000));
  }

 private:
  std::atomic<std::int64_t> now_;
};

// The clock components use when given none.
inline std::shared_ptr<const Clock> default_clock() {
  static const std::shared_ptr<const Clock> clock = std::make_shared<SteadyClock>();
  return clock;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_BASE_CLOCK_HPP_
