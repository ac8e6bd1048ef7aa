// Waits on glibc's own locks: malloc's arenas, a FILE's lock (stdio), the
// loader's lock, the mutex a condition variable takes back as its wait ends. glibc
// takes them through internal calls that no hook of a public function sees (and
// a lock hook can miss a wait on a mutex taken a moment after it looked). Each
// such wait is one system call: futex(word, FUTEX_WAIT, 2, no timeout), glibc's
// "locked, with waiters" state, from __lll_lock_wait or __lll_lock_wait_private.
//
// So they are sampled, by the wall ticker (wall_ticker.hpp). At its wall ticks it
// looks at each thread with a lock-profiled span open: a thread blocked in that
// call, on a lock word no hook watches (lock_waits.hpp), is in such a wait. The
// first look signals the thread, whose handler takes its stack; while the wait
// lasts the ticker looks every millisecond, and times it; at its span's close the
// thread writes it into its lock log (lock_log.hpp), the holder unknown: glibc's
// private locks record none. A wait shorter than the ticks' interval is seen in
// proportion to its length (docs/locks.md).
//
// Each time is bounded by looks and narrowed by the thread's CPU clock, which
// stands still while it waits:
//  * the wait began after the thread's outermost lock span opened, and after the
//    last look that did not find it: at the later of the two, plus the CPU the
//    thread ran since (exact when it held its core meanwhile; early by the time it
//    waited for one, or blocked elsewhere, in between);
//  * it ended after the last look that found it, and before the first that did
//    not (or the span's close): at the close less the CPU the thread ran since.
#ifndef SPANPROF_DETAIL_CAPTURE_INTERNAL_LOCK_WAITS_HPP_
#define SPANPROF_DETAIL_CAPTURE_INTERNAL_LOCK_WAITS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/thread_status.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <linux/futex.h>
#include <sys/syscall.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Whether a blocked thread's call is glibc's wait for one of its locks.
inline bool in_glibc_lock_wait(const BlockedSite& site) noexcept {
  return site.call == SYS_futex && (site.args[1] & ~std::uint64_t{FUTEX_PRIVATE_FLAG}) == FUTEX_WAIT &&
         site.args[2] == 2 && site.args[3] == 0;
}

class InternalLockWaits {
 public:
  static constexpr int max_frames = 64;
  static constexpr std::uint32_t slots = 4;  // waits sampled per span before its close writes them
  // The CPU a thread still in its wait may have run since the last look (the
  // signal's delivery, glibc's loop): more is work of its own.
  static constexpr std::int64_t still_cpu_ns = 500'000;

  // One sampled wait, from the look that found it to the close that writes it.
  struct Wait {
    enum : std::uint32_t { free, signalled, stack_taken };
    std::atomic<std::uint32_t> state{free};
    std::atomic<std::int64_t> start_ns{0};      // the ticker's: the wait's start (above)
    std::atomic<std::int64_t> last_seen_ns{0};  // the last look that found it waiting
    std::atomic<std::int64_t> gone_ns{0};       // the first look that did not (0: none yet)
    std::atomic<std::int64_t> cpu_ns{0};        // the thread's CPU clock while it waited
    std::atomic<std::uint64_t> pc{0};           // where it waits (the handler checks it is still there)
    // The handler's.
    int depth = 0;
    void* frames[max_frames];
  };

  // ---- its own thread: the lock-profiled spans open on it ----

  // True when the thread had none open before (the ticker then has one more
  // thread to look at). Waits left by a span that closed on another thread are
  // dropped then.
  bool span_opened(std::int64_t now_ns) noexcept {
    const bool first = open_spans_.load(std::memory_order_relaxed) == 0;
    if (first) {
      outermost_opened_ns_.store(now_ns, std::memory_order_relaxed);
      outermost_opened_cpu_ns_.store(this_thread_cpu_ns(), std::memory_order_relaxed);
      for (Wait& wait : waits_) {
        std::uint32_t taken = Wait::stack_taken;
        wait.state.compare_exchange_strong(taken, Wait::free, std::memory_order_acq_rel);
      }
    }
    open_spans_.fetch_add(1, std::memory_order_release);
    return first;
  }
  // True when it was the thread's last. From any thread: a span can close on
  // another (a coroutine resumed elsewhere).
  bool span_closed() noexcept {
    std::uint32_t open = open_spans_.load(std::memory_order_relaxed);
    while (open != 0 && !open_spans_.compare_exchange_weak(open, open - 1, std::memory_order_release,
                                                            std::memory_order_relaxed)) {
    }
    return open == 1;
  }
  bool span_open() const noexcept { return open_spans_.load(std::memory_order_relaxed) != 0; }

