// The process's table of lock waits under way: how the lock hooks (lock_hooks.hpp)
// tell a holder what its waiters waited, and a waiter who let it in.
//
// Why it is shaped like this (docs/locks.md):
//  * A waiter cannot read the holder's span: the holder's thread may exit, and its
//    guard is not the waiter's to read. The holder writes who it is into the entry
//    of the lock as it releases it, and the waiter it lets in reads that.
//  * A holder is charged, at each release, the time its waiters waited since they
//    began or since the release before (Go's mutex profile since 1.22): each
//    waiter's mark is its start or the last release, and the entry keeps their
//    sum, so a release costs the same whatever the number of waiters.
//  * Only contended locks touch it (an uncontended lock never waits): one entry per
//    lock address, direct-mapped, each behind a spin lock held for a few stores. A
//    lock whose entry another contended lock holds waits untracked (counted): its
//    waiter still records its wait, with the holder's thread only.
//  * The lock's memory is never touched here: a mutex may be destroyed and its
//    page unmapped right after its wait.
#ifndef SPANPROF_DETAIL_CAPTURE_LOCK_WAITS_HPP_
#define SPANPROF_DETAIL_CAPTURE_LOCK_WAITS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/span_handles.hpp>

#if SPANPROF_ENABLED

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <sched.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Who released a lock, as the waiter it let in learns it.
struct LockHolder {
  static constexpr std::size_t max_frames = 8;
  std::uint32_t tid = 0;  // 0: unknown
  bool in_span = false;   // a span that records lock waits held it: `span` says which
  LockSpanIdentity span;
  // Where it released the lock, innermost first (return addresses, the first the
  // call into the unlock): recorded by a holder in such a span only.
  std::uint8_t depth = 0;
  std::uint64_t frames[max_frames] = {};
};

class LockWaitTable {
 public:
  static constexpr std::size_t entry_count = 1024;

  // A waiter's place in the table, from register_wait to finish_wait.
  struct Registration {
    std::uint32_t index = 0;
    std::uint64_t releases = 0;  // the entry's releases when it registered
    bool tracked = false;        // false: the entry was another lock's
  };

  // What a release ended: the waiters it found and the time they waited under this
  // holder (since they began, or since the release before).
  struct Charge {
    std::uint32_t waiters = 0;
    std::int64_t delay_ns = 0;
  };

  constexpr LockWaitTable() noexcept = default;

  // Any wait registered now, anywhere: while none is, a release looks no further.
  bool anyone_waiting() const noexcept { return waiting_.load(std::memory_order_relaxed) != 0; }

  // Whether waits for `lock` are registered, read without the entry's lock: a
  // holder about to release it learns whether its stack is worth walking. A wait
  // registered a moment later is charged all the same, with no place for its holder.
  bool waited_for(const void* address) const noexcept {
    return entries_[index_of(address)].address.load(std::memory_order_relaxed) == address;
  }

  // A thread begins to wait for `lock` at `start_ns` (monotonic).
  Registration register_wait(const void* address, std::int64_t start_ns) noexcept {
    Registration registration;
    registration.index = index_of(address);
    Entry& entry = entries_[registration.index];
    hold(entry);
    if (entry.waiters == 0 || entry.address.load(std::memory_order_relaxed) == address) {
      if (entry.waiters == 0) {
        entry.address.store(address, std::memory_order_relaxed);
        entry.marks_ns = 0;
      }
      ++entry.waiters;
      entry.marks_ns += start_ns;
      registration.releases = entry.releases;
      registration.tracked = true;
    }
    let_go(entry);
    if (registration.tracked) waiting_.fetch_add(1, std::memory_order_relaxed);
    return registration;
  }

  // The waiter holds `lock` now (or gave up). True when a release let it in since
  // it registered: `holder` is who released it last.
  bool finish_wait(const void* address, const Registration& registration, std::int64_t start_ns,
                   LockHolder& holder) noexcept {
    if (!registration.tracked) return false;
    Entry& entry = entries_[registration.index];
    hold(entry);
    const bool released = entry.releases != registration.releases;
    if (entry.address.load(std::memory_order_relaxed) == address && entry.waiters != 0) {
      entry.marks_ns -= released ? entry.released_ns : start_ns;
      if (--entry.waiters == 0) entry.address.store(nullptr, std::memory_order_relaxed);
    }
    if (released) holder = entry.holder;
    let_go(entry);
    waiting_.fetch_sub(1, std::memory_order_relaxed);
    return released;
  }

