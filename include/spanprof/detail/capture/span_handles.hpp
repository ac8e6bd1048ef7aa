// Internal. The slots of a thread's open spans in its samplers, and what a guard
// keeps of them: a handle, never a pointer the samplers follow back into the guard. A guard may end
// on another thread, or its storage (a coroutine frame) may die, while its thread
// runs on (docs/async.md).
#ifndef SPANPROF_DETAIL_CAPTURE_SPAN_HANDLES_HPP_
#define SPANPROF_DETAIL_CAPTURE_SPAN_HANDLES_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Open spans a thread can nest; a guard opened deeper is not profiled (counted).
inline constexpr std::uint32_t max_open_spans = 32;

// A guard's handle on its slot in the thread's stack sampler
// (detail/capture/thread_stack_sampler.hpp). index == max_open_spans: none.
struct SpanSlotTicket {
  std::uint32_t index = max_open_spans;
  std::uint32_t sequence = 0;
  bool valid() const noexcept { return index < max_open_spans; }
};

struct HeapThreadState;

// A heap guard's record of its span (detail/capture/heap_sampler.hpp). The thread's open
// heap spans form a stack counted by depth.
struct HeapActiveSpan {
  HeapThreadState* owner = nullptr;  // the opening thread's state
  std::uint32_t depth = 0;           // 1 for the thread's outermost heap span
  std::size_t log_start = 0;
  std::uint64_t dropped_at_start = 0;
};

// One open span of the thread, as the signal handler sees it. It lives in the
// thread's sampler, never in the guard: a guard may end on another thread, or its
// storage (a coroutine frame) may die while the thread that opened it still runs,
// and the handler must never read a guard's memory then. Open spans form a stack of
// slots linked innermost first; the guard keeps a ticket (slot and sequence number).
// A thread's times as the kernel keeps them, read at a span's open when
// Options::time_split is on (thread_times.hpp reads them).
struct ThreadTimes {
  std::int64_t at_ns = 0;    // the monotonic clock they were read at
  std::int64_t cpu_ns = -1;  // -1: not read
  std::int64_t run_delay_ns = 0;
  std::int64_t voluntary_switches = 0;
  std::int64_t involuntary_switches = 0;
};

// A span that records lock waits, as the waiters of a lock it releases see it
// (lock_waits.hpp): copied into its slot at its open, so that a release never reads
// the guard.
struct LockSpanIdentity {
  static constexpr std::size_t max_name = 47;
  std::uint8_t trace_id[16] = {};
  std::uint8_t span_id[8] = {};
  std::uint8_t name_bytes = 0;
  char name[max_name] = {};
};

struct ActiveSpan {
  ProfileKinds kinds;                 // what this span profiles: cpu, wall, lock
  ProfileKinds recorded;              // kinds, and what the open spans around it profile
  std::size_t log_start = 0;          // where this span's samples begin in the log
  std::uint64_t dropped_at_start = 0;
  std::uintptr_t frame = 0;           // the guard, when it lives on this thread's stack: a walk may start there
  std::uintptr_t edge_holder = 0;     // the guard, when the span's edges take the timer's overdue points
  std::int64_t cpu_at_open_ns = -1;   // and the thread's CPU clock at the open then
  ThreadTimes times_at_open;          // Options::time_split: read by the guard after the push
  std::size_t lock_log_start = 0;     // kinds has lock: where its lock waits begin in the thread's lock log
  LockSpanIdentity lock_identity;     // and the span, as the holder of a lock others wait for
  // Set (by another thread, possibly) when the span ended elsewhere: its samples
  // are no longer recorded. Null unless a guard asked (ScopedProfile::stop_sampling_when).
  const std::atomic<bool>* stop = nullptr;
  std::atomic<std::uint32_t> parent{0};  // 1 + the enclosing slot's index; 0: outermost
  // sequence << 2 | SpanSlotState. Written by the owning thread, and once by a
  // guard that closes on another thread (open -> dead, compare-and-swap).
  std::atomic<std::uint32_t> state{0};
};

enum SpanSlotState : std::uint32_t { span_slot_free = 0, span_slot_open = 1, span_slot_dead = 2 };

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_SPAN_HANDLES_HPP_
