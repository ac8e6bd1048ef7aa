// Internal. The lock hooks: spanprof's own pthread_mutex_lock, pthread_mutex_unlock,
// pthread_rwlock_wrlock and pthread_rwlock_unlock, which every std::mutex,
// std::timed_mutex, std::recursive_mutex and std::shared_mutex writer of the
// program and its libraries (dlopen'ed ones too) calls; each forwards to glibc's.
// Compiled once per program with the runtime (config.hpp), so that the program's
// definition is the one the dynamic linker binds every call to.
//
// Why it is shaped like this (docs/locks.md):
//  * An uncontended lock never waits: until a span asks for lock profiles, a lock
//    costs one load more; after, outside lock-profiled spans, a look at the
//    thread's open span too; inside one, a look at the lock word, and only a lock
//    found held goes the long way. An unlock looks further only while some
//    watched thread waits.
//  * A waiter measures its own wait around glibc's lock, and learns who held the
//    lock from the releaser that let it in (lock_waits.hpp); a releaser is charged
//    the waits it ended. Each records into its own thread's lock log
//    (lock_log.hpp), with its stack, when a span that records lock waits is open
//    on its thread.
//  * glibc's functions are reached by their versioned names, bound at link time:
//    dlsym could allocate, and take a lock these hooks are asked for. Under a
//    sanitizer, its own hook of the call is called instead, so that it still sees
//    every lock.
//  * The lock's memory is read only while the caller holds or waits for it.
//  * The hooks' frames are in a section of their own, so that the stacks they
//    record start at the call into the lock, whatever was inlined.
#ifndef SPANPROF_DETAIL_CAPTURE_LOCK_HOOKS_INL_HPP_
#define SPANPROF_DETAIL_CAPTURE_LOCK_HOOKS_INL_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/capture/call_frame_info.hpp>
#include <spanprof/detail/capture/lock_log.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>

#if !defined(SPANPROF_LOCK_HOOKS)
#if SPANPROF_HAS_CFI_WALKER
#define SPANPROF_LOCK_HOOKS 1
#else
#define SPANPROF_LOCK_HOOKS 0
#endif
#endif

#if SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME && SPANPROF_LOCK_HOOKS

#include <atomic>
#include <cerrno>
#include <cstdint>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPANPROF_LOCK_HOOK __attribute__((section("spanprof_lock_hooks"), noinline))

extern "C" {
// glibc's lock and unlock, by the names its compatibility versions keep.
int spanprof_glibc_mutex_lock(pthread_mutex_t* mutex);
int spanprof_glibc_mutex_unlock(pthread_mutex_t* mutex);
int spanprof_glibc_rwlock_wrlock(pthread_rwlock_t* rwlock);
int spanprof_glibc_rwlock_unlock(pthread_rwlock_t* rwlock);
#if defined(__x86_64__)
__asm__(".symver spanprof_glibc_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");
__asm__(".symver spanprof_glibc_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.2.5");
__asm__(".symver spanprof_glibc_rwlock_wrlock, __pthread_rwlock_wrlock@GLIBC_2.2.5");
__asm__(".symver spanprof_glibc_rwlock_unlock, __pthread_rwlock_unlock@GLIBC_2.2.5");
#else
__asm__(".symver spanprof_glibc_mutex_lock, __pthread_mutex_lock@GLIBC_2.17");
__asm__(".symver spanprof_glibc_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.17");
__asm__(".symver spanprof_glibc_rwlock_wrlock, __pthread_rwlock_wrlock@GLIBC_2.17");
__asm__(".symver spanprof_glibc_rwlock_unlock, __pthread_rwlock_unlock@GLIBC_2.17");
#endif
// A sanitizer's hooks of the same calls, when the program runs under one.
int __interceptor_pthread_mutex_lock(pthread_mutex_t* mutex) __attribute__((weak));
int __interceptor_pthread_mutex_unlock(pthread_mutex_t* mutex) __attribute__((weak));
int __interceptor_pthread_rwlock_wrlock(pthread_rwlock_t* rwlock) __attribute__((weak));
int __interceptor_pthread_rwlock_unlock(pthread_rwlock_t* rwlock) __attribute__((weak));
// The hooks' code, which recorded stacks leave out.
extern const char __start_spanprof_lock_hooks[] __attribute__((weak));
extern const char __stop_spanprof_lock_hooks[] __attribute__((weak));
}

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline int glibc_mutex_lock(pthread_mutex_t* mutex) noexcept {
  return &__interceptor_pthread_mutex_lock != nullptr ? __interceptor_pthread_mutex_lock(mutex)
                                                       : spanprof_glibc_mutex_lock(mutex);
}
inline int glibc_mutex_unlock(pthread_mutex_t* mutex) noexcept {
  return &__interceptor_pthread_mutex_unlock != nullptr ? __interceptor_pthread_mutex_unlock(mutex)
                                                         : spanprof_glibc_mutex_unlock(mutex);
}
inline int glibc_rwlock_wrlock(pthread_rwlock_t* rwlock) noexcept {
  return &__interceptor_pthread_rwlock_wrlock != nullptr ? __interceptor_pthread_rwlock_wrlock(rwlock)
                                                          : spanprof_glibc_rwlock_wrlock(rwlock);
}
inline int glibc_rwlock_unlock(pthread_rwlock_t* rwlock) noexcept {
  return &__interceptor_pthread_rwlock_unlock != nullptr ? __interceptor_pthread_rwlock_unlock(rwlock)
                                                          : spanprof_glibc_rwlock_unlock(rwlock);
}

