// A thread's log of lock waits: the lock records (sample_records.hpp) its lock
// hooks (lock_hooks.hpp) write while a span that records lock waits is open on it,
// and its guards copy out at their close. Only its own thread touches it, never
// from a signal handler; it is made at the thread's first such span.
#ifndef SPANPROF_DETAIL_CAPTURE_LOCK_LOG_HPP_
#define SPANPROF_DETAIL_CAPTURE_LOCK_LOG_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/capture/internal_lock_waits.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
#include <spanprof/detail/capture/wall_ticker.hpp>
#include <spanprof/span/span_context.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct ThreadLockLog {
  // 256 KiB: a few thousand waits, each with its stack, per outermost span.
  static constexpr std::size_t capacity_words = 32768;

  std::uint64_t* words = nullptr;  // null: not made yet (or could not be)
  std::size_t used = 0;
  std::uint64_t stack_top = 0;     // of this thread's stack, for the stack walker
  std::uint32_t tid = 0;           // the thread's id, once read (0: not yet)
  // Inside the hooks' own recording: a lock taken meanwhile is the hooks', not the span's.
  bool recording = false;

  // Makes the log; false when out of memory.
  bool make() noexcept {
    if (words == nullptr) words = new (std::nothrow) std::uint64_t[capacity_words];
    return words != nullptr;
  }
};

// Trivially destructible and constant-initialized: the hooks read it without a TLS
// constructor, in any thread, before main and after its owner is gone.
inline thread_local ThreadLockLog thread_lock_log;

// A span's lock records, taken at its close: from where it began in the thread's
// log to the end (none: words 0). They stay in place until the thread's next
// outermost span that records lock waits opens.
struct LockRecords {
  const std::uint64_t* first = nullptr;
  std::size_t words = 0;
};
inline LockRecords lock_records_since(std::size_t start) noexcept {
  const ThreadLockLog& log = thread_lock_log;
  if (log.words == nullptr || log.used <= start) return {};
  return {log.words + start, log.used - start};
}

// Appends a record of `wait` with its stack to the thread's log (made): false,
// counted, when the log is full.
inline bool append_lock_record(const LockWait& wait, void* const* frames, std::size_t depth,
                               ThreadCounters& counters) noexcept {
  ThreadLockLog& log = thread_lock_log;
  const std::size_t need = lock_record_words(wait, depth);
  if (depth == 0 || log.used + need > ThreadLockLog::capacity_words) {
    counters.add(Counter::lock_waits_dropped, 1);
    return false;
  }
  write_lock_record(log.words + log.used, wait, frames, depth);
  log.used += need;
  counters.add(Counter::lock_waits_recorded, 1);
  return true;
}

// At a lock span's close: the waits on glibc's own locks the ticker found on the
// thread meanwhile go into its log, the holder unknown (internal_lock_waits.hpp).
inline void record_internal_lock_waits(InternalLockWaits& waits, ThreadCounters& counters) noexcept {
  if (thread_lock_log.words == nullptr || !waits.has_waits()) return;
  waits.take_waits(monotonic_now_ns(), this_thread_cpu_ns(), [&](void* const* frames, int depth, std::uint64_t delay) {
    LockWait wait;
    wait.contentions = 1;
    wait.delay_ns = delay;
    append_lock_record(wait, frames, static_cast<std::size_t>(depth), counters);
  });
}

// A lock span closes: on its own thread (`counters` given) the waits the ticker
// found go into the lock log first, before the span takes its records.
inline void close_internal_lock_watch(InternalLockWaits& waits, ThreadCounters* counters) noexcept {
  if (counters != nullptr) record_internal_lock_waits(waits, *counters);
  if (waits.span_closed()) wall_ticker().thread_ended_wall_span();
}

// Frees the thread's log when it exits.
struct ThreadLockLogOwner {
  ~ThreadLockLogOwner() {
    delete[] thread_lock_log.words;
    thread_lock_log.words = nullptr;
    thread_lock_log.used = 0;
  }
};
inline thread_local ThreadLockLogOwner thread_lock_log_owner;

// The span in `ticket`'s slot records its thread's lock waits from now (lock_hooks-inl.hpp):
// the slot keeps where they begin in the thread's lock log, and who the span is for
// the waiters of a lock it releases. Without a log (out of memory), it records none.
// The ticker looks for its waits on glibc's own locks (internal_lock_waits.hpp) at
// the wall ticks, `wall_period_ns` apart on average.
inline void open_lock_recording(ThreadStackSampler& sampler, SpanSlotTicket ticket, std::int64_t wall_period_ns,
                                const SpanContext& span, std::string_view name) noexcept {
  if (sampler.internal_lock_waits().span_opened(monotonic_now_ns()))
    wall_ticker().thread_started_wall_span(wall_period_ns);
  ThreadLockLog& log = thread_lock_log;
  if (!log.make()) return report_error(ErrorCode::sampler_failed, "cannot allocate the lock log; no lock waits recorded");
  (void)&thread_lock_log_owner;  // frees it at thread exit
  if (log.stack_top == 0) log.stack_top = this_thread_stack_top();
  ActiveSpan& slot = sampler.span(ticket);
  if (slot.parent.load(std::memory_order_relaxed) == 0) log.used = 0;  // no open span reads older records
  slot.lock_log_start = log.used;
  LockSpanIdentity& identity = slot.lock_identity;
  std::memcpy(identity.trace_id, span.trace_id.bytes().data(), sizeof identity.trace_id);
  std::memcpy(identity.span_id, span.span_id.bytes().data(), sizeof identity.span_id);
  identity.name_bytes = static_cast<std::uint8_t>(std::min(name.size(), LockSpanIdentity::max_name));
  std::memcpy(identity.name, name.data(), identity.name_bytes);
  if (!lock_hooks_on.load(std::memory_order_relaxed)) lock_hooks_on.store(true, std::memory_order_relaxed);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_LOCK_LOG_HPP_
