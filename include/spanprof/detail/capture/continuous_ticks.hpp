// Internal. Where a thread's continuous-profile ticks come from (docs/continuous.md,
// "What is sampled"): its POSIX CPU timer, or a perf_event task clock.
//
// Why it is shaped like this:
//  * The kernel looks at a POSIX CPU timer only on its tick, and the expiries it
//    has not delivered when the thread exits go with the thread: beside busy
//    processes, a thread's last tens of milliseconds of CPU. A perf_event task
//    clock overflows at the point itself. But it costs its thread something at every
//    context switch (docs/cost.md), so `automatic` gives it to the threads that
//    compute — a millisecond of CPU or more per wait (voluntary switch), the span
//    source's thresholds (CpuTickSource) — within a descriptor budget; `perf_event`
//    to every thread within the budget; `posix_timer` to none.
//  * The thread chooses for itself, in its handler, once per adapt window of its
//    CPU: it counts its own waits (getrusage) and opens or closes its event
//    (perf_event_open, fcntl, close: async-signal-safe). Its timer stays made,
//    disarmed while the event ticks.
//  * An event tick weighs the periods its counter passed since the last one
//    recorded (read(2) of the event): a backlog of queued overflow signals records
//    once, and an overflow the kernel could not queue is made up by the next.
//  * The handler finds its thread's slot for an event tick through a thread-local
//    pointer it set itself (an overflow signal carries the descriptor, no value).
//  * A descriptor is closed by whoever takes it from the slot (an atomic exchange):
//    the thread's handler moving back to its timer, or the merger once the thread
//    is gone or the profile stops, after the handlers in flight have finished.
#ifndef SPANPROF_DETAIL_CAPTURE_CONTINUOUS_TICKS_HPP_
#define SPANPROF_DETAIL_CAPTURE_CONTINUOUS_TICKS_HPP_

#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/xorshift.hpp>
#include <spanprof/detail/capture/cpu_tick_source.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>

#include <dirent.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What the continuous profile's handler knows of one thread. The merger fills it
// before the thread's timer is armed; the tick fields are the thread's handler's.
struct ContinuousThreadSlot {
  std::atomic<pid_t> tid{0};  // 0: free
  timer_t timer{};
  std::uint32_t index = 0;
  // Where the walker may read the thread's stack without a check: learnt from
  // the maps around a stack pointer a sample saw (0: each read is checked).
  std::atomic<std::uint64_t> stack_top{0};
  std::atomic<std::uint64_t> sample_sp{0};
  std::atomic<std::uint32_t> owed_periods{0};  // CPU it ran before its timer, in periods not yet sampled
  // The perf_event task clock it ticks on (-1: its timer).
  std::atomic<int> perf_fd{-1};
  std::uint64_t counted_ns = 0;     // the event's count at the last period recorded
  std::int64_t adapt_cpu_ns = 0;    // the thread's CPU clock at its last choice (0: none yet)
  std::int64_t adapt_switches = 0;  // and its context switches then
};

// The slot of the thread whose event ticks: set by the thread's own handler.
SPANPROF_SIGNAL_SAFE_TLS inline thread_local ContinuousThreadSlot* continuous_event_slot = nullptr;

class ContinuousTicks {
 public:
  // The most threads on perf_event at once: a quarter of the descriptors the
  // process may still open (never the host's last ones: a server that accepts
  // connections up to its limit must not meet EMFILE for spanprof), up to 256.
  static constexpr std::size_t most_events = 256;

  // The merger's, at start(), before any timer of this start is armed.
  void start(CpuSampleSource wanted, std::int64_t period_ns, int signal_number) noexcept {
    wanted_ = wanted;
    period_ns_ = period_ns;
    signal_number_ = signal_number;
    budget_.store(wanted == CpuSampleSource::posix_timer ? 0 : event_budget(), std::memory_order_relaxed);
  }

  std::size_t threads_on_events() const noexcept { return in_use_.load(std::memory_order_relaxed); }

