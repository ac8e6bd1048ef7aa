// Counts of every profiling decision (head declined, started, kept by reason,
// discarded), per thread. A shared atomic would make every turned-down guard of
// every thread fight over one cache line; a thread's own counters cost a plain
// increment, and stats() sums them.
#ifndef SPANPROF_DETAIL_DECISION_COUNTERS_HPP_
#define SPANPROF_DETAIL_DECISION_COUNTERS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/tail_policy.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct DecisionCounts {
  std::uint64_t head_declined = 0;
  std::uint64_t started = 0;
  std::uint64_t kept[profile_reason_count] = {};
  std::uint64_t discarded = 0;

  void add(const DecisionCounts& other) noexcept {
    head_declined += other.head_declined;
    started += other.started;
    for (std::size_t i = 0; i < profile_reason_count; ++i) kept[i] += other.kept[i];
    discarded += other.discarded;
  }
};

// One thread's counters: written by that thread only (relaxed load + store), read
// by stats() from any thread.
struct ThreadDecisionCounters {
  std::atomic<std::uint64_t> head_declined{0};
  std::atomic<std::uint64_t> started{0};
  std::atomic<std::uint64_t> kept[profile_reason_count] = {};
  std::atomic<std::uint64_t> discarded{0};
  bool registered = false;
  bool exited = false;  // guards in later thread-exit destructors are not counted again
  ThreadDecisionCounters* next = nullptr;
  ThreadDecisionCounters* prev = nullptr;

  DecisionCounts snapshot() const noexcept {
    DecisionCounts c;
    c.head_declined = head_declined.load(std::memory_order_relaxed);
    c.started = started.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < profile_reason_count; ++i) c.kept[i] = kept[i].load(std::memory_order_relaxed);
    c.discarded = discarded.load(std::memory_order_relaxed);
    return c;
  }
};

struct DecisionRegistry {
  std::mutex mutex;
  ThreadDecisionCounters* head = nullptr;
  DecisionCounts retired;  // threads that exited

  DecisionCounts total() noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    DecisionCounts sum = retired;
    for (ThreadDecisionCounters* t = head; t; t = t->next) sum.add(t->snapshot());
    return sum;
  }
};

SPANPROF_API inline DecisionRegistry& decision_registry() noexcept {
  static DecisionRegistry registry;
  return registry;
}

// Constant-initialized, so the turned-down guard reads it without a TLS init call.
inline thread_local ThreadDecisionCounters thread_decisions;

// Unlinks the thread's counters at thread exit; created by the thread's first count.
struct ThreadDecisionsOwner {
  ~ThreadDecisionsOwner() {
    auto& registry = decision_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    ThreadDecisionCounters& t = thread_decisions;
    if (t.prev) t.prev->next = t.next;
    else if (registry.head == &t) registry.head = t.next;
    if (t.next) t.next->prev = t.prev;
    registry.retired.add(t.snapshot());
    t.registered = false;
    t.exited = true;
  }
};

SPANPROF_NOINLINE inline void register_thread_decisions() noexcept {
  static thread_local ThreadDecisionsOwner owner;
  (void)&owner;
  auto& registry = decision_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  ThreadDecisionCounters& t = thread_decisions;
  if (t.registered || t.exited) return;
  t.next = registry.head;
  t.prev = nullptr;
  if (registry.head) registry.head->prev = &t;
  registry.head = &t;
  t.registered = true;
}

inline void count_decision(std::atomic<std::uint64_t>& counter) noexcept {
  if (SPANPROF_UNLIKELY(!thread_decisions.registered) && !thread_decisions.exited) register_thread_decisions();
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DECISION_COUNTERS_HPP_
