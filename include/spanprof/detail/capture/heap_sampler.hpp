// The sampling heap engine: tcmalloc's new/delete hooks attribute sampled
// allocations to the calling thread's active heap span.
//
// Why it is shaped like this (see docs/heap.md):
//  * Installed hooks make every allocation in the process leave tcmalloc's fast
//    path, inert or not, so they are installed only while at least one heap scope is
//    open. Opening and closing scopes is lock-free except for the 0 <-> 1 transitions.
//  * The new hook costs a thread-local load for threads outside a heap scope and a
//    subtraction inside one: an allocation is recorded once per ~interval bytes
//    (exponentially distributed gaps, so every byte has the same chance), and the
//    counts are scaled back to unbiased estimates as Go's allocation profile does.
//  * Recording writes into a preallocated per-thread log: the hooks never allocate
//    and never take a lock.
//  * Frees happen on any thread. A fixed table of the sampled, still-live pointers
//    lets the delete hook mark them freed with one cache line scan and a CAS; while
//    no sampled allocation is live, the delete hook returns after one load.
#ifndef SPANPROF_DETAIL_CAPTURE_HEAP_SAMPLER_HPP_
#define SPANPROF_DETAIL_CAPTURE_HEAP_SAMPLER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/xorshift.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/capture/live_allocations.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
#include <spanprof/detail/capture/tcmalloc_api.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/loader_lock_gate.hpp>

#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <time.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Heap spans a thread can nest; deeper ones are not heap-profiled (reported).
inline constexpr std::uint32_t max_open_heap_spans = 32;

// Everything the hooks touch on a thread. Trivial and constant-initialized, so a
// hook reading it never runs a TLS constructor.
struct HeapThreadState {
  std::uint32_t open;  // heap spans open on this thread (dead ones included until reaped)
  // Bit d - 1: the span at depth d ended on another thread (set by that thread,
  // under heap_thread_registry()'s mutex while this thread is alive).
  std::atomic<std::uint32_t> dead_depths;
  std::int64_t bytes_until_sample;
  std::uint64_t random;  // xorshift state; 0: not seeded yet
  std::int64_t interval;
  int max_depth;
  bool in_hook;
  bool probing;
  bool probe_seen;
  std::uint64_t* log;
  std::size_t capacity;  // words
  std::size_t used;
  std::uint64_t dropped;
  std::uint64_t stack_top;  // of this thread's stack (0: unknown), for the stack walker
};

SPANPROF_SIGNAL_SAFE_TLS inline thread_local HeapThreadState heap_thread = {};

// Exponentially distributed gap with the given mean: every allocated byte then has
// the same chance 1/interval of being the one sampled.
inline std::int64_t next_sample_gap(HeapThreadState& t) noexcept {
  if (t.interval <= 1) return 1;
  const double uniform = xorshift_unit(t.random);
  const double gap = -std::log(uniform) * static_cast<double>(t.interval);
  return gap < 1.0 ? 1 : static_cast<std::int64_t>(gap);
}

// Where the hooks come from: tcmalloc's MallocHook (default), or spanprof's own
// replacement operator new/delete, compiled into the program by including
// <spanprof/allocation_hooks.hpp> in one source file.
enum class HeapHookSource : std::uint8_t { malloc_hook, operator_new };

// Set by the translation unit that defines the replacement operators.
SPANPROF_API inline std::atomic<bool>& operator_new_hooks_compiled_in() noexcept {
  static std::atomic<bool> compiled_in{false};
  return compiled_in;
}

// What a sampling heap profile says it was taken by.
inline const char* sampling_heap_engine_name() noexcept {
  return operator_new_hooks_compiled_in().load(std::memory_order_relaxed) ? "sampling:operator_new"
                                                                           : "sampling:tcmalloc_hooks";
}

#if SPANPROF_HAS_CFI_WALKER

// The frames of a walk from inside record_heap_sample that belong to the code
// that called the allocator. The operator-new hooks skip exactly their own frames
// (record_heap_sample, allocate_and_sample, the operator); tcmalloc's hooks skip
// to the first frame in tcmalloc's hook-calling sections and past the last one
// (what MallocHook_GetCallerStackTrace does, without its lock-taking walker).
inline int allocator_caller_frames(void* const* frames, int depth, HeapHookSource source) noexcept {
  if (source == HeapHookSource::operator_new) return depth > 3 ? 3 : depth;
  const TcmallocApi& api = tcmalloc_api();
  int i = 0;
  while (i < depth && !api.in_hook_caller(frames[i])) ++i;
  if (i == depth) return depth > 2 ? 2 : depth;  // sections unknown: only spanprof's own frames go
  while (i < depth && api.in_hook_caller(frames[i])) ++i;
  return i;
}

