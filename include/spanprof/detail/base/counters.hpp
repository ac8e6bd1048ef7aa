// The one registry of everything the SDK counts; spanprof::stats() reads it.
//
// Counts are kept per thread: a shared atomic would make every guard of every
// thread fight over one cache line, while a thread's own block costs a plain
// load and store. Each counter of a block is written by its own thread only, and
// each by one context only (the sample signal handler writes the counters named
// *_samples_captured/dropped for CPU, normal code all others), so no update is
// lost. stats() sums the live blocks and what exited threads left behind.
#ifndef SPANPROF_DETAIL_BASE_COUNTERS_HPP_
#define SPANPROF_DETAIL_BASE_COUNTERS_HPP_

#include <spanprof/config.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

enum class Counter : std::uint8_t {
  // capture
  cpu_guards_opened,      // guards that started a CPU profile (either engine)
  spans_without_samples,  // sampling engine: closed with no sample, nothing handed over
  spans_moved,            // closed on another thread than opened, or out of order: samples dropped
  cpu_samples_captured,   // written by the sample signal handler only
  cpu_samples_dropped,    // written by the sample signal handler only
  wall_guards_opened,     // guards that started a wall-clock profile
  wall_samples_captured,  // written by the sample signal handler only
  wall_samples_dropped,   // written by the sample signal handler only
  wall_ticks_signalled,   // the wall ticker's: ticks that sent a thread the sample signal
  wall_ticks_confirmed,   // the wall ticker's: ticks that found a thread still blocked, no signal sent
  cpu_ticks_watched,      // the ticker's: CPU ticks it sent for a POSIX timer point the kernel had not delivered
  cpu_ticks_at_close,     // ticks a span took at its close for a point its thread passed in it, not delivered yet
  cpu_source_changes,     // written by the sample signal handler only: a thread moved between timer and perf_event
  cpu_ticks_behind,       // written by the sample signal handler only: perf ticks taken with another still queued
  heap_guards_opened,
  heap_samples_captured,
  heap_samples_dropped,
  lock_waits_recorded,    // lock waits (and releases that ended others') a lock-profiled span recorded
  lock_waits_dropped,     // lost to a full per-thread lock log
  lock_waits_untracked,   // waits whose lock shared its slot of the wait table with another: no holder charged
  classic_busy,           // classic guards refused: another scope was profiling
  continuous_samples,          // the merger's: samples of the continuous profile it took
  continuous_samples_dropped,  // the merger's: samples the continuous profile's full buffer turned away
  continuous_timers_refused,   // the merger's: threads' CPU timers the kernel would not make
  // decisions
  head_declined,
  profiles_started,
  kept_sampled,           // kept_* follow ProfileReason's order
  kept_slow,
  kept_error,
  kept_triggered,
  discarded_by_tail_policy,
  kept_without_samples,   // kept as slow, error or triggered, with not one sample: no profile
  discarded_explicitly,   // ScopedProfile::discard(), or a span that ended elsewhere
  requests_abandoned,     // requests whose last handle went without end(): delivered as they were
  // the OpenTelemetry integration's zero-code-change mode
  otel_spans_ended_elsewhere,  // ended on another thread or out of order: not profiled
  otel_spans_too_deep,         // more spans open on the thread than it keeps: not profiled
  // delivery
  profiles_enqueued,
  profiles_dropped,
  profiles_refused,       // of profiles_dropped: refused at the hand-off (full or stopped), never enqueued
  profiles_uploaded,
  upload_failures,
  upload_retries,
  upload_requests,        // sends to a backend, retries and spool re-sends included
  profiles_spooled,
  spool_resent,
  spool_evicted,
  // symbolization
  source_lines_dropped,   // objects whose lines were dropped to keep source_lines_max_bytes
  count_,
};
inline constexpr std::size_t counter_count = static_cast<std::size_t>(Counter::count_);

