// The sampling engine's per-thread half: a CPU-time source that signals only its
// own thread, a signal handler that records the stack of the thread's active span
// on a CPU tick or a wall tick (from the wall ticker, wall_ticker.hpp), and the
// per-thread sample log the guard reads back.
//
// Why it is shaped like this (see docs/engines.md, docs/wall.md):
//  * A sampler is armed once per thread and left running; a guard only publishes
//    its span in a thread-local pointer. Opening a guard then costs nanoseconds, and
//    sampling continues across spans, so short spans are sampled without bias.
//  * The CPU periods are drawn at random (exponential around the mean), so a
//    periodic workload cannot alias with the sampling and shift samples into or out
//    of its spans.
//  * The signal is a real-time signal, not SIGPROF: SIGPROF belongs to gperftools,
//    whose profiler stops gathering samples when someone else handles it.
//  * The handler is async-signal-safe: it touches only this thread's preallocated
//    log, lock-free atomics and a stack walker that takes no lock
//    (detail/capture/stack_walker.hpp). No malloc, lock or stdio.
//  * Wall samples are weighted by the wall time since the thread's previous one,
//    measured on the thread itself, so a lost or dropped tick loses detail, never
//    time; the ticker only decides when to look, and confirms without a signal that
//    a blocked thread is still where its last sample found it.
//
// The engine, one job a header, lowest first:
//  * detail/capture/cpu_tick_source.hpp: the thread's CPU ticks (POSIX CPU timer or
//    perf_event) and their random periods;
//  * detail/capture/thread_status.hpp: what the ticker and the watchdog read about a
//    thread without signalling it (/proc/self/task, its CPU clock);
//  * detail/capture/thread_stack_sampler.hpp: a thread's sampler and its log;
//  * detail/capture/signal_side.hpp: its signal handler and the span edges' ticks;
//  * detail/capture/stack_sampler_list.hpp: the samplers of all threads, and each
//    thread's owner of its own;
//  * detail/capture/sample_signal.hpp: the sample signal's handler, and the watchdog;
//  * here: the guard's slow path that makes a thread's sampler. This is the header
//    to include: it brings the others.
#ifndef SPANPROF_DETAIL_CAPTURE_STACK_SAMPLER_HPP_
#define SPANPROF_DETAIL_CAPTURE_STACK_SAMPLER_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/capture/cpu_tick_source.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/detail/capture/sample_signal.hpp>
#include <spanprof/detail/capture/stack_sampler_list.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>
#include <spanprof/detail/capture/thread_status.hpp>

// Compiled out with the SDK: nothing of the engine may reach gperftools then.
#if SPANPROF_ENABLED

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include <pthread.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Slow path of a guard: the thread has no sampler for the current settings yet.
// Runs once per thread (and again after spanprof::start() changes the settings).
// The settings generation under which this thread was refused a sampler, so its
// later guards return at once instead of asking the kernel and reporting again.
inline thread_local std::uint64_t stack_sampler_refused_generation = 0;

inline ThreadStackSampler* make_stack_sampler(const StackSamplerSettings& settings) noexcept {
  if (stack_sampler_refused_generation == settings.generation) return nullptr;
  // A thread that blocks the sample signal would queue real-time signals until the
  // kernel falls back to SIGIO, whose default action kills the process: such a
  // thread is not sampled at all (until spanprof::start() is called again).
  sigset_t blocked;
  if (::pthread_sigmask(SIG_BLOCK, nullptr, &blocked) == 0 && sigismember(&blocked, settings.signal_number) == 1) {
    stack_sampler_refused_generation = settings.generation;
    char message[128];
    std::snprintf(message, sizeof message, "signal %d is blocked on this thread; its spans are not profiled",
                  settings.signal_number);
    report_error(ErrorCode::sampler_failed, message);
    return nullptr;
  }
  auto* words = new (std::nothrow) std::uint64_t[settings.buffer_words];
  if (!words) {
    report_error(ErrorCode::sampler_failed, "cannot allocate the per-thread sample buffer");
    return nullptr;
  }
  // Registered before the sampler's owner exists, so the counters outlive the
  // sampler at thread exit (thread_local destructors run in reverse order).
  ThreadCounters& counters = this_thread_counters();
  auto* sampler = new (std::nothrow) ThreadStackSampler(settings, words, counters);
  if (!sampler) {
    delete[] words;
    report_error(ErrorCode::sampler_failed, "cannot allocate the per-thread sampler");
    return nullptr;
  }
  int perf_errno = 0;
  sampler->open_source(perf_errno);
  const int timer_errno = errno;
  if (!sampler->has_source()) {
    char message[160];
    std::snprintf(message, sizeof message, "cannot create a CPU timer for this thread: %s", error_text(timer_errno));
    report_error(ErrorCode::sampler_failed, message);
  } else if (perf_errno != 0) {
    report_perf_event_refused(perf_errno, "sampling with POSIX CPU timers instead");
  }
  stack_sampler_owner.replace(sampler);
  return sampler;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_STACK_SAMPLER_HPP_