#else

// Without the call frame walker: the compiler runtime's unwinder (what C++
// exceptions use) for the operator-new hooks, tcmalloc's for its own hooks.
struct UnwindCapture {
  void** frames;
  int max_depth;
  int skip;
  int depth;
};

inline _Unwind_Reason_Code unwind_capture_step(_Unwind_Context* context, void* argument) noexcept {
  auto* capture = static_cast<UnwindCapture*>(argument);
  // auto: GCC's <unwind.h> returns an _Unwind_Ptr, libunwind's (which
  // libunwind-dev installs in the multiarch include directory, ahead of GCC's,
  // on arm64 Debian) an unsigned long and has no _Unwind_Ptr.
  const auto ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  if (capture->skip > 0) {
    --capture->skip;
    return _URC_NO_REASON;
  }
  capture->frames[capture->depth++] = reinterpret_cast<void*>(ip);
  return capture->depth >= capture->max_depth ? _URC_END_OF_STACK : _URC_NO_REASON;
}

#endif

// The stack of the code that called the allocator, innermost first, into
// `frames` (room for max_depth). Always inlined into record_heap_sample, whose
// frame the walk starts in.
SPANPROF_ALWAYS_INLINE inline int capture_allocation_stack(void** frames, int max_depth,
                                                           HeapHookSource source) noexcept {
#if SPANPROF_HAS_CFI_WALKER
  constexpr int own_frames = 8;  // spanprof's and the allocator's frames, skipped
  void* trace[max_walk_depth + own_frames];
  cfi::Registers regs;
  capture_registers_here(regs);
  const int walked = walk_stack(regs, heap_thread.stack_top, trace, max_depth + own_frames);
  const int skip = allocator_caller_frames(trace, walked, source);
  int depth = walked - skip;
  if (depth > max_depth) depth = max_depth;
  for (int i = 0; i < depth; ++i) frames[i] = trace[skip + i];
  return depth;
#else
  // Both walks may take the loader lock: not while a fork is under way.
  if (!loader_lock_gate().enter()) return 0;
  int depth = 0;
  if (source == HeapHookSource::operator_new) {
    UnwindCapture capture{frames, max_depth, 3, 0};  // record_heap_sample and two more
    _Unwind_Backtrace(&unwind_capture_step, &capture);
    depth = capture.depth;
  } else {
    depth = tcmalloc_api().caller_stack_trace(frames, max_depth, 0);
  }
  loader_lock_gate().leave();
  return depth;
#endif
}

// An operator-new stack leaves out spanprof's frames (this function, the sampled
// allocation path and the replacement operator), a MallocHook stack tcmalloc's.
SPANPROF_NOINLINE inline void record_heap_sample(HeapThreadState& t, const void* pointer, std::size_t size,
                                                 HeapHookSource source = HeapHookSource::malloc_hook) noexcept {
  t.bytes_until_sample = next_sample_gap(t);
  if (t.in_hook) return;  // an allocation made while capturing a stack
  t.in_hook = true;
  const std::size_t need = heap_log_record_words(static_cast<std::size_t>(t.max_depth));
  if (t.log == nullptr || t.capacity - t.used < need) {
    ++t.dropped;
    t.in_hook = false;
    return;
  }
  std::uint64_t* record = t.log + t.used;
  void** frames = reinterpret_cast<void**>(record + heap_log_header_words);
  const int depth = capture_allocation_stack(frames, t.max_depth, source);
  if (depth <= 0) {
    ++t.dropped;
    t.in_hook = false;
    return;
  }
  std::uint64_t entry = 0;
  const std::uint64_t slot = live_allocations().insert(pointer, entry);
  write_heap_log_header(record, size, slot, entry, depth);
  t.used += heap_log_record_words(static_cast<std::size_t>(depth));
  t.in_hook = false;
}

inline void heap_new_hook(const void* pointer, std::size_t size) noexcept {
  HeapThreadState& t = heap_thread;
  if (SPANPROF_LIKELY(t.open == 0)) {
    t.probe_seen |= t.probing;
    return;
  }
  t.bytes_until_sample -= static_cast<std::int64_t>(size);
  if (SPANPROF_LIKELY(t.bytes_until_sample > 0)) return;
  record_heap_sample(t, pointer, size);
}