  // Whether a wait's stack was taken (its thread only): most spans have none, and
  // their close reads no clock for it.
  bool has_waits() const noexcept {
    for (const Wait& wait : waits_)
      if (wait.state.load(std::memory_order_acquire) == Wait::stack_taken) return true;
    return false;
  }

  // Calls `write(frames, depth, delay_ns)` for each wait whose stack was taken, and
  // frees it. `now_ns` and `cpu_now_ns`: the thread's clocks at its span's close.
  template <class Write>
  void take_waits(std::int64_t now_ns, std::int64_t cpu_now_ns, Write&& write) noexcept {
    for (Wait& wait : waits_) {
      if (wait.state.load(std::memory_order_acquire) != Wait::stack_taken) continue;
      const std::int64_t last_seen = wait.last_seen_ns.load(std::memory_order_relaxed);
      const std::int64_t gone = wait.gone_ns.load(std::memory_order_relaxed);
      const std::int64_t ran_since = cpu_now_ns >= 0 ? cpu_now_ns - wait.cpu_ns.load(std::memory_order_relaxed) : 0;
      // (A look may come between this close's clock read and here.)
      const std::int64_t latest = std::max(gone != 0 ? gone : now_ns, last_seen);
      const std::int64_t end = std::clamp(now_ns - std::max<std::int64_t>(ran_since, 0), last_seen, latest);
      const std::int64_t delay = std::max<std::int64_t>(end - wait.start_ns.load(std::memory_order_relaxed), 0);
      write(static_cast<void* const*>(wait.frames), wait.depth, static_cast<std::uint64_t>(delay));
      wait.state.store(Wait::free, std::memory_order_release);
    }
  }

  // ---- the handler, on the ticker's signal ----

  // Takes the stack of a wait the ticker found, when the thread is still at its
  // call (`pc`: the interrupted instruction; the kernel moves it back onto the call
  // when it restarts it). `walk(frames, max)` walks the interrupted stack.
  template <class Walk>
  void take_stack(std::uint32_t slot, std::uint64_t pc, Walk&& walk) noexcept {
    Wait& wait = waits_[slot % slots];
    if (wait.state.load(std::memory_order_acquire) != Wait::signalled) return;
    const std::uint64_t at = wait.pc.load(std::memory_order_relaxed);
    if (pc > at || at - pc > 4) {
      wait.state.store(Wait::free, std::memory_order_release);  // gone by now: nothing to take
      return;
    }
    wait.depth = walk(wait.frames, max_frames);
    // The walk's CPU (the first one reads call frame information: milliseconds) is
    // no running after the wait.
    wait.cpu_ns.store(this_thread_cpu_ns(), std::memory_order_relaxed);
    wait.state.store(wait.depth > 0 ? Wait::stack_taken : Wait::free, std::memory_order_release);
  }

  // ---- the ticker (its thread, under the sampler list's mutex) ----

  struct Look {
    bool watching = false;  // a wait is under way, or may begin: look again in a millisecond
    int signal_slot = -1;   // a wait found: signal the thread with this slot
  };

  // A look at thread `tid`, `due` at a wall tick (otherwise only a wait under way is
  // looked at). `syscall_fd`: the thread's /proc syscall file (thread_status.hpp).
  Look look(pid_t tid, int& syscall_fd, std::int64_t now, bool due) noexcept {
    Look result;
    if (!span_open()) {
      end_watch(now);
      seen_at_ns_ = -1;
      on_other_futex_ = false;
      return result;
    }
    if (!due && watched_ < 0 && !on_other_futex_) return result;
    const std::int64_t cpu = thread_cpu_ns(tid);
    BlockedSite site;
    // A thread that ran no CPU since the last look is where that look found it.
    const bool moved = cpu != seen_cpu_ns_ || seen_at_ns_ < 0;
    // Nor is one whose clock moves between two reads blocked: it runs (most looks at
    // a busy server's threads), and its syscall file is not read.
    const bool blocked = (moved || watched_ >= 0) && thread_cpu_ns(tid) == cpu &&
                         read_thread_activity(tid, syscall_fd, site) == ThreadActivity::blocked;
    if (moved) on_other_futex_ = blocked && site.call == SYS_futex && !in_glibc_lock_wait(site);
    if (watched_ >= 0) {
      // Still waiting: blocked at the same call, or woken by the signal and not yet
      // through its handler (which takes the stack; glibc's loop then waits again).
      // Off the call after that, it holds the lock, or waits for a core to return.
      Wait& wait = waits_[watched_];
      const std::int64_t ran = cpu >= 0 ? cpu - wait.cpu_ns.load(std::memory_order_relaxed) : still_cpu_ns;
      const bool at_signal = wait.state.load(std::memory_order_acquire) == Wait::signalled;
      if (ran < still_cpu_ns && (blocked ? site == watched_site_ : at_signal)) {
        wait.last_seen_ns.store(now, std::memory_order_relaxed);
        wait.cpu_ns.store(cpu, std::memory_order_relaxed);
        result.watching = true;
      } else {
        end_watch(now);
      }
    }
    if (watched_ < 0 && moved && blocked && in_glibc_lock_wait(site) &&
        !lock_wait_table.waited_for(reinterpret_cast<const void*>(site.args[0])))
      result.signal_slot = begin_watch(site, now, cpu);
    if (result.signal_slot >= 0 || on_other_futex_) result.watching = true;
    seen_at_ns_ = now;
    seen_cpu_ns_ = cpu;
    return result;
  }

