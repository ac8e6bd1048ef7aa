// spanprof's own holds on the dynamic loader's lock, so that fork() can wait
// them out.
//
// libunwind (gperftools' stack walker, in the sample signal handler and the heap
// hooks) and the symbolizer's scan of the loaded objects take the loader lock
// through dl_iterate_phdr. glibc's fork() does not reset that lock in the child:
// a fork while one of them held it would leave the child's loader locked for
// good, and its first sample, dlopen or dl_iterate_phdr would hang. The fork
// prepare handler closes this gate and waits for those inside to leave; a
// sample that finds the gate closed is dropped (and counted), a scan waits.
#ifndef SPANPROF_DETAIL_BASE_LOADER_LOCK_GATE_HPP_
#define SPANPROF_DETAIL_BASE_LOADER_LOCK_GATE_HPP_

#include <spanprof/config.hpp>

#include <atomic>
#include <chrono>

#include <sched.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class LoaderLockGate {
 public:
  constexpr LoaderLockGate() noexcept = default;

  // Async-signal-safe. False: a fork is under way, keep out of the loader.
  bool enter() noexcept {
    inside_.fetch_add(1, std::memory_order_seq_cst);
    if (!closed_.load(std::memory_order_seq_cst)) return true;
    inside_.fetch_sub(1, std::memory_order_seq_cst);
    return false;
  }
  void leave() noexcept { inside_.fetch_sub(1, std::memory_order_seq_cst); }

  // Fork prepare: no new entry, and those inside are waited for, within `limit`
  // (one of them may wait on a loader lock the host holds).
  void close_and_wait(std::chrono::milliseconds limit) noexcept {
    closed_.store(true, std::memory_order_seq_cst);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (inside_.load(std::memory_order_seq_cst) != 0 && std::chrono::steady_clock::now() < deadline) ::sched_yield();
  }
  void open() noexcept { closed_.store(false, std::memory_order_seq_cst); }

  // In the child: only the forking thread is left, and it is inside nothing.
  void reset_after_fork() noexcept {
    inside_.store(0, std::memory_order_relaxed);
    closed_.store(false, std::memory_order_relaxed);
  }

 private:
  std::atomic<int> inside_{0};
  std::atomic<bool> closed_{false};
};

SPANPROF_API inline LoaderLockGate& loader_lock_gate() noexcept {
  static LoaderLockGate gate;  // constant-initialized: no guard, safe in a handler
  return gate;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_LOADER_LOCK_GATE_HPP_