inline void heap_delete_hook(const void* pointer) noexcept { live_allocations().forget(pointer); }

// Counts the open heap scopes and keeps the hooks installed exactly while there is
// at least one.
class HeapHooks {
 public:
  // False when heap profiling cannot work in this process (reported once).
  bool acquire() noexcept {
    if (SPANPROF_UNLIKELY(unavailable_.load(std::memory_order_relaxed))) return false;
    int open = open_scopes_.load(std::memory_order_relaxed);
    while (open > 0) {
      if (open_scopes_.compare_exchange_weak(open, open + 1, std::memory_order_acq_rel)) return true;
    }
    std::lock_guard<std::mutex> held(mutex_);
    // Installed before the count becomes visible: a scope that finds the count
    // above zero on the fast path can rely on live hooks. Compiled-in operator
    // new/delete hooks are always live and need nothing installed.
    if (!installed_ && !operator_new_hooks_compiled_in().load(std::memory_order_acquire) && !install()) return false;
    open_scopes_.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }

  void release() noexcept {
    int open = open_scopes_.load(std::memory_order_relaxed);
    while (open > 1) {
      if (open_scopes_.compare_exchange_weak(open, open - 1, std::memory_order_acq_rel)) return;
    }
    std::lock_guard<std::mutex> held(mutex_);
    if (open_scopes_.fetch_sub(1, std::memory_order_acq_rel) == 1 && installed_) {
      const TcmallocApi& api = tcmalloc_api();
      api.remove_new_hook(&heap_new_hook);
      api.remove_delete_hook(&heap_delete_hook);
      installed_ = false;
    }
  }

  bool installed() const noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    return installed_;
  }
  int open_scopes() const noexcept { return open_scopes_.load(std::memory_order_relaxed); }

  // In a forked child: only the forking thread's scopes are still open (and will
  // close); the hooks stay until the last of them does.
  void reset_after_fork(int open_here) noexcept {
    new (&mutex_) std::mutex();
    open_scopes_.store(open_here, std::memory_order_relaxed);
  }

 private:
  bool install() noexcept {
    const TcmallocApi& api = tcmalloc_api();
    if (!api.has_hooks()) {
      return refuse(api.add_new_hook == nullptr
                        ? "heap profiling needs tcmalloc (link libtcmalloc or LD_PRELOAD it); heap scopes are "
                          "not profiled"
                        : "tcmalloc is loaded but is not the process's malloc; heap scopes are not profiled");
    }
    if (!api.add_new_hook(&heap_new_hook) || !api.add_delete_hook(&heap_delete_hook)) {
      api.remove_new_hook(&heap_new_hook);
      api.remove_delete_hook(&heap_delete_hook);
      return refuse("tcmalloc refused spanprof's allocation hooks (all hook slots taken?)");
    }
    if (!verified_) {
      // Proves the hooks fire for this thread's allocations before any scope relies
      // on them (a wrapper allocator could bypass tcmalloc's entry points).
      HeapThreadState& t = heap_thread;
      t.probe_seen = false;
      t.probing = true;
      void* (*volatile allocate)(std::size_t) = &std::malloc;
      std::free(allocate(24));
      t.probing = false;
      if (!t.probe_seen) {
        api.remove_new_hook(&heap_new_hook);
        api.remove_delete_hook(&heap_delete_hook);
        return refuse("tcmalloc's allocation hooks do not fire in this process; heap scopes are not profiled");
      }
      verified_ = true;
    }
    installed_ = true;
    return true;
  }

  bool refuse(const char* why) noexcept {
    unavailable_.store(true, std::memory_order_relaxed);
    report_error(ErrorCode::heap_unavailable, why);
    return false;
  }

  std::atomic<int> open_scopes_{0};
  std::atomic<bool> unavailable_{false};
  mutable std::mutex mutex_;
  bool installed_ = false;
  bool verified_ = false;
};

SPANPROF_API inline HeapHooks& heap_hooks() noexcept {
  static HeapHooks hooks;
  return hooks;
}

// The threads whose heap state a guard closing elsewhere may still mark: a thread
// is listed from its first heap span to its exit.
struct HeapThreadRegistry {
  std::mutex mutex;
  std::vector<HeapThreadState*> threads;