  // The signal for the slot could not be sent: the wait goes unsampled.
  void signal_failed(int slot) noexcept {
    waits_[slot].state.store(Wait::free, std::memory_order_release);
    watched_ = -1;
  }

  // In a forked child: the ticker is the parent's, and so were its looks.
  void reset_after_fork() noexcept {
    for (Wait& wait : waits_) wait.state.store(Wait::free, std::memory_order_relaxed);
    watched_ = -1;
    seen_at_ns_ = -1;
  }

 private:
  int begin_watch(const BlockedSite& site, std::int64_t now, std::int64_t cpu) noexcept {
    for (std::uint32_t slot = 0; slot < slots; ++slot) {
      Wait& wait = waits_[slot];
      if (wait.state.load(std::memory_order_acquire) != Wait::free) continue;
      // A moment plus the CPU the thread ran since is the earliest its wait can have
      // begun: the latest such moment known, the span's open or the last look.
      const std::int64_t opened = outermost_opened_ns_.load(std::memory_order_relaxed);
      const std::int64_t opened_cpu = outermost_opened_cpu_ns_.load(std::memory_order_relaxed);
      std::int64_t start = opened + (cpu >= 0 && opened_cpu >= 0 ? cpu - opened_cpu : 0);
      if (seen_at_ns_ >= 0 && cpu >= 0 && seen_cpu_ns_ >= 0)
        start = std::max(start, seen_at_ns_ + (cpu - seen_cpu_ns_));
      start = std::clamp(start, opened, now);
      wait.start_ns.store(start, std::memory_order_relaxed);
      wait.last_seen_ns.store(now, std::memory_order_relaxed);
      wait.gone_ns.store(0, std::memory_order_relaxed);
      wait.cpu_ns.store(cpu, std::memory_order_relaxed);
      wait.pc.store(site.pc, std::memory_order_relaxed);
      wait.state.store(Wait::signalled, std::memory_order_release);
      watched_ = static_cast<int>(slot);
      watched_site_ = site;
      return watched_;
    }
    return -1;  // every slot holds a wait its span has not written yet
  }

  void end_watch(std::int64_t now) noexcept {
    if (watched_ < 0) return;
    Wait& wait = waits_[watched_];
    wait.gone_ns.store(now, std::memory_order_relaxed);
    // Never signalled through (the thread blocks the signal, or exited): freed.
    std::uint32_t signalled = Wait::signalled;
    wait.state.compare_exchange_strong(signalled, Wait::free, std::memory_order_acq_rel);
    watched_ = -1;
  }

  Wait waits_[slots];
  std::atomic<std::uint32_t> open_spans_{0};
  std::atomic<std::int64_t> outermost_opened_ns_{0};
  std::atomic<std::int64_t> outermost_opened_cpu_ns_{-1};  // the thread's CPU clock then
  // The ticker's own.
  int watched_ = -1;  // the slot of the wait under way
  BlockedSite watched_site_;
  // Blocked on a futex in another wait (a condition variable's): looked at every
  // millisecond, so that a lock wait right after it (the re-acquire of the
  // condition variable's mutex) is timed from within a millisecond of its start.
  bool on_other_futex_ = false;
  std::int64_t seen_at_ns_ = -1;  // its last look at the thread while a lock span was open
  std::int64_t seen_cpu_ns_ = -1;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_INTERNAL_LOCK_WAITS_HPP_