  // The periods an event tick of `slot` stands for (0: a tick of a backlog the
  // tick before has counted). Its thread's handler.
  std::uint64_t event_periods(ContinuousThreadSlot& slot) const noexcept {
    const int fd = slot.perf_fd.load(std::memory_order_relaxed);
    std::uint64_t count = 0;
    if (::read(fd, &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) return 1;  // its own period
    if (count < slot.counted_ns + static_cast<std::uint64_t>(period_ns_)) return 0;
    const std::uint64_t passed = (count - slot.counted_ns) / static_cast<std::uint64_t>(period_ns_);
    const std::uint64_t periods = std::min<std::uint64_t>(passed, CpuTickSource::most_points_per_tick);
    slot.counted_ns = periods == passed ? slot.counted_ns + periods * static_cast<std::uint64_t>(period_ns_) : count;
    return periods;
  }

  // After a tick's sample, on its thread: once per adapt window of its CPU, moves
  // it to its event or back to its timer by what it ran per context switch.
  void choose(ContinuousThreadSlot& slot, pid_t tid) noexcept {
    if (wanted_ == CpuSampleSource::posix_timer) return;
    const bool on_event = slot.perf_fd.load(std::memory_order_relaxed) >= 0;
    if (wanted_ == CpuSampleSource::perf_event) {
      if (!on_event) move_to_event(slot, tid);
      return;
    }
    const std::int64_t now = this_thread_cpu_ns();
    if (slot.adapt_cpu_ns != 0 && now - slot.adapt_cpu_ns < CpuTickSource::adapt_window_ns) return;
    // Its own waits only (voluntary switches): a thread that computes beside busy
    // processes is preempted every millisecond or so, and that is when its timer
    // loses the most, at its exit; a request thread waits several times a request.
    rusage usage{};
    if (::getrusage(RUSAGE_THREAD, &usage) != 0) return;
    const std::int64_t switches = static_cast<std::int64_t>(usage.ru_nvcsw);
    const bool first = slot.adapt_cpu_ns == 0;
    const std::int64_t per_switch = (now - slot.adapt_cpu_ns) / std::max<std::int64_t>(1, switches - slot.adapt_switches);
    slot.adapt_cpu_ns = now;
    slot.adapt_switches = switches;
    if (first) return;
    if (!on_event && per_switch >= CpuTickSource::perf_cpu_per_switch_ns)
      move_to_event(slot, tid);
    else if (on_event && per_switch < CpuTickSource::timer_cpu_per_switch_ns)
      move_to_timer(slot);
  }

  // Closes the slot's event, if it has one: its thread's handler, or the merger
  // once no handler can be reading it (the thread is gone, or the profile stopped
  // and the handlers in flight have finished).
  void close_event(ContinuousThreadSlot& slot) noexcept {
    const int fd = slot.perf_fd.exchange(-1, std::memory_order_acq_rel);
    if (fd < 0) return;
    ::ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    ::close(fd);
    in_use_.fetch_sub(1, std::memory_order_relaxed);
  }

  // In a forked child: the event is the parent's thread's too (disabling it would
  // stop the parent's ticks); the child closes its copy only.
  void forget_event_after_fork(ContinuousThreadSlot& slot) noexcept {
    const int fd = slot.perf_fd.exchange(-1, std::memory_order_relaxed);
    if (fd >= 0) ::close(fd);
    in_use_.store(0, std::memory_order_relaxed);
  }

  // The timer's ticks: at a random point of the first period, then every period.
  bool arm_timer(ContinuousThreadSlot& slot, std::uint64_t& random) const noexcept {
    const std::int64_t first = 1 + static_cast<std::int64_t>(xorshift_unit(random) * static_cast<double>(period_ns_));
    itimerspec spec{};
    spec.it_value.tv_sec = first / 1'000'000'000;
    spec.it_value.tv_nsec = first % 1'000'000'000;
    spec.it_interval.tv_sec = period_ns_ / 1'000'000'000;
    spec.it_interval.tv_nsec = period_ns_ % 1'000'000'000;
    return ::timer_settime(slot.timer, 0, &spec, nullptr) == 0;
  }

 private:
  // The CPU the timer counted since its last expiry is not carried over (under a
  // period, once per move).
  void move_to_event(ContinuousThreadSlot& slot, pid_t tid) noexcept {
    if (CpuTickSource::perf_refused_errno().load(std::memory_order_relaxed) != 0) return;
    if (in_use_.fetch_add(1, std::memory_order_relaxed) >= budget_.load(std::memory_order_relaxed)) {
      in_use_.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    const int fd = CpuTickSource::open_signalling_task_clock(period_ns_, tid, signal_number_);
    if (fd < 0) {
      const int error = errno == 0 ? EINVAL : errno;
      in_use_.fetch_sub(1, std::memory_order_relaxed);
      // Not allowed here (perf_event_paranoid, a seccomp filter, no perf_event
      // in the kernel): no thread asks again. Out of descriptors or memory: the
      // next window may find some.
      if (error != EMFILE && error != ENFILE && error != ENOMEM && error != EBUSY) {
        int expected = 0;
        CpuTickSource::perf_refused_errno().compare_exchange_strong(expected, error, std::memory_order_relaxed);
      }
      return;
    }
    slot.counted_ns = 0;
    continuous_event_slot = &slot;
    slot.perf_fd.store(fd, std::memory_order_release);
    if (::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
      close_event(slot);
      return;
    }
    itimerspec stop{};
    ::timer_settime(slot.timer, 0, &stop, nullptr);
  }

  void move_to_timer(ContinuousThreadSlot& slot) noexcept {
    close_event(slot);
    std::uint64_t random = static_cast<std::uint64_t>(this_thread_cpu_ns()) | 1;
    arm_timer(slot, random);
  }

  // A quarter of the descriptors the process may still open, up to most_events.
  static std::size_t event_budget() noexcept {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
    DIR* open_now = ::opendir("/proc/self/fd");
    if (open_now == nullptr) return 0;
    std::size_t used = 0;
    while (::readdir(open_now) != nullptr) ++used;  // "." and ".." and the listing's own: a little margin
    ::closedir(open_now);
    const std::size_t soft = limit.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<std::size_t>(limit.rlim_cur);
    return soft <= used ? 0 : std::min(most_events, (soft - used) / 4);
  }

  CpuSampleSource wanted_ = CpuSampleSource::automatic;
  std::int64_t period_ns_ = 10'000'000;
  int signal_number_ = 0;
  std::atomic<std::size_t> budget_{0};
  std::atomic<std::size_t> in_use_{0};
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_CONTINUOUS_TICKS_HPP_