  // Held across fork() (Runtime::before_fork): a thread starting or exiting in the
  // parent at that moment holds it, and the child's first thread-local of this kind
  // would wait for it for good. In the child only the forking thread is left.
  void reset_after_fork(const HeapThreadState* mine) noexcept {
    threads.erase(std::remove_if(threads.begin(), threads.end(), [mine](const HeapThreadState* t) { return t != mine; }),
                  threads.end());
    new (&mutex) std::mutex();
  }
};
SPANPROF_API inline HeapThreadRegistry& heap_thread_registry() noexcept {
  // Never destroyed: a thread may exit while the process runs its exit-time destructors.
  static HeapThreadRegistry& registry = *new HeapThreadRegistry;
  return registry;
}

// Frees this thread's heap log at thread exit. Touched only by a thread's first
// heap guard; the hooks read heap_thread, never this.
struct HeapLogOwner {
  HeapLogOwner() noexcept {
    auto& registry = heap_thread_registry();
    std::lock_guard<std::mutex> held(registry.mutex);
    SPANPROF_TRY {
      registry.threads.push_back(&heap_thread);
    } SPANPROF_CATCH_ALL {
      // Not listed: a guard of this thread that ends elsewhere cannot mark it.
    }
  }
  ~HeapLogOwner() {
    {
      auto& registry = heap_thread_registry();
      std::lock_guard<std::mutex> held(registry.mutex);
      auto& threads = registry.threads;
      threads.erase(std::remove(threads.begin(), threads.end(), &heap_thread), threads.end());
    }
    HeapThreadState& t = heap_thread;
    t.open = 0;
    std::uint64_t* log = t.log;
    t.log = nullptr;
    t.capacity = t.used = 0;
    delete[] log;
  }
};
inline thread_local HeapLogOwner heap_log_owner;

struct HeapSettings {
  std::int64_t interval_bytes{};
  int max_depth{};
  std::size_t log_words{};
};

// Heap spans open on this thread now.
inline int heap_spans_open_here() noexcept { return static_cast<int>(heap_thread.open); }

// Stops tracking the samples in the log from `from` on (their allocations are no
// longer any open span's).
inline void untrack_heap_log(const HeapThreadState& t, std::size_t from) noexcept {
  // Through locals: GCC 12's UBSan checks a reference to thread-local state re-read
  // in a loop against a null it made itself (a false "member access within null").
  const std::uint64_t* const log = t.log;
  const std::size_t used = t.used;
  for (std::size_t i = from; i + heap_log_header_words <= used;) {
    const HeapLogRecord record = read_heap_log_record(log + i);
    live_allocations().take(record.slot, record.entry);
    i += heap_log_record_words(record.depth);
  }
}

// Frees the dead spans on top of this thread's stack (ended on another thread, or
// out of order here); the log starts over when none is left open.
inline void reap_dead_heap_spans(HeapThreadState& t) noexcept {
  const std::uint32_t dead = t.dead_depths.load(std::memory_order_acquire);
  if (SPANPROF_LIKELY(dead == 0)) return;
  const std::uint32_t before = t.open;
  std::uint32_t open = before, reaped = 0;
  while (open != 0 && (dead & (std::uint32_t{1} << (open - 1))) != 0) {
    reaped |= std::uint32_t{1} << (open - 1);
    --open;
  }
  if (reaped == 0) return;
  t.dead_depths.fetch_and(~reaped, std::memory_order_acq_rel);  // bits set since stay
  t.open = open;
  if (open == 0) {
    untrack_heap_log(t, 0);
    t.used = 0;
  }
}

// A heap span of another thread ended here: marks it dead there, if that thread
// still runs (it frees the slot itself). Nothing of this thread's state changes.
inline void close_heap_span_elsewhere(const HeapActiveSpan& span) noexcept {
  {
    auto& registry = heap_thread_registry();
    std::lock_guard<std::mutex> held(registry.mutex);
    for (HeapThreadState* thread : registry.threads) {
      if (thread != span.owner) continue;
      thread->dead_depths.fetch_or(std::uint32_t{1} << (span.depth - 1), std::memory_order_acq_rel);
      break;
    }
  }
  heap_hooks().release();
}

