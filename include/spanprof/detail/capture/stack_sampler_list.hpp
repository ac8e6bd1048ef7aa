// Where the samplers live: each thread owns its own (ThreadStackSamplerOwner, a
// thread_local whose destructor runs at thread exit), and the process lists them
// all, so that shutdown() can disarm them, stats() can count the armed ones, a
// forked child can let go of its parent's, and the watchdog and the wall ticker
// can look at every thread (detail/capture/sample_signal.hpp, detail/capture/wall_ticker.hpp).
//
// The signal handler sees neither: it reads current_stack_sampler only
// (detail/capture/thread_stack_sampler.hpp), which the owner clears before a sampler is
// freed.
#ifndef SPANPROF_DETAIL_CAPTURE_STACK_SAMPLER_LIST_HPP_
#define SPANPROF_DETAIL_CAPTURE_STACK_SAMPLER_LIST_HPP_

#include <spanprof/config.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>

// Compiled out with the SDK, as the samplers it keeps.
#if SPANPROF_ENABLED

#include <atomic>
#include <mutex>
#include <new>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// All live CPU samplers, so shutdown() can disarm them and stats() can count the
// armed ones. (What they count lives in the counter registry.)
struct StackSamplerList {
  std::mutex mutex;
  ThreadStackSampler* head = nullptr;
  CpuSampleSource last_source = CpuSampleSource::automatic;
  bool reported_fallback = false;

  void add(ThreadStackSampler* sampler) noexcept {
    std::lock_guard<std::mutex> held(mutex);
    sampler->registry_next = head;
    if (head) head->registry_prev = sampler;
    head = sampler;
    last_source = sampler->source();
  }

  void remove(ThreadStackSampler* sampler) noexcept {
    std::lock_guard<std::mutex> held(mutex);
    if (sampler->registry_prev) sampler->registry_prev->registry_next = sampler->registry_next;
    else if (head == sampler) head = sampler->registry_next;
    if (sampler->registry_next) sampler->registry_next->registry_prev = sampler->registry_prev;
  }

  // Samplers whose thread exited while a guard it opened was still open on another
  // thread (detail/capture/thread_stack_sampler.hpp, ActiveSpan): that guard will write
  // its slot, so they are never freed. Kept here, not leaked: a few KiB each, only
  // for threads that exit with such a guard.
  ThreadStackSampler* left_behind = nullptr;

  void leave_behind(ThreadStackSampler* sampler) noexcept {
    std::lock_guard<std::mutex> held(mutex);
    sampler->registry_prev = nullptr;
    sampler->registry_next = left_behind;
    left_behind = sampler;
  }

  // In a forked child (one thread, the mutex held since before the fork): the
  // parent's samplers are left to the parent, and the list starts empty.
  void reset_after_fork() noexcept {
    for (ThreadStackSampler* s = head; s != nullptr;) {
      ThreadStackSampler* next = s->registry_next;
      s->forget_source_after_fork();
      s = next;
    }
    head = nullptr;
    new (&mutex) std::mutex();
  }
};

SPANPROF_API inline StackSamplerList& stack_sampler_list() noexcept {
  static StackSamplerList list;
  return list;
}

// Owns this thread's sampler; its destructor runs at thread exit. The handler
// never sees it, only current_stack_sampler.
struct ThreadStackSamplerOwner {
  ThreadStackSampler* sampler = nullptr;

  void replace(ThreadStackSampler* next) noexcept {
    ThreadStackSampler* old = sampler;
    current_stack_sampler = nullptr;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (old) {
      stack_sampler_list().remove(old);
      // A guard that moved to another thread still holds a slot: it will mark the
      // slot dead there, so the slots must outlive this thread (capture/
      // thread_stack_sampler.hpp, ActiveSpan). Only the rest is freed then.
      if (old->has_open_span()) {
        old->release_log_and_source();
        stack_sampler_list().leave_behind(old);
      } else {
        delete old;  // disables the source before freeing the log
      }
    }
    sampler = next;
    if (next) stack_sampler_list().add(next);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    current_stack_sampler = next;
  }

  ~ThreadStackSamplerOwner() { replace(nullptr); }
};

inline thread_local ThreadStackSamplerOwner stack_sampler_owner;

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_STACK_SAMPLER_LIST_HPP_
