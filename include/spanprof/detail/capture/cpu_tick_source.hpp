// A thread's CPU ticks: a perf_event task clock or a POSIX CPU timer that sends
// the sample signal to the one thread it was made for, each time that thread has
// run a random CPU-time interval. The thread's sampler
// (detail/capture/thread_stack_sampler.hpp) owns one and records a stack at each tick.
//
// Why it is shaped like this (see docs/engines.md, docs/cost.md):
//  * It signals only its own thread, so the handler records the stack of the
//    thread whose CPU time the tick measured.
//  * The periods are drawn at random (random_interval_ns says why).
//  * Each tick is placed from the sampling point before it, never from the late
//    signal: restarting from the signal would leave its delay unsampled at every
//    sample.
//  * A sample weighs the thread's CPU time, not the number of periods: counted
//    periods spread by about half the square root of their number (the periods are
//    random), and a perf task clock, which runs on while a virtual machine's host
//    has stolen the vCPU, over-counts by the steal (10 ms of a thread's CPU drew up
//    to 12.5 ms of periods here). On perf_event it is the thread's CPU clock since
//    the tick before; on the timer, the CPU between the last point delivered before
//    and the last one passed now, on the same clock, so that a late signal changes
//    where a sample lands but not what it weighs.
//  * Everything the handler calls here is async-signal-safe: a clock, an ioctl
//    and a timer call.
#ifndef SPANPROF_DETAIL_CAPTURE_CPU_TICK_SOURCE_HPP_
#define SPANPROF_DETAIL_CAPTURE_CPU_TICK_SOURCE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/xorshift.hpp>
#include <spanprof/capture/engines.hpp>

// Compiled out with the SDK, as the sampler that owns it.
#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// A random interval with mean `mean_ns`: half the mean, plus an exponentially
// distributed rest. A random period gives a periodic workload nothing to alias with
// (fixed periods shift its samples into or out of its spans); the fixed half keeps
// the sample rate bounded, so a signal handler slower than a short draw cannot
// fall behind and pile up queued signals. From a per-thread xorshift state;
// async-signal-safe (log() touches no shared state).
inline std::int64_t random_interval_ns(std::uint64_t& state, std::int64_t mean_ns) noexcept {
  const double unit = xorshift_unit(state);
  const double half = static_cast<double>(mean_ns) / 2;
  const double draw = half - std::log(unit) * half;
  const double high = static_cast<double>(mean_ns) * 16;  // the tail beyond holds a 1e-13 share
  return static_cast<std::int64_t>(draw > high ? high : draw);
}

class CpuTickSource {
 public:
  // For thread `tid`; `wanted` is the configured CpuSampleSource, `period_ns` the
  // mean CPU time between two ticks, `seed` the start of the periods' random state.
  CpuTickSource(CpuSampleSource wanted, int signal_number, std::int64_t period_ns, pid_t tid,
                std::uint64_t seed) noexcept
      : wanted_(wanted), signal_number_(signal_number), period_ns_(period_ns), tid_(tid), random_(seed) {}

  CpuTickSource(const CpuTickSource&) = delete;
  CpuTickSource& operator=(const CpuTickSource&) = delete;

  ~CpuTickSource() { close(); }

  // Picks and creates the sampling source for this thread (not armed yet).
  // `perf_errno` receives the reason perf_event was refused, if it was.
  // `automatic` is the POSIX CPU timer: a perf event costs its thread at every
  // context switch, even between spans (docs/cost.md). A perf_event the kernel
  // refuses falls back to the timer.
  CpuSampleSource open(int& perf_errno) noexcept {
    perf_errno = 0;
    if (wanted_ == CpuSampleSource::perf_event) {
      if (open_perf_event()) return source_ = CpuSampleSource::perf_event;
      perf_errno = errno == 0 ? EINVAL : errno;
    }
    if (open_posix_timer()) return source_ = CpuSampleSource::posix_timer;
    if (wanted_ == CpuSampleSource::automatic && open_perf_event()) return source_ = CpuSampleSource::perf_event;
    return source_ = CpuSampleSource::automatic;  // nothing could be armed
  }

  bool has_source() const noexcept { return source_ != CpuSampleSource::automatic; }
  CpuSampleSource source() const noexcept { return source_; }

  // Disables and releases the source. The destructor does it too; an owner whose
  // handler writes into memory it frees calls it first.
  void close() noexcept {
    if (perf_fd_ >= 0) {
      ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
      ::close(perf_fd_);
      perf_fd_ = -1;
    }
    if (has_timer_) ::timer_delete(timer_);
    has_timer_ = false;
  }