// Which running configurations (detail/runtime/guard_host.hpp) a thread may still read,
// so that spanprof::start() can free the one it replaced once no thread can.
// Written by its own thread only; read by the runtime under the registry's mutex.
//
// A guard reads the configuration inside a *section* (from loading the pointer to
// pinning it or deciding it needs nothing from it): two plain stores, no fence.
// The runtime orders them with membarrier(2) instead, on the rare restart
// (detail/runtime/config_retirement.hpp). A guard that opens something pins its
// configuration's generation until it closes.
struct ConfigReader {
  static constexpr std::size_t slot_count = 4;
  static constexpr unsigned count_bits = 24;
  static constexpr std::uint64_t count_mask = (std::uint64_t{1} << count_bits) - 1;

  std::atomic<std::uint64_t> section{0};  // odd: inside a section
  // generation << count_bits | open guards, one distinct generation per slot.
  std::atomic<std::uint64_t> slots[slot_count] = {};
  // Guards of more distinct generations than slots: every generation from this
  // one on counts as pinned while any is open (0: none).
  std::atomic<std::uint64_t> overflow_floor{0};
  std::uint32_t overflow_guards = 0;

  // Returns the section's value inside, for leave(): leaving does not load the
  // word again. The turned-down guard is little more than these two stores, and a
  // load of a word just stored waits for the store to forward (~5 cycles) on the
  // path from one guard to the next.
  SPANPROF_ALWAYS_INLINE std::uint64_t enter() noexcept {
    const std::uint64_t inside = section.load(std::memory_order_relaxed) + 1;
    section.store(inside, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return inside;
  }
  SPANPROF_ALWAYS_INLINE void leave(std::uint64_t inside) noexcept {
    section.store(inside + 1, std::memory_order_release);
  }

  void pin(std::uint64_t generation) noexcept {
    for (auto& slot : slots) {
      const std::uint64_t v = slot.load(std::memory_order_relaxed);
      if ((v & count_mask) != 0 && (v >> count_bits) == generation && (v & count_mask) != count_mask) {
        slot.store(v + 1, std::memory_order_release);
        return;
      }
    }
    for (auto& slot : slots) {
      if ((slot.load(std::memory_order_relaxed) & count_mask) == 0) {
        slot.store(generation << count_bits | 1, std::memory_order_release);
        return;
      }
    }
    const std::uint64_t floor = overflow_floor.load(std::memory_order_relaxed);
    if (overflow_guards++ == 0 || generation < floor) overflow_floor.store(generation, std::memory_order_release);
  }

  void unpin(std::uint64_t generation) noexcept {
    for (auto& slot : slots) {
      const std::uint64_t v = slot.load(std::memory_order_relaxed);
      if ((v & count_mask) != 0 && (v >> count_bits) == generation) {
        slot.store(v - 1, std::memory_order_release);
        return;
      }
    }
    if (overflow_guards != 0 && --overflow_guards == 0) overflow_floor.store(0, std::memory_order_release);
  }

  // Whether a guard of this thread may hold `generation`. The caller has seen the
  // thread outside any section that began before the generation was replaced.
  bool pins(std::uint64_t generation) const noexcept {
    for (const auto& slot : slots) {
      const std::uint64_t v = slot.load(std::memory_order_acquire);
      if ((v & count_mask) != 0 && (v >> count_bits) == generation) return true;
    }
    const std::uint64_t floor = overflow_floor.load(std::memory_order_acquire);
    return floor != 0 && generation >= floor;
  }
  // The oldest generation this thread may hold (0: none).
  std::uint64_t oldest_pinned() const noexcept {
    std::uint64_t oldest = overflow_floor.load(std::memory_order_acquire);
    for (const auto& slot : slots) {
      const std::uint64_t v = slot.load(std::memory_order_acquire);
      if ((v & count_mask) != 0 && (oldest == 0 || (v >> count_bits) < oldest)) oldest = v >> count_bits;
    }
    return oldest;
  }
};

// One thread's counters. Constant-initialized and trivially destructible, so
// reading it never runs a TLS constructor (the signal handler reaches it through
// a pointer taken in normal context).
struct ThreadCounters {
  std::atomic<std::uint64_t> values[counter_count] = {};
  ConfigReader config_reader;
  ThreadCounters* next = nullptr;
  ThreadCounters* prev = nullptr;
  bool registered = false;
  bool exited = false;  // counts from later thread-exit destructors go straight to `retired`

