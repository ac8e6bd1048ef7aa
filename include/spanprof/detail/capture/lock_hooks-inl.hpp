// Internal. The lock hooks: spanprof's own pthread_mutex_lock, _timedlock,
// _clocklock and _unlock, pthread_rwlock_wrlock, _timedwrlock, _clockwrlock and
// _unlock, which every std::mutex, std::timed_mutex, std::recursive_mutex and
// std::shared_mutex / std::shared_timed_mutex writer of the program and its
// libraries (dlopen'ed ones too) calls; each forwards to glibc's.
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
//    every lock. The timed ones have no second name, and are found with dlsym as
//    the program starts.
//  * The lock's memory is read only while the caller holds or waits for it.
//  * The hooks' frames are in a section of their own, so that the stacks they
//    record start at the call into the lock, whatever was inlined.
#ifndef SPANPROF_DETAIL_CAPTURE_LOCK_HOOKS_INL_HPP_
#define SPANPROF_DETAIL_CAPTURE_LOCK_HOOKS_INL_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/base/thread_name.hpp>
#include <spanprof/detail/capture/call_frame_info.hpp>
#include <spanprof/detail/capture/lock_log.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/process_sampler.hpp>
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

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
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
// A ThreadSanitizer's annotations of a lock, and its hooks of glibc's clock locks
// where it has them (GCC 12's has none: a lock taken there is unknown to it, and
// the unlock after is reported as an unlock of an unlocked mutex).
void __tsan_mutex_pre_lock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion) __attribute__((weak));
int __interceptor_pthread_mutex_clocklock(pthread_mutex_t* mutex, clockid_t clock, const timespec* deadline)
    __attribute__((weak));
int __interceptor_pthread_rwlock_clockwrlock(pthread_rwlock_t* rwlock, clockid_t clock, const timespec* deadline)
    __attribute__((weak));
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

// glibc's timed locks, which glibc keeps under no second name: a versioned reference
// to pthread_mutex_timedlock@GLIBC_2.2.5 finds the program's own, unversioned
// definition first. They are found with dlsym(RTLD_NEXT) (glibc's, or a
// sanitizer's hook of the call), as the program starts, or at the first call should
// one come earlier.
template <class Function>
class NextDefinition {
 public:
  explicit constexpr NextDefinition(const char* name) noexcept : name_(name) {}
  Function get() noexcept {
    Function found = function_.load(std::memory_order_acquire);
    if (SPANPROF_UNLIKELY(found == nullptr)) {
      found = reinterpret_cast<Function>(::dlsym(RTLD_NEXT, name_));
      function_.store(found, std::memory_order_release);
    }
    return found;
  }

 private:
  const char* name_;
  std::atomic<Function> function_{nullptr};
};
inline NextDefinition<int (*)(pthread_mutex_t*, const timespec*)> next_mutex_timedlock{"pthread_mutex_timedlock"};
inline NextDefinition<int (*)(pthread_mutex_t*, clockid_t, const timespec*)> next_mutex_clocklock{
    "pthread_mutex_clocklock"};
inline NextDefinition<int (*)(pthread_rwlock_t*, const timespec*)> next_rwlock_timedwrlock{
    "pthread_rwlock_timedwrlock"};
inline NextDefinition<int (*)(pthread_rwlock_t*, clockid_t, const timespec*)> next_rwlock_clockwrlock{
    "pthread_rwlock_clockwrlock"};

__attribute__((constructor)) inline void find_glibc_timed_locks() noexcept {
  (void)next_mutex_timedlock.get();
  (void)next_mutex_clocklock.get();
  (void)next_rwlock_timedwrlock.get();
  (void)next_rwlock_clockwrlock.get();
}