  // In a forked child, on a source the parent made: its perf event is the parent's
  // too (disabling it would stop the parent's samples) and its timer does not exist
  // here. Closes the child's copy of the event and forgets both.
  void forget_after_fork() noexcept {
    if (perf_fd_ >= 0) ::close(perf_fd_);
    perf_fd_ = -1;
    has_timer_ = false;
    source_ = CpuSampleSource::automatic;
  }

  // Starts the ticks; the periods start afresh. False when there is no source or
  // the kernel refused.
  bool start() noexcept {
    cpu_mark_.store(0, std::memory_order_relaxed);
    cpu_period_ = 0;
    tick_cpu_ns_ = 0;
    if (perf_fd_ >= 0) return schedule_next_tick() && ::ioctl(perf_fd_, PERF_EVENT_IOC_ENABLE, 0) == 0;
    if (has_timer_) return schedule_next_tick();
    return false;
  }

  // Async-signal-safe: used from the handler when the thread has been idle.
  void stop() noexcept {
    if (perf_fd_ >= 0) {
      ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
    } else if (has_timer_) {
      itimerspec stop{};
      ::timer_settime(timer_, 0, &stop, nullptr);
    }
  }

  // The POSIX timer's next sampling point on the thread's CPU clock, for the ticker
  // to read from its thread (0: none, or another source).
  std::int64_t next_point_ns() const noexcept {
    return has_timer_ ? static_cast<std::int64_t>(cpu_mark_.load(std::memory_order_relaxed)) : 0;
  }

  // The signal `info` describes is one of this source's ticks (async-signal-safe).
  bool is_tick(const siginfo_t* info) const noexcept {
    if (perf_fd_ >= 0) return info->si_fd == perf_fd_;  // not our event: someone else's signal
    if (has_timer_) return info->si_code == SI_TIMER;
    return false;
  }

  // What a tick weighs: the sampling points the thread's CPU time passed since the
  // tick before (the profile's sample count), and the CPU time it ran since then.
  struct TickWeight {
    std::uint64_t periods = 0;
    std::uint64_t cpu_ns = 0;
  };

  static constexpr std::int64_t no_cut = INT64_MAX;

  // Sets the CPU time until the next CPU tick (async-signal-safe); returns false if
  // the kernel refused. `weight`, when given, receives what the sample being taken
  // stands for; periods 0 is a timer signal before its expiry, not a sample.
  // `cut_ns` (the timer only): the points passed after it on the thread's CPU clock
  // are left for a later tick.
  bool schedule_next_tick(TickWeight* weight = nullptr, std::int64_t cut_ns = no_cut) noexcept {
    const std::int64_t now_ns = thread_cpu_now_ns();
    std::uint64_t periods = 0;
    std::int64_t timer_tile_ns = 0;
    const bool ok = perf_fd_ >= 0 ? schedule_perf_tick(now_ns, periods)
                                  : schedule_timer_tick(now_ns, std::min(now_ns, cut_ns), periods, timer_tile_ns);
    const bool armed_before = tick_cpu_ns_ != 0;
    if (weight != nullptr) {
      weight->periods = periods;
      if (perf_fd_ < 0) {
        if (timer_tile_ns > 0) weight->cpu_ns = static_cast<std::uint64_t>(timer_tile_ns);
      } else if (periods != 0 && armed_before && now_ns > tick_cpu_ns_) {
        weight->cpu_ns = static_cast<std::uint64_t>(now_ns - tick_cpu_ns_);
      }
    }
    if (periods != 0 || !armed_before) tick_cpu_ns_ = now_ns;  // an early timer signal moves nothing
    return ok;
  }