  void add(Counter counter, std::uint64_t n) noexcept {
    std::atomic<std::uint64_t>& value = values[static_cast<std::size_t>(counter)];
    value.store(value.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

// A sum of every thread's counters.
struct CounterTotals {
  std::uint64_t values[counter_count] = {};
  std::uint64_t operator[](Counter counter) const noexcept { return values[static_cast<std::size_t>(counter)]; }
};

struct CounterRegistry {
  std::mutex mutex;
  ThreadCounters* head = nullptr;
  std::uint64_t retired[counter_count] = {};  // threads that exited
  // A thread that exited with guards still open (closed by later thread-exit
  // destructors) may hold configurations from this generation on: never freed.
  std::uint64_t exited_pins_floor = 0;

  // In a forked child (one thread, the mutex held since before the fork): the
  // child counts from zero, on the forking thread's block only.
  void reset_after_fork(ThreadCounters* survivor) noexcept {
    for (auto& value : retired) value = 0;
    exited_pins_floor = 0;
    head = nullptr;
    if (survivor != nullptr && survivor->registered) {
      for (auto& value : survivor->values) value.store(0, std::memory_order_relaxed);
      survivor->next = survivor->prev = nullptr;
      head = survivor;
    }
    new (&mutex) std::mutex();
  }

  CounterTotals totals() noexcept {
    CounterTotals sum;
    std::lock_guard<std::mutex> held(mutex);
    for (std::size_t i = 0; i < counter_count; ++i) sum.values[i] = retired[i];
    for (ThreadCounters* t = head; t; t = t->next)
      for (std::size_t i = 0; i < counter_count; ++i) sum.values[i] += t->values[i].load(std::memory_order_relaxed);
    return sum;
  }
};

SPANPROF_API inline CounterRegistry& counter_registry() noexcept {
  static CounterRegistry registry;
  return registry;
}

inline thread_local ThreadCounters thread_counters;

// Unlinks the thread's block at thread exit, folding its counts into `retired`.
struct ThreadCountersOwner {
  ~ThreadCountersOwner() {
    auto& registry = counter_registry();
    std::lock_guard<std::mutex> held(registry.mutex);
    ThreadCounters& t = thread_counters;
    if (t.prev) t.prev->next = t.next;
    else if (registry.head == &t) registry.head = t.next;
    if (t.next) t.next->prev = t.prev;
    for (std::size_t i = 0; i < counter_count; ++i) registry.retired[i] += t.values[i].load(std::memory_order_relaxed);
    if (const std::uint64_t oldest = t.config_reader.oldest_pinned();
        oldest != 0 && (registry.exited_pins_floor == 0 || oldest < registry.exited_pins_floor))
      registry.exited_pins_floor = oldest;
    t.registered = false;
    t.exited = true;
  }
};

// Links this thread's block into the registry (once per thread). False when the
// thread is exiting: its counts then go to the registry directly.
SPANPROF_NOINLINE inline bool register_thread_counters() noexcept {
  ThreadCounters& t = thread_counters;
  if (t.exited) return false;
  static thread_local ThreadCountersOwner owner;
  (void)&owner;
  auto& registry = counter_registry();
  std::lock_guard<std::mutex> held(registry.mutex);
  if (t.registered) return true;
  t.next = registry.head;
  t.prev = nullptr;
  if (registry.head) registry.head->prev = &t;
  registry.head = &t;
  t.registered = true;
  return true;
}

SPANPROF_NOINLINE inline void count_after_thread_exit(Counter counter, std::uint64_t n) noexcept {
  auto& registry = counter_registry();
  std::lock_guard<std::mutex> held(registry.mutex);
  registry.retired[static_cast<std::size_t>(counter)] += n;
}

// This thread's block, registered; for code that keeps a pointer to it (the CPU
// sampler, whose signal handler must not touch thread_local storage itself).
inline ThreadCounters& this_thread_counters() noexcept {
  if (!thread_counters.registered) register_thread_counters();
  return thread_counters;
}

SPANPROF_ALWAYS_INLINE inline void count(Counter counter, std::uint64_t n = 1) noexcept {
  ThreadCounters& t = thread_counters;
  if (SPANPROF_UNLIKELY(!t.registered) && !register_thread_counters()) {
    count_after_thread_exit(counter, n);
    return;
  }
  t.add(counter, n);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_COUNTERS_HPP_
