// The ticker's side of a thread's stack sampler (thread_stack_sampler.hpp): the
// CPU watch and the wall tick, which the wall ticker's thread runs for each thread
// under the sampler list's mutex (wall_ticker.hpp). Why each does what it does is
// said where the class declares them.
#ifndef SPANPROF_DETAIL_CAPTURE_TICKER_SIDE_HPP_
#define SPANPROF_DETAIL_CAPTURE_TICKER_SIDE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>
#include <spanprof/detail/capture/thread_status.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline ThreadStackSampler::CpuWatch ThreadStackSampler::cpu_watch(std::uint64_t look, std::int64_t now) noexcept {
  if (!armed() || signal_blocked_.load(std::memory_order_relaxed) ||
      sample_signal_lost().load(std::memory_order_relaxed) == settings_.signal_number)
    return CpuWatch::nothing;
  // A thread cannot have run past a point by the slack in less wall time than the
  // slack since its outermost span opened or closed: those young spans and gaps,
  // most of a busy server's, cost no read and are left to the kernel. The same for
  // spans and gaps, so that neither gains samples at the other's cost. But one
  // look in 32 reads it anyway: a thread whose spans and gaps are all that short
  // would otherwise be left to the kernel for good, and the kernel's tick can miss
  // it every time: work paced by the clock the tick keeps runs between its ticks
  // (docs/engines.md, "Under load").
  if (now - outer_changed_ns_.load(std::memory_order_relaxed) < cpu_watch_slack_ns() && (look & 31) != 0)
    return CpuWatch::nothing;
  if (top_.load(std::memory_order_relaxed) == 0 && ticker_.still_looks >= 2 && (look & 7) != 0)
    return CpuWatch::nothing;
  const std::int64_t point = cpu_.next_point_ns();
  if (point == 0) return CpuWatch::nothing;
  // Nor can it have run more CPU than the wall time since the last read: until
  // then its point cannot be overdue, and it is not read.
  if (ticker_.cpu_seen >= 0 && ticker_.cpu_seen + (now - ticker_.seen_at_ns) < point + cpu_watch_slack_ns())
    return CpuWatch::nothing;
  const std::int64_t cpu_ns = thread_cpu_ns(tid_);
  ticker_.still_looks = cpu_ns == ticker_.cpu_seen ? ticker_.still_looks + 1 : 0;
  ticker_.cpu_seen = cpu_ns;
  ticker_.seen_at_ns = now;
  if (point == ticker_.cpu_point_signalled || cpu_ns < point) return CpuWatch::nothing;
  // On a core, or waiting for one: a thread's CPU clock moves between two reads
  // while it is on a core, and stands still while it waits for one or blocks. A
  // blocked thread signalled would take the sample at the system call it blocked
  // in, not where its CPU went, and see the call interrupted: found so with a point
  // passed, overdue or not yet, it is marked, and the tick that comes at that
  // call's return is no sample of it (ThreadStackSampler::passed_before_a_call).
  // One preempted takes the sample where it resumes, the code it was running. So
  // it must: beside busy processes the kernel's timer can miss a thread's points
  // for tens of milliseconds of its CPU (docs/engines.md), and such a thread is
  // off its core at most of the ticker's looks.
  const bool overdue = cpu_ns >= point + cpu_watch_slack_ns();
  if (thread_cpu_ns(tid_) == cpu_ns) {
    BlockedSite ignored;
    if (!overdue || read_thread_activity(tid_, ticker_.syscall_fd, ignored) != ThreadActivity::runnable) {
      off_core_past_point_cpu_ns_.store(cpu_ns, std::memory_order_relaxed);
      return overdue ? CpuWatch::late : CpuWatch::nothing;
    }
  } else if (!overdue) {
    return CpuWatch::nothing;
  }
  if (!send_tick(cpu_tick_tag)) return CpuWatch::nothing;
  ticker_.cpu_point_signalled = point;
  return CpuWatch::signalled;
}

inline ThreadStackSampler::WallTick ThreadStackSampler::wall_tick(std::int64_t now_ns,
                                                                  std::int64_t mean_period_ns) noexcept {
  if (signal_blocked_.load(std::memory_order_relaxed) ||
      sample_signal_lost().load(std::memory_order_relaxed) == settings_.signal_number)
    return WallTick::none;
  if (wall_spans_.load(std::memory_order_acquire) == 0) {
    ticker_.sampled_blocked = false;
    return WallTick::none;
  }
  const std::uint32_t generation = wall_generation_.load(std::memory_order_acquire);
  BlockedSite site;
  const bool blocked = read_thread_activity(tid_, ticker_.syscall_fd, site) == ThreadActivity::blocked;
  const std::int64_t cpu_ns = thread_cpu_ns(tid_);
  // "Still": almost no CPU time since the last sample found it blocked, and
  // blocked at the same site now — or running for a moment between two waits at
  // it (a loop around a short sleep counts as one wait, as in async-profiler's
  // check).
  const std::int64_t still_cpu_ns = std::min<std::int64_t>(500'000, mean_period_ns / 2);
  if ((!blocked || site == ticker_.site) && ticker_.sampled_blocked && ticker_.generation == generation &&
      cpu_ns >= 0 && cpu_ns - ticker_.cpu_ns < still_cpu_ns) {
    const auto micros = static_cast<std::uint64_t>(now_ns / 1000) & ((std::uint64_t{1} << 48) - 1);
    wall_confirmed_.store((static_cast<std::uint64_t>(generation & 0xFFFF) << 48) | micros,
                          std::memory_order_release);
    ticker_.cpu_ns = cpu_ns;
    return WallTick::confirmed;
  }
  // Blocked in a call, or not: the handler tells running from waiting for a core,
  // from the thread's own clock over the sample's time (on_wall_tick). The ticker
  // cannot: its looks are not the sample's time (a signal waits for the thread's
  // next instant on a core), and on a busy machine the ticker, waking, often takes
  // the core of the very thread it looks at.
  const ThreadState state = blocked ? ThreadState::blocked : ThreadState::unknown;
  const std::uint32_t data = (generation & wall_tick_generation_mask) |
                             static_cast<std::uint32_t>(state) << wall_tick_state_shift;
  if (!send_tick(wall_tick_tag | data)) {
    ticker_.sampled_blocked = false;
    return WallTick::failed;  // the thread exited, or its signal queue is full
  }
  ticker_.sampled_blocked = blocked;
  ticker_.site = site;
  ticker_.generation = generation;
  ticker_.cpu_ns = cpu_ns;
  return WallTick::signalled;
}

inline bool ThreadStackSampler::look_for_internal_lock_wait(std::int64_t now_ns, bool due) noexcept {
  if (signal_blocked_.load(std::memory_order_relaxed) ||
      sample_signal_lost().load(std::memory_order_relaxed) == settings_.signal_number)
    return false;
  const InternalLockWaits::Look look = internal_lock_waits_.look(tid_, ticker_.syscall_fd, now_ns, due);
  if (look.signal_slot >= 0 && !send_tick(lock_tick_tag | static_cast<std::uint32_t>(look.signal_slot))) {
    internal_lock_waits_.signal_failed(look.signal_slot);
    return false;
  }
  return look.watching;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_TICKER_SIDE_HPP_