// Whether a lock is held as the caller comes to it, read without taking it: a
// lock another thread takes a moment later is then waited for unseen, a wait
// that began within nanoseconds of a release.
inline bool lock_held(const pthread_mutex_t* mutex) noexcept {
  return __atomic_load_n(&mutex->__data.__lock, __ATOMIC_RELAXED) != 0;
}
inline bool lock_held(const pthread_rwlock_t* rwlock) noexcept {
  // glibc's readers word: the readers from bit 3 up, bit 1 set while a writer holds it.
  const unsigned readers = __atomic_load_n(&rwlock->__data.__readers, __ATOMIC_RELAXED);
  return (readers & 2u) != 0 || (readers >> 3) != 0;
}

// Whether this lock call is a wait to watch: the thread is in a span that records
// lock waits, and the lock is held. The lock word is read only then: read before
// glibc's atomic on it, it costs an uncontended lock about 2 ns more.
template <class Lock>
inline bool lock_wait_watched(const Lock* primitive) noexcept {
  if (!lock_hooks_on.load(std::memory_order_relaxed)) return false;
  const ThreadStackSampler* sampler = current_stack_sampler;
  return sampler != nullptr && sampler->lock_span_open() && lock_held(primitive);
}

// The calling thread's id, read once.
inline std::uint32_t lock_thread_id() noexcept {
  ThreadLockLog& log = thread_lock_log;
  if (log.tid == 0) log.tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return log.tid;
}

// The stack of the code that called the lock or unlock, innermost first: the
// hooks' own frames are left out. Return addresses only.
SPANPROF_LOCK_HOOK int capture_lock_caller_stack(void** frames, int max_depth, std::uint64_t stack_top) noexcept {
  constexpr int own_frames = 6;
  void* trace[max_stack_depth_limit + own_frames];
  cfi::Registers regs;
  capture_registers_here(regs);
  const int walked = walk_stack(regs, stack_top, trace, max_depth + own_frames);
  const auto start = reinterpret_cast<std::uintptr_t>(__start_spanprof_lock_hooks);
  const auto stop = reinterpret_cast<std::uintptr_t>(__stop_spanprof_lock_hooks);
  int skip = 0;
  // Frame 0 is this function's own instruction; the others return addresses, whose
  // call instruction is the byte before.
  while (skip < walked) {
    const auto pc = reinterpret_cast<std::uintptr_t>(trace[skip]) - (skip == 0 ? 0 : 1);
    if (start == 0 || pc < start || pc >= stop) break;
    ++skip;
  }
  int depth = walked - skip;
  if (depth > max_depth) depth = max_depth;
  for (int i = 0; i < depth; ++i) frames[i] = trace[skip + i];
  return depth;
}

// Records `wait` in the thread's lock log, with the caller's stack, when a span
// that records lock waits is open on this thread.
SPANPROF_LOCK_HOOK void record_lock_wait(const LockWait& wait) noexcept {
  ThreadStackSampler* sampler = current_stack_sampler;
  ThreadLockLog& log = thread_lock_log;
  if (sampler == nullptr || log.words == nullptr || log.recording || sampler->innermost_lock_span() == nullptr) return;
  log.recording = true;
  void* frames[max_stack_depth_limit];
  const int depth = capture_lock_caller_stack(frames, sampler->settings().max_depth, log.stack_top);
  const std::size_t need = lock_record_words(wait.holder_span, static_cast<std::size_t>(depth));
  if (depth <= 0 || log.used + need > ThreadLockLog::capacity_words) {
    sampler->counters().add(Counter::lock_waits_dropped, 1);
  } else {
    write_lock_record(log.words + log.used, wait, frames, static_cast<std::size_t>(depth));
    log.used += need;
    sampler->counters().add(Counter::lock_waits_recorded, 1);
  }
  log.recording = false;
}