 private:
  static std::int64_t thread_cpu_now_ns() noexcept {
    timespec now{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  }

  bool schedule_perf_tick(std::int64_t now_ns, std::uint64_t& periods) noexcept {
    // The next tick is placed a random interval after the one that just fired,
    // not after this handler ran: the signal arrives tens of microseconds after
    // the overflow (~50 µs measured here), and restarting the period from the
    // handler would leave that time unsampled at every sample (-5% at 1 kHz).
    // The lateness is read on the thread's CPU clock, not the event's count:
    // the task clock also runs through time stolen from the vCPU.
    const std::int64_t draw = random_interval_ns(random_, period_ns_);
    std::int64_t period = draw;
    if (cpu_period_ != 0) {  // the period was set at the last tick, tick_cpu_ns_
      const std::int64_t late = now_ns - tick_cpu_ns_ - cpu_period_;
      // Not below a quarter of the mean: a period shorter than this handler would
      // queue signals faster than it takes them.
      const std::int64_t floor = std::max<std::int64_t>(period_ns_ / 4, 20'000);
      if (late > 0) period = std::max(draw - late, floor);
    }
    cpu_period_ = period;
    periods = 1;
    std::uint64_t value = static_cast<std::uint64_t>(period);
    return ::ioctl(perf_fd_, PERF_EVENT_IOC_PERIOD, &value) == 0;
  }

  bool schedule_timer_tick(std::int64_t now_ns, std::int64_t cut_ns, std::uint64_t& periods,
                           std::int64_t& tile_ns) noexcept {
    if (has_timer_) {
      // The kernel looks at CPU timers only on the scheduler tick (4 ms at
      // HZ=250), so the signal comes at the first tick after the sampling point,
      // and at more than 250 Hz several points fall between two ticks. Each point
      // the thread's CPU time has passed is one sample of the stack found now
      // (the sample count). The CPU value is the thread's CPU from the last point
      // delivered before to the last one passed now: the intervals between points
      // tile the thread's CPU time, so a late signal (the tick, or the ticker's
      // watch) moves where a sample lands, never how much it weighs.
      // The next point is drawn from the last one, never from the late signal.
      std::uint64_t passed = 0;
      const std::uint64_t mark = cpu_mark_.load(std::memory_order_relaxed);
      std::int64_t next = static_cast<std::int64_t>(mark);
      if (mark == 0) {
        next = now_ns + random_interval_ns(random_, period_ns_);  // armed afresh
        point_base_ = now_ns;
      } else {
        constexpr std::uint64_t most_periods = 256;  // beyond: the thread ran with the signal held
        std::int64_t last_passed = point_base_;
        while (next <= cut_ns && passed < most_periods) {
          ++passed;
          last_passed = next;
          next += random_interval_ns(random_, period_ns_);
        }
        if (next <= cut_ns) {
          last_passed = cut_ns;
          next = cut_ns + random_interval_ns(random_, period_ns_);
        }
        if (passed != 0) {
          tile_ns = last_passed - point_base_;
          point_base_ = last_passed;
        }
      }
      periods = passed;
      cpu_mark_.store(static_cast<std::uint64_t>(next), std::memory_order_relaxed);
      // A point left behind a cut has passed: armed for it, the timer would fire as
      // it is set, and the signal would take it here at once. A moment on, the
      // kernel delivers it at its next tick, as any other.
      const std::int64_t expiry = std::max(next, now_ns + 50'000);
      itimerspec spec{};
      spec.it_value.tv_sec = expiry / 1'000'000'000;
      spec.it_value.tv_nsec = expiry % 1'000'000'000;
      return ::timer_settime(timer_, TIMER_ABSTIME, &spec, nullptr) == 0;
    }
    return false;
  }

  bool open_perf_event() noexcept {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = static_cast<std::uint64_t>(period_ns_);
    attr.disabled = 1;
    attr.wakeup_events = 1;  // signal on every overflow
    errno = 0;
    const long fd = ::syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) return false;
    perf_fd_ = static_cast<int>(fd);
    f_owner_ex owner{F_OWNER_TID, tid_};
    if (::fcntl(perf_fd_, F_SETFL, O_ASYNC) != 0 || ::fcntl(perf_fd_, F_SETSIG, signal_number_) != 0 ||
        ::fcntl(perf_fd_, F_SETOWN_EX, &owner) != 0) {
      const int saved = errno;
      ::close(perf_fd_);
      perf_fd_ = -1;
      errno = saved;
      return false;
    }
    return true;
  }

  bool open_posix_timer() noexcept {
    sigevent event{};
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = signal_number_;
    event.sigev_notify_thread_id = tid_;
    if (::timer_create(CLOCK_THREAD_CPUTIME_ID, &event, &timer_) != 0) return false;
    has_timer_ = true;
    return true;
  }

  CpuSampleSource wanted_;
  int signal_number_;
  std::int64_t period_ns_;  // mean CPU time between two CPU samples
  pid_t tid_;
  int perf_fd_ = -1;
  timer_t timer_{};
  bool has_timer_ = false;
  CpuSampleSource source_ = CpuSampleSource::automatic;
  std::uint64_t random_;        // the handler's: the next CPU period
  // Timer: its next expiry on the thread's CPU clock (0: armed afresh). The ticker
  // reads it to find a point the kernel has not delivered (next_point_ns).
  std::atomic<std::uint64_t> cpu_mark_{0};
  std::int64_t cpu_period_ = 0; // perf: the period set at the last tick (0: unknown, after a disarm)
  std::int64_t tick_cpu_ns_ = 0;  // the thread's CPU clock at the last sample (0: since the arm, none)
  std::int64_t point_base_ = 0;   // timer: the last point delivered (or the arm), on the thread's CPU clock
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_CPU_TICK_SOURCE_HPP_