// A clock lock taken past a ThreadSanitizer that does not hook it (`hooked`: its
// own hook of the call, when it has one), told to it as the timed lock it is (a
// try that may fail).
template <class Lock, class Take>
int tell_thread_sanitizer(Lock* primitive, const void* hooked, Take take) noexcept {
  if (&__tsan_mutex_pre_lock == nullptr || hooked != nullptr) return take();
  constexpr unsigned try_lock = 1u << 4, try_lock_failed = 1u << 5;  // sanitizer/tsan_interface.h
  __tsan_mutex_pre_lock(primitive, try_lock);
  const int result = take();
  __tsan_mutex_post_lock(primitive, result == 0 ? try_lock : try_lock | try_lock_failed, 0);
  return result;
}

inline int glibc_mutex_timedlock(pthread_mutex_t* mutex, const timespec* deadline) noexcept {
  const auto next = next_mutex_timedlock.get();
  return next != nullptr ? next(mutex, deadline) : EINVAL;
}
inline int glibc_mutex_clocklock(pthread_mutex_t* mutex, clockid_t clock, const timespec* deadline) noexcept {
  const auto next = next_mutex_clocklock.get();
  const void* hooked = reinterpret_cast<const void*>(&__interceptor_pthread_mutex_clocklock);
  return next != nullptr ? tell_thread_sanitizer(mutex, hooked, [&] { return next(mutex, clock, deadline); }) : EINVAL;
}
inline int glibc_rwlock_timedwrlock(pthread_rwlock_t* rwlock, const timespec* deadline) noexcept {
  const auto next = next_rwlock_timedwrlock.get();
  return next != nullptr ? next(rwlock, deadline) : EINVAL;
}
inline int glibc_rwlock_clockwrlock(pthread_rwlock_t* rwlock, clockid_t clock, const timespec* deadline) noexcept {
  const auto next = next_rwlock_clockwrlock.get();
  const void* hooked = reinterpret_cast<const void*>(&__interceptor_pthread_rwlock_clockwrlock);
  return next != nullptr ? tell_thread_sanitizer(rwlock, hooked, [&] { return next(rwlock, clock, deadline); })
                         : EINVAL;
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

// The thread glibc says holds it: a mutex's owner, a writer holding a rwlock
// (readers are only counted); 0 when none is recorded there.
inline std::uint32_t lock_owner(const pthread_mutex_t* mutex) noexcept {
  return static_cast<std::uint32_t>(mutex->__data.__owner);
}
inline std::uint32_t lock_owner(const pthread_rwlock_t* rwlock) noexcept {
  return static_cast<std::uint32_t>(rwlock->__data.__cur_writer);
}

// Whether this lock call is a wait to watch: the thread is in a span that records
// lock waits (or the continuous profile records every thread's), and the lock is
// held. The lock word is read only then: read before glibc's atomic on it, it
// costs an uncontended lock about 2 ns more.
template <class Lock>
inline bool lock_wait_watched(const Lock* primitive) noexcept {
  if (!lock_hooks_on.load(std::memory_order_relaxed)) return false;
  if (!lock_hooks_on.every_thread.load(std::memory_order_relaxed)) {
    const ThreadStackSampler* sampler = current_stack_sampler;
    if (sampler == nullptr || !sampler->lock_span_open()) return false;
  } else if (on_spanprof_thread) {
    return false;  // spanprof's own waits are not the program's
  }
  return lock_held(primitive);
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

// The stack of the code that called the lock or unlock, for a record in this
// thread's lock log: -1 when no span on the thread records lock waits (or the
// hooks record one already, and this lock is theirs).
SPANPROF_LOCK_HOOK int lock_record_stack(const ThreadStackSampler* sampler, void** frames) noexcept {
  ThreadLockLog& log = thread_lock_log;
  if (sampler == nullptr || log.words == nullptr || log.recording || sampler->innermost_lock_span() == nullptr)
    return -1;
  log.recording = true;
  const int depth = capture_lock_caller_stack(frames, sampler->settings().max_depth, log.stack_top);
  log.recording = false;
  return depth;
}

// The stack of the code that called the lock or unlock, for the continuous
// profile's record of it: -1 when the hooks record one already (this lock is theirs).
SPANPROF_LOCK_HOOK int process_lock_stack(void** frames) noexcept {
  ThreadLockLog& log = thread_lock_log;
  if (log.recording) return -1;
  log.recording = true;
  if (log.stack_top == 0) log.stack_top = this_thread_stack_top();  // once per thread
  const int depth = capture_lock_caller_stack(frames, ProcessSampler::instance().max_depth(), log.stack_top);
  log.recording = false;
  return depth;
}

// Records `wait` for the continuous profile, with its stack (captured here when
// `depth` is -1), while it records every thread's lock waits.
SPANPROF_LOCK_HOOK void record_process_lock_wait(const LockWait& wait, void** frames, int depth) noexcept {
  if (!lock_hooks_on.every_thread.load(std::memory_order_relaxed)) return;
  if (depth < 0) depth = process_lock_stack(frames);
  if (depth > 0) ProcessSampler::instance().record_lock_wait(lock_thread_id(), wait, frames, static_cast<std::size_t>(depth));
}

// Records `wait` in the thread's lock log with the stack lock_record_stack gave.
SPANPROF_LOCK_HOOK void record_lock_wait(ThreadStackSampler* sampler, const LockWait& wait, void* const* frames,
                                         int depth) noexcept {
  if (depth >= 0) append_lock_record(wait, frames, static_cast<std::size_t>(depth), sampler->counters());
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

// `acquired` false: a timed wait gave up. Its holder is the one glibc named as it
// began: a release since let another waiter in, not this one.
SPANPROF_LOCK_HOOK void end_lock_wait(const LockWaitUnderWay& wait, bool acquired) noexcept {
  const std::int64_t end = monotonic_now_ns();
  LockHolder holder;
  const bool let_in =
      lock_wait_table.finish_wait(wait.address, wait.registration, wait.start_ns, holder) && acquired;
  ThreadStackSampler* sampler = current_stack_sampler;
  if (!wait.registration.tracked && sampler != nullptr) sampler->counters().add(Counter::lock_waits_untracked, 1);
  LockWait record;
  record.contentions = 1;
  record.delay_ns = end > wait.start_ns ? static_cast<std::uint64_t>(end - wait.start_ns) : 0;
  record.holder_tid = let_in ? holder.tid : wait.owner_tid;
  RecordedSpan holder_span{holder.span.trace_id, holder.span.span_id, holder.span.name, holder.span.name_bytes};
  if (let_in && holder.in_span) {
    record.holder_span = &holder_span;
    record.holder_frames = holder.frames;
    record.holder_depth = holder.depth;
  }
  void* frames[max_stack_depth_limit];
  const int depth = lock_record_stack(sampler, frames);
  record_lock_wait(sampler, record, frames, depth);
  record_process_lock_wait(record, frames, depth);
}

static_assert(LockHolder::max_frames <= lock_record_most_holder_frames, "a lock record holds the holder's frames");

// The calling thread releases `lock`: its waiters learn who released it and
// where, and the releaser's span is charged what they waited under it.
SPANPROF_LOCK_HOOK void note_lock_release(const void* address) noexcept {
  LockHolder me;
  me.tid = lock_thread_id();
  ThreadStackSampler* sampler = current_stack_sampler;
  const ActiveSpan* span = sampler != nullptr ? sampler->innermost_lock_span() : nullptr;
  void* frames[max_stack_depth_limit];
  int depth = -1;
  if (span != nullptr) {
    me.in_span = true;
    me.span = span->lock_identity;
    // Walked before the release, so that the waiter it lets in learns where.
    if (lock_wait_table.waited_for(address)) depth = lock_record_stack(sampler, frames);
    for (int i = 0; i < depth && i < static_cast<int>(LockHolder::max_frames); ++i, ++me.depth)
      me.frames[i] = reinterpret_cast<std::uintptr_t>(frames[i]);
  }
  const LockWaitTable::Charge charge = lock_wait_table.release(address, monotonic_now_ns(), me);
  if (charge.waiters == 0) return;
  LockWait record;
  record.held = true;
  record.contentions = charge.waiters;
  record.delay_ns = static_cast<std::uint64_t>(charge.delay_ns);
  if (span != nullptr) {
    if (depth < 0) depth = lock_record_stack(sampler, frames);
    record_lock_wait(sampler, record, frames, depth);
  }
  record_process_lock_wait(record, frames, depth);
}

// A lock call found to wait, watched: `take` is glibc's lock call (or its hook's).
// Inlined into each hook: a template's code would be placed outside the hooks'
// section, and its frame would head every recorded stack.
template <class Lock, class Take>
__attribute__((always_inline)) inline int watch_lock_wait(Lock* primitive, Take take) noexcept {
  const LockWaitUnderWay wait = begin_lock_wait(primitive, lock_owner(primitive));
  const int result = take();
  end_lock_wait(wait, result == 0);
  return result;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

extern "C" {

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_mutex_lock(pthread_mutex_t* mutex) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(mutex))) return sd::glibc_mutex_lock(mutex);
  return sd::watch_lock_wait(mutex, [mutex] { return sd::glibc_mutex_lock(mutex); });
}

// std::timed_mutex::try_lock_for and try_lock_until: a wait until a deadline.
SPANPROF_API SPANPROF_LOCK_HOOK int pthread_mutex_timedlock(pthread_mutex_t* mutex, const timespec* deadline) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(mutex))) return sd::glibc_mutex_timedlock(mutex, deadline);
  return sd::watch_lock_wait(mutex, [&] { return sd::glibc_mutex_timedlock(mutex, deadline); });
}

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_mutex_clocklock(pthread_mutex_t* mutex, clockid_t clock,
                                                            const timespec* deadline) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(mutex))) return sd::glibc_mutex_clocklock(mutex, clock, deadline);
  return sd::watch_lock_wait(mutex, [&] { return sd::glibc_mutex_clocklock(mutex, clock, deadline); });
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
  return sd::watch_lock_wait(rwlock, [rwlock] { return sd::glibc_rwlock_wrlock(rwlock); });
}