// A wait under way: from the moment the lock was found held to its acquisition.
struct LockWaitUnderWay {
  const void* address;
  std::uint32_t owner_tid;  // who glibc said held it then (0: not recorded there)
  std::int64_t start_ns;
  LockWaitTable::Registration registration;
};

SPANPROF_LOCK_HOOK LockWaitUnderWay begin_lock_wait(const void* address, std::uint32_t owner_tid) noexcept {
  const std::int64_t start = monotonic_now_ns();
  return {address, owner_tid, start, lock_wait_table.register_wait(address, start)};
}

SPANPROF_LOCK_HOOK void end_lock_wait(const LockWaitUnderWay& wait) noexcept {
  const std::int64_t end = monotonic_now_ns();
  LockHolder holder;
  const bool let_in = lock_wait_table.finish_wait(wait.address, wait.registration, wait.start_ns, holder);
  if (!wait.registration.tracked) {
    if (ThreadStackSampler* sampler = current_stack_sampler) sampler->counters().add(Counter::lock_waits_untracked, 1);
  }
  LockWait record;
  record.contentions = 1;
  record.delay_ns = end > wait.start_ns ? static_cast<std::uint64_t>(end - wait.start_ns) : 0;
  record.holder_tid = let_in ? holder.tid : wait.owner_tid;
  RecordedSpan holder_span{holder.span.trace_id, holder.span.span_id, holder.span.name, holder.span.name_bytes};
  if (let_in && holder.in_span) record.holder_span = &holder_span;
  record_lock_wait(record);
}

// The calling thread releases `lock`: its waiters learn who released it, and the
// releaser's span is charged what they waited under it.
SPANPROF_LOCK_HOOK void note_lock_release(const void* address) noexcept {
  LockHolder me;
  me.tid = lock_thread_id();
  const ActiveSpan* span = nullptr;
  if (ThreadStackSampler* sampler = current_stack_sampler) span = sampler->innermost_lock_span();
  if (span != nullptr) {
    me.in_span = true;
    me.span = span->lock_identity;
  }
  const LockWaitTable::Charge charge = lock_wait_table.release(address, monotonic_now_ns(), me);
  if (charge.waiters == 0 || span == nullptr) return;
  LockWait record;
  record.held = true;
  record.contentions = charge.waiters;
  record.delay_ns = static_cast<std::uint64_t>(charge.delay_ns);
  record_lock_wait(record);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

extern "C" {

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_mutex_lock(pthread_mutex_t* mutex) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(mutex))) return sd::glibc_mutex_lock(mutex);
  const sd::LockWaitUnderWay wait = sd::begin_lock_wait(mutex, static_cast<std::uint32_t>(mutex->__data.__owner));
  const int result = sd::glibc_mutex_lock(mutex);
  sd::end_lock_wait(wait);
  return result;
}

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_mutex_unlock(pthread_mutex_t* mutex) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_table.anyone_waiting())) return sd::glibc_mutex_unlock(mutex);
  // A recursive mutex's inner unlock releases nothing.
  if ((mutex->__data.__kind & 3) != PTHREAD_MUTEX_RECURSIVE_NP || mutex->__data.__count <= 1)
    sd::note_lock_release(mutex);
  return sd::glibc_mutex_unlock(mutex);
}

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_rwlock_wrlock(pthread_rwlock_t* rwlock) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(rwlock))) return sd::glibc_rwlock_wrlock(rwlock);
  // The writer holding it, if one does (readers are only counted).
  const sd::LockWaitUnderWay wait = sd::begin_lock_wait(rwlock, static_cast<std::uint32_t>(rwlock->__data.__cur_writer));
  const int result = sd::glibc_rwlock_wrlock(rwlock);
  sd::end_lock_wait(wait);
  return result;
}

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_rwlock_unlock(pthread_rwlock_t* rwlock) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_table.anyone_waiting())) return sd::glibc_rwlock_unlock(rwlock);
  // A writer's release; a reader's lets a writer in only as the last one out, and
  // readers are not known.
  if (static_cast<std::uint32_t>(rwlock->__data.__cur_writer) == sd::lock_thread_id()) sd::note_lock_release(rwlock);
  return sd::glibc_rwlock_unlock(rwlock);
}

}  // extern "C"

#endif  // SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME && SPANPROF_LOCK_HOOKS

#endif  // SPANPROF_DETAIL_CAPTURE_LOCK_HOOKS_INL_HPP_
