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
#include <spanprof/detail/capture/sampler_settings.hpp>
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
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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
  // `automatic` starts on the POSIX CPU timer: a perf event costs its thread at
  // every context switch, even between spans (docs/cost.md); prefer_source()
  // moves a thread that mostly computes to perf_event. A perf_event the kernel
  // refuses falls back to the timer.
  CpuSampleSource open(int& perf_errno) noexcept {
    perf_errno = 0;
    if (wanted_ == CpuSampleSource::perf_event) {
      if (open_perf_event()) return set_source(CpuSampleSource::perf_event);
      perf_errno = errno == 0 ? EINVAL : errno;
    }
    if (open_posix_timer()) return set_source(CpuSampleSource::posix_timer);
    if (wanted_ == CpuSampleSource::automatic && open_perf_event()) return set_source(CpuSampleSource::perf_event);
    return set_source(CpuSampleSource::automatic);  // nothing could be armed
  }

  bool has_source() const noexcept { return source() != CpuSampleSource::automatic; }
  // The source ticking now (automatic: none). Written by its own thread only,
  // its handler included.
  CpuSampleSource source() const noexcept { return source_.load(std::memory_order_relaxed); }

  // Disables and releases the source. The destructor does it too; an owner whose
  // handler writes into memory it frees calls it first.
  void close() noexcept {
    close_perf_event();
    if (has_timer_) ::timer_delete(timer_);
    has_timer_ = false;
    cpu_mark_.store(0, std::memory_order_relaxed);
  }

  // In a forked child, on a source the parent made: its perf event is the parent's
  // too (disabling it would stop the parent's samples) and its timer does not exist
  // here. Closes the child's copy of the event and forgets both.
  void forget_after_fork() noexcept {
    if (perf_fd_ >= 0) ::close(perf_fd_);
    perf_fd_ = -1;
    has_timer_ = false;
    cpu_mark_.store(0, std::memory_order_relaxed);
    set_source(CpuSampleSource::automatic);
  }

  // Starts the ticks; the periods start afresh. False when there is no source or
  // the kernel refused.
  bool start() noexcept {
    cpu_mark_.store(0, std::memory_order_relaxed);
    cpu_period_ = 0;
    tick_cpu_ns_ = 0;
    switch (source()) {
      case CpuSampleSource::perf_event: return schedule_next_tick() && ::ioctl(perf_fd_, PERF_EVENT_IOC_ENABLE, 0) == 0;
      case CpuSampleSource::posix_timer: return schedule_next_tick();
      case CpuSampleSource::automatic: break;
    }
    return false;
  }

  // Async-signal-safe: used from the handler when the thread has been idle.
  void stop() noexcept {
    if (source() == CpuSampleSource::perf_event) {
      ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
    } else if (has_timer_) {
      itimerspec stop{};
      ::timer_settime(timer_, 0, &stop, nullptr);
    }
  }

  // perf_event: how much CPU the thread ran past the point of the tick being taken
  // (0 after an arm); the timer's lateness is its CPU watch's business.
  std::int64_t perf_tick_late_ns() const noexcept { return perf_tick_late_ns_; }

  // The POSIX timer's next sampling point on the thread's CPU clock, for the ticker
  // to read from its thread (0: none, or another source ticks).
  std::int64_t next_point_ns() const noexcept { return static_cast<std::int64_t>(cpu_mark_.load(std::memory_order_relaxed)); }

  // The signal `info` describes is one of this source's ticks (async-signal-safe).
  // A timer signal queued before the thread moved to perf_event is not.
  bool is_tick(const siginfo_t* info) const noexcept {
    switch (source()) {
      case CpuSampleSource::perf_event: return info->si_fd == perf_fd_;  // not our event: someone else's signal
      case CpuSampleSource::posix_timer: return info->si_code == SI_TIMER;
      case CpuSampleSource::automatic: break;
    }
    return false;
  }

  // On perf_event: true when another of this thread's sample signals is already
  // pending, and then the event's next period is the longest (16 means), so that
  // the kernel queues no more until the thread has taken those. Each overflow
  // queues a real-time signal of its own; a thread whose handler and signal
  // delivery take longer than a period (an emulated CPU, a vCPU its host takes
  // away, with the period at its floor after a late tick) gets them faster than
  // it takes them, and the queue fills to RLIMIT_SIGPENDING: the thread then does
  // nothing but take signals (an arm64 VM's threads spent 88 % of their CPU in
  // signal delivery, for minutes). The caller takes no sample for this signal:
  // the last one of the backlog weighs all the CPU since the sample before, with
  // its points counted from the period armed then (cpu_period_ is left alone).
  // `others_queued`: the thread's owner has queued it signals of the same number
  // (wall ticks, the CPU watch's) not taken yet; the one pending may be such, and a
  // hold for it would leave the CPU of the span's next 16 periods to a tick that
  // may come after its close.
  // Async-signal-safe: sigpending and an ioctl.
  bool hold_while_behind(bool others_queued) noexcept {
    if (source() != CpuSampleSource::perf_event || others_queued) return false;
    sigset_t pending;
    if (::sigpending(&pending) != 0 || sigismember(&pending, signal_number_) != 1) return false;
    std::uint64_t longest = static_cast<std::uint64_t>(period_ns_) * 16;
    ::ioctl(perf_fd_, PERF_EVENT_IOC_PERIOD, &longest);
    return true;
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
    const std::int64_t now_ns = this_thread_cpu_ns();
    std::uint64_t periods = 0;
    std::int64_t timer_tile_ns = 0;
    const bool on_perf = source() == CpuSampleSource::perf_event;
    const bool ok = on_perf ? schedule_perf_tick(now_ns, periods)
                            : schedule_timer_tick(now_ns, std::min(now_ns, cut_ns), periods, timer_tile_ns);
    const bool armed_before = tick_cpu_ns_ != 0;
    if (weight != nullptr) {
      weight->periods = periods;
      if (!on_perf) {
        if (timer_tile_ns > 0) weight->cpu_ns = static_cast<std::uint64_t>(timer_tile_ns);
      } else if (periods != 0 && armed_before && now_ns > tick_cpu_ns_) {
        weight->cpu_ns = static_cast<std::uint64_t>(now_ns - tick_cpu_ns_);
      }
    }
    if (periods != 0 || !armed_before) tick_cpu_ns_ = now_ns;  // an early timer signal moves nothing
    // A tick's sample (never the arm's start) is where the automatic choice is made.
    if (weight != nullptr && periods != 0) prefer_source(now_ns);
    return ok;
  }

  // automatic: the thread's CPU per context switch since the last choice decides
  // (once per adapt_window_ns of its CPU, at a tick; async-signal-safe). A perf
  // event costs its thread at every switch (~1-3 µs here), nothing else, and comes
  // at the sampling point itself; the timer costs nothing at a switch, but the
  // kernel looks at it only on its tick, so its signal comes late and, for work
  // as periodic as the tick, always at the same phase of it. A thread that runs a
  // millisecond of CPU or more per switch (it mostly computes: the switches cost
  // it 0.3 % at most) ticks on perf_event; one that runs less than half a
  // millisecond (a server's request thread: several switches per request) goes
  // back to the timer.
  static constexpr std::int64_t adapt_window_ns = 20'000'000;
  static constexpr std::int64_t perf_cpu_per_switch_ns = 1'000'000;
  static constexpr std::int64_t timer_cpu_per_switch_ns = 500'000;
  // The points one tick counts at most, on either source; beyond, the thread ran
  // with the signal held, and the rest are not counted.
  static constexpr std::uint64_t most_points_per_tick = 256;

  // A disabled task clock on the calling thread, that overflows every `period_ns`
  // of its CPU; its descriptor, or -1 with errno set.
  static int open_task_clock(std::int64_t period_ns) noexcept {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = static_cast<std::uint64_t>(period_ns);
    attr.disabled = 1;
    attr.wakeup_events = 1;  // signal on every overflow
    errno = 0;
    const long fd = ::syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1, -1, PERF_FLAG_FD_CLOEXEC);
    return fd < 0 ? -1 : static_cast<int>(fd);
  }

  // open_task_clock's event, signalling thread `tid` with `signal_number` at each
  // overflow (si_code POLL_IN, si_fd the descriptor); -1 with errno set.
  static int open_signalling_task_clock(std::int64_t period_ns, pid_t tid, int signal_number) noexcept {
    const int fd = open_task_clock(period_ns);
    if (fd < 0) return -1;
    f_owner_ex owner{F_OWNER_TID, tid};
    if (::fcntl(fd, F_SETFL, O_ASYNC) != 0 || ::fcntl(fd, F_SETSIG, signal_number) != 0 ||
        ::fcntl(fd, F_SETOWN_EX, &owner) != 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      return -1;
    }
    return fd;
  }

  // Set once a perf event is refused to a thread of the process: none asks again.
  static std::atomic<int>& perf_refused_errno() noexcept {
    static std::atomic<int> refused{0};
    return refused;
  }

 private:
  CpuSampleSource set_source(CpuSampleSource source) noexcept {
    source_.store(source, std::memory_order_relaxed);
    return source;
  }

  void prefer_source(std::int64_t now_ns) noexcept {
    if (wanted_ != CpuSampleSource::automatic || !has_timer_) return;
    if (adapt_cpu_ns_ == 0 || now_ns < adapt_cpu_ns_) {
      adapt_cpu_ns_ = now_ns;
      adapt_switches_ = context_switches();
      return;
    }
    const std::int64_t ran = now_ns - adapt_cpu_ns_;
    if (ran < adapt_window_ns) return;
    const std::int64_t switches = context_switches();
    if (switches < 0) return;
    const std::int64_t per_switch = ran / std::max<std::int64_t>(1, switches - adapt_switches_);
    adapt_cpu_ns_ = now_ns;
    adapt_switches_ = switches;
    if (source() == CpuSampleSource::posix_timer && per_switch >= perf_cpu_per_switch_ns &&
        perf_refused_errno().load(std::memory_order_relaxed) == 0)
      move_to_perf_event(now_ns);
    else if (source() == CpuSampleSource::perf_event && per_switch < timer_cpu_per_switch_ns)
      move_to_timer(now_ns);
  }

  static std::int64_t context_switches() noexcept {
    rusage usage{};
    if (::getrusage(RUSAGE_THREAD, &usage) != 0) return -1;
    return static_cast<std::int64_t>(usage.ru_nvcsw) + static_cast<std::int64_t>(usage.ru_nivcsw);
  }

  // The next point stays where the timer had drawn it: the event's first period
  // runs up to it, and the first sample weighs the CPU since the last point.
  void move_to_perf_event(std::int64_t now_ns) noexcept {
    if (perf_fd_ < 0 && !open_perf_event()) {
      int expected = 0;
      perf_refused_errno().compare_exchange_strong(expected, errno == 0 ? EINVAL : errno, std::memory_order_relaxed);
      return;
    }
    const std::int64_t next = next_point_ns();
    const std::int64_t floor = std::max<std::int64_t>(period_ns_ / 4, 20'000);
    std::uint64_t first = static_cast<std::uint64_t>(std::max(next - now_ns, floor));
    if (::ioctl(perf_fd_, PERF_EVENT_IOC_PERIOD, &first) != 0 || ::ioctl(perf_fd_, PERF_EVENT_IOC_ENABLE, 0) != 0) {
      close_perf_event();
      return;
    }
    itimerspec stop{};
    ::timer_settime(timer_, 0, &stop, nullptr);
    cpu_mark_.store(0, std::memory_order_relaxed);  // the CPU watch lets the thread be
    tick_cpu_ns_ = point_base_;
    cpu_period_ = now_ns + static_cast<std::int64_t>(first) - point_base_;
    set_source(CpuSampleSource::perf_event);
  }

  // The event is closed, not only disabled: an open one costs its thread at every
  // switch still. The timer's points go on from the last sample.
  void move_to_timer(std::int64_t now_ns) noexcept {
    close_perf_event();
    set_source(CpuSampleSource::posix_timer);
    point_base_ = tick_cpu_ns_;
    const std::int64_t next = now_ns + random_interval_ns(random_, period_ns_);
    cpu_mark_.store(static_cast<std::uint64_t>(next), std::memory_order_relaxed);
    itimerspec spec{};
    spec.it_value.tv_sec = next / 1'000'000'000;
    spec.it_value.tv_nsec = next % 1'000'000'000;
    ::timer_settime(timer_, TIMER_ABSTIME, &spec, nullptr);
  }

  void close_perf_event() noexcept {
    if (perf_fd_ < 0) return;
    ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
    ::close(perf_fd_);
    perf_fd_ = -1;
  }

  bool schedule_perf_tick(std::int64_t now_ns, std::uint64_t& periods) noexcept {
    // The next tick is placed a random interval after the one that just fired,
    // not after this handler ran: the signal arrives tens of microseconds after
    // the overflow, and restarting the period from the handler would leave that
    // time unsampled at every sample (docs/engines.md).
    // The lateness is read on the thread's CPU clock, not the event's count:
    // the task clock also runs through time stolen from the vCPU.
    std::int64_t draw = random_interval_ns(random_, period_ns_);
    std::int64_t period = draw;  // the first period after the arm
    periods = 1;
    perf_tick_late_ns_ = 0;
    if (cpu_period_ != 0) {  // the period was set at the last tick, tick_cpu_ns_
      std::int64_t late = now_ns - tick_cpu_ns_ - cpu_period_;
      perf_tick_late_ns_ = late;
      // The points the thread's CPU clock passed after the one that fired, as the
      // timer counts them: the event's timer fires once for all the periods that
      // expired while the host held the vCPU, and a guest's thread CPU clock runs
      // on then (docs/engines.md, "What a sample weighs").
      while (late >= draw && periods < most_points_per_tick) {
        ++periods;
        late -= draw;
        draw = random_interval_ns(random_, period_ns_);
      }
      if (late >= draw) late = 0;
      // Not below a quarter of the mean: a period shorter than this handler would
      // queue signals faster than it takes them.
      const std::int64_t floor = std::max<std::int64_t>(period_ns_ / 4, 20'000);
      period = late > 0 ? std::max(draw - late, floor) : draw;
    }
    cpu_period_ = period;
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
        std::int64_t last_passed = point_base_;
        while (next <= cut_ns && passed < most_points_per_tick) {
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
    perf_fd_ = open_signalling_task_clock(period_ns_, tid_, signal_number_);
    return perf_fd_ >= 0;
  }

  bool open_posix_timer() noexcept {
    if (!create_thread_signal_timer(CLOCK_THREAD_CPUTIME_ID, tid_, signal_number_, nullptr, timer_)) return false;
    has_timer_ = true;
    return true;
  }

  CpuSampleSource wanted_;
  int signal_number_;
  std::int64_t period_ns_;  // mean CPU time between two CPU samples
  pid_t tid_;
  int perf_fd_ = -1;
  timer_t timer_{};
  bool has_timer_ = false;  // the timer exists (armed or not)
  std::atomic<CpuSampleSource> source_{CpuSampleSource::automatic};
  std::uint64_t random_;        // the handler's: the next CPU period
  // Timer: its next expiry on the thread's CPU clock (0: armed afresh). The ticker
  // reads it to find a point the kernel has not delivered (next_point_ns).
  std::atomic<std::uint64_t> cpu_mark_{0};
  std::int64_t cpu_period_ = 0; // perf: the period set at the last tick (0: unknown, after a disarm)
  std::int64_t perf_tick_late_ns_ = 0;  // perf: the CPU run past the point of the tick taken last
  std::int64_t tick_cpu_ns_ = 0;  // the thread's CPU clock at the last sample (0: since the arm, none)
  std::int64_t point_base_ = 0;   // timer: the last point delivered (or the arm), on the thread's CPU clock
  std::int64_t adapt_cpu_ns_ = 0;     // automatic: the thread's CPU clock at the last choice of source
  std::int64_t adapt_switches_ = 0;   // and its context switches then
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_CPU_TICK_SOURCE_HPP_