  // `lock` is released at `now_ns` by `holder`: what its waiters waited under it.
  Charge release(const void* address, std::int64_t now_ns, const LockHolder& holder) noexcept {
    Charge charge;
    Entry& entry = entries_[index_of(address)];
    hold(entry);
    if (entry.address.load(std::memory_order_relaxed) == address && entry.waiters != 0) {
      const std::int64_t marks_now = static_cast<std::int64_t>(entry.waiters) * now_ns;
      charge.waiters = entry.waiters;
      charge.delay_ns = marks_now > entry.marks_ns ? marks_now - entry.marks_ns : 0;
      entry.marks_ns = marks_now;
      entry.released_ns = now_ns;
      ++entry.releases;
      entry.holder = holder;
    }
    let_go(entry);
    return charge;
  }

  // In a forked child: the waits were the parent's threads', which the child does
  // not have, and an entry's spin lock may have been held by one of them.
  void reset_after_fork() noexcept {
    for (Entry& entry : entries_) {
      entry.busy.store(0, std::memory_order_relaxed);
      entry.waiters = 0;
      entry.address.store(nullptr, std::memory_order_relaxed);
      entry.marks_ns = 0;
    }
    waiting_.store(0, std::memory_order_relaxed);
  }

 private:
  struct alignas(64) Entry {
    std::atomic<std::uint32_t> busy{0};
    std::uint32_t waiters = 0;
    // The lock its waiters wait for (null: free); written under `busy`, read
    // without it by waited_for.
    std::atomic<const void*> address{nullptr};
    std::int64_t marks_ns = 0;      // the sum of its waiters' marks: start, or the last release since
    std::int64_t released_ns = 0;   // the last release
    std::uint64_t releases = 0;
    LockHolder holder;              // who released it last
  };

  static std::uint32_t index_of(const void* address) noexcept {
    const auto at = reinterpret_cast<std::uintptr_t>(address) >> 3;
    return static_cast<std::uint32_t>((at * 0x9E3779B97F4A7C15ull) >> 54) & (entry_count - 1);
  }

  // The entry's spin lock: held for a few stores, so a spin mostly means its
  // holder was preempted, and the waiter yields its core to it.
  static void hold(Entry& entry) noexcept {
    for (unsigned spins = 0; entry.busy.exchange(1, std::memory_order_acquire) != 0;) {
      if (++spins < 64) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      } else {
        ::sched_yield();
      }
    }
  }
  static void let_go(Entry& entry) noexcept { entry.busy.store(0, std::memory_order_release); }

  static_assert((entry_count & (entry_count - 1)) == 0, "index_of masks by the count");
  Entry entries_[entry_count];
  // Registered waits, all entries; read by every unlock: a line of its own, which
  // no other variable's writes take from the cores that read it.
  alignas(64) std::atomic<std::uint32_t> waiting_{0};
};

// Whether a span has asked for lock profiles since the process started: until
// then a lock costs one load more than glibc's (lock_hooks-inl.hpp). Read by every
// lock: a line of its own. And whether the continuous profile records every
// thread's lock waits (Options::continuous with the lock kind): a lock found held
// is then watched on any thread, not only inside a lock-profiled span.
struct alignas(64) LockHooksSwitch {
  std::atomic<bool> on{false};
  std::atomic<bool> every_thread{false};
  bool load(std::memory_order order) const noexcept { return on.load(order); }
  void store(bool value, std::memory_order order) noexcept { on.store(value, order); }
};
inline LockHooksSwitch lock_hooks_on;

// Constant-initialized: a lock taken before main, or after the runtime's statics are
// destroyed, still finds it.
inline LockWaitTable lock_wait_table;

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_LOCK_WAITS_HPP_