// std::shared_timed_mutex::try_lock_for and try_lock_until.
SPANPROF_API SPANPROF_LOCK_HOOK int pthread_rwlock_timedwrlock(pthread_rwlock_t* rwlock, const timespec* deadline) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(rwlock))) return sd::glibc_rwlock_timedwrlock(rwlock, deadline);
  return sd::watch_lock_wait(rwlock, [&] { return sd::glibc_rwlock_timedwrlock(rwlock, deadline); });
}

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_rwlock_clockwrlock(pthread_rwlock_t* rwlock, clockid_t clock,
                                                               const timespec* deadline) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_watched(rwlock))) return sd::glibc_rwlock_clockwrlock(rwlock, clock, deadline);
  return sd::watch_lock_wait(rwlock, [&] { return sd::glibc_rwlock_clockwrlock(rwlock, clock, deadline); });
}

SPANPROF_API SPANPROF_LOCK_HOOK int pthread_rwlock_unlock(pthread_rwlock_t* rwlock) noexcept {
  namespace sd = spanprof::detail;
  if (SPANPROF_LIKELY(!sd::lock_wait_table.anyone_waiting())) return sd::glibc_rwlock_unlock(rwlock);
  // A writer's release; a reader's lets a writer in only as the last one out, and
  // readers are not known.
  if (sd::lock_owner(rwlock) == sd::lock_thread_id()) sd::note_lock_release(rwlock);
  return sd::glibc_rwlock_unlock(rwlock);
}

}  // extern "C"

#endif  // SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME && SPANPROF_LOCK_HOOKS

#endif  // SPANPROF_DETAIL_CAPTURE_LOCK_HOOKS_INL_HPP_
