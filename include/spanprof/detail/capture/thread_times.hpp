// Internal. The calling thread's times as the kernel keeps them, read at a span's
// open and close when Options::time_split is on: its CPU clock, its run delay
// (/proc/thread-self/schedstat's second field: time runnable but not running) and
// its context switches (getrusage(RUSAGE_THREAD)): three system calls, 0.4 to 1 µs
// each, between two reads of the monotonic clock.
//
// The schedstat file stays open per thread (a pread, not an open, per read) and is
// opened again in a forked child, whose threads are other tasks.
#ifndef SPANPROF_DETAIL_CAPTURE_THREAD_TIMES_HPP_
#define SPANPROF_DETAIL_CAPTURE_THREAD_TIMES_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/profile/time_split.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Bumped in a forked child: every thread's schedstat file is its parent's task's.
inline std::atomic<std::uint32_t>& thread_times_generation() noexcept {
  static std::atomic<std::uint32_t> generation{0};
  return generation;
}

class ScheduleStatFile {
 public:
  ScheduleStatFile() noexcept = default;
  ScheduleStatFile(const ScheduleStatFile&) = delete;
  ScheduleStatFile& operator=(const ScheduleStatFile&) = delete;
  ~ScheduleStatFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  // The run delay in ns, or -1 (no schedstat: a kernel without CONFIG_SCHED_INFO,
  // or /proc not mounted).
  std::int64_t run_delay_ns() noexcept {
    const std::uint32_t generation = thread_times_generation().load(std::memory_order_relaxed);
    if (generation != generation_) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = -2;
      generation_ = generation;
    }
    if (fd_ == -2) fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return -1;
    char text[96];
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    if (n <= 0) return -1;
    // "<on cpu ns> <run delay ns> <timeslices>"
    const char* c = text;
    const char* end = text + n;
    while (c < end && *c != ' ') ++c;
    if (c == end) return -1;
    ++c;
    std::int64_t value = 0;
    bool digits = false;
    for (; c < end && *c >= '0' && *c <= '9'; ++c) {
      value = value * 10 + (*c - '0');
      digits = true;
    }
    return digits ? value : -1;
  }

 private:
  int fd_ = -2;  // -2: not opened yet
  std::uint32_t generation_ = 0;
};

// How long one read of a thread's times may take (three system calls, a few µs):
// a read that took longer waited for a core in the middle (or was interrupted
// that long), and such a wait would be in the elapsed time on one side of the
// read and in the run delay on the other.
inline constexpr std::int64_t thread_times_read_ns = 50'000;

// The calling thread's times and the monotonic clock, at one moment: a read a
// wait cut in two is read again (twice at most). False (cpu_ns -1) when the kernel
// keeps no run delay.
inline bool read_thread_times(ThreadTimes& out) noexcept {
  static thread_local ScheduleStatFile schedstat;
  for (int attempt = 0;; ++attempt) {
    const std::int64_t before = monotonic_now_ns();
    timespec cpu{};
    if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) != 0) return false;
    const std::int64_t delay = schedstat.run_delay_ns();
    if (delay < 0) return false;
    rusage usage{};
    if (::getrusage(RUSAGE_THREAD, &usage) != 0) return false;
    const std::int64_t after = monotonic_now_ns();
    if (after - before > thread_times_read_ns && attempt < 2) continue;
    out.at_ns = after;
    out.cpu_ns = static_cast<std::int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec;
    out.run_delay_ns = delay;
    out.voluntary_switches = usage.ru_nvcsw;
    out.involuntary_switches = usage.ru_nivcsw;
    return true;
  }
}

// The split of the time between two reads of one thread, built from what the
// kernel counts exactly and the rest derived from it:
//  * running is the CPU clock's advance, to the nanosecond;
//  * a thread blocks only by giving its core up (a voluntary switch). Without one,
//    blocked is 0 and the rest of the elapsed time is waiting for a core: the run
//    delay, and what neither clock holds — the time a virtual machine's host took
//    the vCPU away, interrupts — which is the core taken from the thread too;
//  * with one, waiting is the run delay (the kernel adds each wait to it when the
//    thread gets its core back; the thread runs at both reads, so every wait of
//    the span is in) and blocked the rest.
// The parts are held to the elapsed time, the CPU first: the clocks are read one
// after the other.
inline TimeSplit time_split_between(const ThreadTimes& open, const ThreadTimes& close) noexcept {
  TimeSplit split;
  if (open.cpu_ns < 0 || close.cpu_ns < 0) return split;
  const auto at_least_zero = [](std::int64_t v) { return v > 0 ? v : std::int64_t{0}; };
  const std::int64_t elapsed = at_least_zero(close.at_ns - open.at_ns);
  split.voluntary_switches = at_least_zero(close.voluntary_switches - open.voluntary_switches);
  split.involuntary_switches = at_least_zero(close.involuntary_switches - open.involuntary_switches);
  split.running_ns = std::min(at_least_zero(close.cpu_ns - open.cpu_ns), elapsed);
  const std::int64_t rest = elapsed - split.running_ns;
  split.waiting_ns = split.voluntary_switches == 0
                         ? rest
                         : std::min(at_least_zero(close.run_delay_ns - open.run_delay_ns), rest);
  split.blocked_ns = rest - split.waiting_ns;
  return split;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED
#endif  // SPANPROF_DETAIL_CAPTURE_THREAD_TIMES_HPP_
