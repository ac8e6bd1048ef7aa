// A thread's log of lock waits: the lock records (sample_records.hpp) its lock
// hooks (lock_hooks.hpp) write while a span that records lock waits is open on it,
// and its guards copy out at their close. Only its own thread touches it, never
// from a signal handler; it is made at the thread's first such span.
#ifndef SPANPROF_DETAIL_CAPTURE_LOCK_LOG_HPP_
#define SPANPROF_DETAIL_CAPTURE_LOCK_LOG_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
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

// Frees the thread's log when it exits.
struct ThreadLockLogOwner {
  ~ThreadLockLogOwner() {
    delete[] thread_lock_log.words;
    thread_lock_log.words = nullptr;
    thread_lock_log.used = 0;
  }
};
inline thread_local ThreadLockLogOwner thread_lock_log_owner;

// The span in `slot` records its thread's lock waits from now (lock_hooks-inl.hpp):
// the slot keeps where they begin in the thread's lock log, and who the span is for
// the waiters of a lock it releases. Without a log (out of memory), it records none.
inline void open_lock_recording(ActiveSpan& slot, const SpanContext& span, std::string_view name) noexcept {
  ThreadLockLog& log = thread_lock_log;
  if (!log.make()) return report_error(ErrorCode::sampler_failed, "cannot allocate the lock log; no lock waits recorded");
  (void)&thread_lock_log_owner;  // frees it at thread exit
  if (log.stack_top == 0) log.stack_top = this_thread_stack_top();
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
