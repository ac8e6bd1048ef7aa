// spanprof's stack walk against the compiler runtime's unwinder (libgcc's
// _Unwind_Backtrace): a CPU timer interrupts a workload of library code (sort,
// to_string, sin) a thousand times a CPU-second, and in the handler both walk the
// interrupted stack. Used by tests/test_stack_walk.cpp and, on an arm64 kernel, by
// tests/arm64/walker.cpp. The program links libgcc's unwinder before any other
// (on arm64 Debian, <unwind.h> is libunwind's, which declares the same calls).
#pragma once

#include <spanprof/detail/capture/call_frame_info.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#if SPANPROF_HAS_CFI_WALKER

namespace spanprof_test {
namespace walk_oracle {

struct UnwindTrace {
  void* frames[80];
  int depth = 0;
};

inline _Unwind_Reason_Code collect_frame(_Unwind_Context* context, void* argument) {
  auto* trace = static_cast<UnwindTrace*>(argument);
  if (trace->depth == 80) return _URC_END_OF_STACK;
  trace->frames[trace->depth++] = reinterpret_cast<void*>(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}

struct Comparison {
  std::atomic<long> samples{0}, identical{0}, skipped{0};  // skipped: no oracle there (below)
  std::atomic<bool> recorded{false};
  void* ours[64];
  void* theirs[80];
  int ours_depth = 0, theirs_depth = 0;
  // Samples whose interrupted PC lies in [skip_start, skip_end) are counted apart
  // (`skipped`), not compared: code the oracle cannot unwind.
  std::uintptr_t skip_start = 0, skip_end = 0;
  std::uint64_t stack_top = 0;                        // taken before the timer starts: not in a handler
  spanprof::detail::cfi::RulesCache rules_cache;      // the handler's, as a sampler's
};

inline Comparison& comparison() {
  static Comparison c;
  return c;
}

// In the handler: spanprof's walk from the signal's context, and libgcc's walk
// from the handler through the signal frame (its frames past the interrupted PC).
// spanprof's walk is taken twice, from the rules it kept of earlier samples' return
// addresses (as the sample handler walks) and without: both must be libgcc's.
inline void compare_walks(int, siginfo_t*, void* ucontext) {
  namespace sd = spanprof::detail;
  Comparison& c = comparison();
  void* ours[64];
  const int depth = sd::walk_stack(sd::registers_from_ucontext(ucontext), c.stack_top, ours, 64, &c.rules_cache);
  const auto leaf = reinterpret_cast<std::uintptr_t>(ours[0]);
  if (depth > 0 && leaf >= c.skip_start && leaf < c.skip_end) {
    c.skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  void* uncached[64];
  const int uncached_depth = sd::walk_stack(sd::registers_from_ucontext(ucontext), c.stack_top, uncached, 64);
  UnwindTrace theirs;
  _Unwind_Backtrace(&collect_frame, &theirs);
  int from = 0;
  while (from < theirs.depth && theirs.frames[from] != ours[0]) ++from;
  int their_depth = theirs.depth - from;
  if (their_depth > 0 && theirs.frames[theirs.depth - 1] == nullptr) --their_depth;  // libgcc's end marker
  if (their_depth > 64) their_depth = 64;
  // libgcc found no unwind entry for the interrupted PC (aarch64: a PLT stub, which
  // linkers leave without one) and stopped there: no oracle for this sample.
  if (from < theirs.depth && their_depth == 1 && depth > 1) {
    c.skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  bool same = from < theirs.depth && depth == their_depth && uncached_depth == depth;
  for (int i = 0; same && i < depth; ++i) same = ours[i] == theirs.frames[from + i] && uncached[i] == ours[i];
  c.samples.fetch_add(1, std::memory_order_relaxed);
  if (same) {
    c.identical.fetch_add(1, std::memory_order_relaxed);
  } else if (!c.recorded.exchange(true)) {
    std::copy(ours, ours + depth, c.ours);
    c.ours_depth = depth;
    std::copy(theirs.frames + from, theirs.frames + from + std::max(0, their_depth), c.theirs);
    c.theirs_depth = their_depth;
  }
}

__attribute__((noinline)) inline double mixed_work(int i) {
  std::vector<double> values(32);
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = std::sin(i * 0.37 + static_cast<double>(k));
  std::sort(values.begin(), values.end());
  const std::string text = std::to_string(values[7]);
  return values[3] + static_cast<double>(text.size());
}

__attribute__((noinline)) inline double mixed_caller(int i) {
  double sum = 0;
  for (int k = 0; k < 4; ++k) sum += mixed_work(i + k);
  asm volatile("" ::: "memory");
  return sum;
}

inline double oracle_thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs the workload for `cpu_seconds` of this thread's CPU with the comparing
// handler on a 1 kHz CPU timer; returns the workload's result (kept alive).
inline double compare_for(double cpu_seconds) {
  UnwindTrace warm;  // libgcc initialises itself on first use: not in the handler
  _Unwind_Backtrace(&collect_frame, &warm);
  comparison().stack_top = spanprof::detail::this_thread_stack_top();
  struct sigaction action {};
  action.sa_sigaction = &compare_walks;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGRTMIN + 2, &action, nullptr);
  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGRTMIN + 2;
  event._sigev_un._tid = static_cast<pid_t>(::syscall(SYS_gettid));
  timer_t timer{};
  ::timer_create(CLOCK_THREAD_CPUTIME_ID, &event, &timer);
  itimerspec every{};
  every.it_interval.tv_nsec = every.it_value.tv_nsec = 1'000'000;
  ::timer_settime(timer, 0, &every, nullptr);
  double sum = 0;
  const double end = oracle_thread_cpu_seconds() + cpu_seconds;
  for (int i = 0; oracle_thread_cpu_seconds() < end; ++i) sum += mixed_caller(i);
  ::timer_delete(timer);
  return sum;
}

// The first sample where the two walks differed, a line per frame after `prefix`.
inline void print_first_difference(const char* prefix) {
  const Comparison& c = comparison();
  if (!c.recorded) return;
  std::printf("%sfirst difference (spanprof, libgcc):\n", prefix);
  for (int i = 0; i < std::max(c.ours_depth, c.theirs_depth); ++i)
    std::printf("%s  %p  %p\n", prefix, i < c.ours_depth ? c.ours[i] : nullptr,
                i < c.theirs_depth ? c.theirs[i] : nullptr);
}

}  // namespace walk_oracle
}  // namespace spanprof_test

#endif  // SPANPROF_HAS_CFI_WALKER