// Opens a heap span on this thread. False: not profiled (reported).
inline bool open_heap_span(HeapActiveSpan& span, const HeapSettings& settings) noexcept {
  HeapThreadState& t = heap_thread;
  reap_dead_heap_spans(t);
  if (t.open == max_open_heap_spans) {
    report_error(ErrorCode::sample_buffer_full, "more than 32 heap-profiled spans open on one thread; this one is not");
    return false;
  }
  if (!heap_hooks().acquire()) return false;
  if (t.open == 0) {
    // Outermost span: settings may have changed since this thread's last one.
    if (t.log == nullptr || t.capacity != settings.log_words) {
      (void)&heap_log_owner;  // registers the thread-exit cleanup
      delete[] t.log;
      t.log = new (std::nothrow) std::uint64_t[settings.log_words];
      t.capacity = t.log ? settings.log_words : 0;
      t.used = 0;
      if (!t.log) {
        heap_hooks().release();
        report_error(ErrorCode::internal, "cannot allocate the per-thread heap sample log");
        return false;
      }
    }
    if (t.random == 0) {
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      t.random = (static_cast<std::uint64_t>(now.tv_nsec) * 0x9E3779B97F4A7C15ull) ^
                 reinterpret_cast<std::uintptr_t>(&t) ^ 0x2545F4914F6CDD1Dull;
      if (t.random == 0) t.random = 1;
    }
    if (t.interval != settings.interval_bytes) {
      t.interval = settings.interval_bytes;
      t.bytes_until_sample = next_sample_gap(t);
    }
    t.max_depth = settings.max_depth;
#if SPANPROF_HAS_CFI_WALKER
    if (t.stack_top == 0) t.stack_top = this_thread_stack_top();
#endif
  }
  span.owner = &t;
  span.depth = t.open + 1;
  span.log_start = t.used;
  span.dropped_at_start = t.dropped;
  t.open = span.depth;
  count(Counter::heap_guards_opened);
  return true;
}

// What a closed heap span recorded: [size, live at close, depth, pcs...] records.
struct HeapSpanResult {
  std::vector<std::uint64_t> records;
  std::uint64_t dropped = 0;
  std::int64_t interval_bytes = 0;
};

// Closes the span and, if `keep`, copies its records out. Liveness is decided now,
// at the span's end; the outermost span also stops tracking every sample of the log.
// False, with nothing copied, when the span is not the innermost open one of this
// thread: it ended on another thread, or after a span opened after it here.
inline bool close_heap_span(HeapActiveSpan& span, HeapSpanResult& result, bool keep = true) noexcept {
  HeapThreadState& t = heap_thread;
  if (SPANPROF_UNLIKELY(span.owner != &t)) {
    close_heap_span_elsewhere(span);
    return false;
  }
  if (SPANPROF_UNLIKELY(span.depth != t.open)) {
    t.dead_depths.fetch_or(std::uint32_t{1} << (span.depth - 1), std::memory_order_acq_rel);
    heap_hooks().release();
    return false;
  }
  const std::uint32_t open = t.open;
  t.open = 0;  // the SDK's own allocations below belong to no span
  const bool outermost = span.depth == 1;
  result.dropped = t.dropped - span.dropped_at_start;
  result.interval_bytes = t.interval;
  // Nothing is appended while the loop runs (no span is active), so the log is read
  // through locals.
  const std::uint64_t* const log = t.log;
  const std::size_t used = t.used;
  std::size_t i = span.log_start;
  std::size_t samples = 0;
  bool copy = keep;
  bool out_of_memory = false;
  while (i + heap_log_header_words <= used) {
    const HeapLogRecord record = read_heap_log_record(log + i);
    const bool live = outermost ? live_allocations().take(record.slot, record.entry)
                                : live_allocations().is_live(record.slot, record.entry);
    if (copy) {
      SPANPROF_TRY {
        append_heap_handoff_record(result.records, record, live);
      } SPANPROF_CATCH_ALL {
        copy = false;  // keep walking: the outermost span must still untrack every sample
        out_of_memory = true;
        result.records.clear();
      }
    }
    ++samples;
    i += heap_log_record_words(record.depth);
  }
  if (outermost) {
    // Counted once, by the outermost span: a nested span's records are also its parent's.
    t.used = 0;
    count(Counter::heap_samples_captured, samples);
    count(Counter::heap_samples_dropped, result.dropped);
  }
  t.open = open - 1;
  reap_dead_heap_spans(t);
  heap_hooks().release();
  if (out_of_memory) report_error(ErrorCode::internal, "out of memory copying a heap profile; dropped");
  return true;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_HEAP_SAMPLER_HPP_
