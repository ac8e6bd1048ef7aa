// Run by scripts/arm64.sh as the init process of an aarch64 VM (a real arm64
// kernel under qemu-system-aarch64), built statically for it. spanprof's stack
// walker (detail/capture/stack_walker.hpp) against the compiler runtime's unwinder
// (libgcc's _Unwind_Backtrace): a CPU timer interrupts a workload of library code
// (sort, to_string, sin) a thousand times a CPU-second, and in the handler both
// walk the interrupted stack; every walk must find the same frames (but where the
// signal came in the vDSO, whose unwind tables libgcc does not find in a static
// program: those are counted apart). Then the cost of one walk at 13, 33 and 63
// frames, next to libgcc's and libunwind's (unw_step, as gperftools walks on
// arm64; and its unw_backtrace), as ratios: the VM's cores are emulated.
#include <spanprof/detail/capture/call_frame_info.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#define UNW_LOCAL_ONLY  // this process only, as gperftools walks
#include <libunwind.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if !SPANPROF_HAS_CFI_WALKER
#error "spanprof's own walker is expected on aarch64"
#endif

// libgcc's unwinder, declared here: the sysroot's <unwind.h> is libunwind's. The
// link puts libgcc_eh before libunwind, so these are libgcc's.
extern "C" {
struct _Unwind_Context;
int _Unwind_Backtrace(int (*)(_Unwind_Context*, void*), void*);
unsigned long _Unwind_GetIP(_Unwind_Context*);
}

namespace {

namespace sd = spanprof::detail;

constexpr int unwind_no_reason = 0, unwind_end_of_stack = 5;

struct UnwindTrace {
  void* frames[80];
  int depth = 0;
};

int collect_frame(_Unwind_Context* context, void* argument) {
  auto* trace = static_cast<UnwindTrace*>(argument);
  if (trace->depth == 80) return unwind_end_of_stack;
  trace->frames[trace->depth++] = reinterpret_cast<void*>(_Unwind_GetIP(context));
  return unwind_no_reason;
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double monotonic_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Comparison {
  std::atomic<long> samples{0}, identical{0}, in_vdso{0};
  std::atomic<bool> recorded{false};
  void* ours[64];
  void* theirs[80];
  int ours_depth = 0, theirs_depth = 0;
};
Comparison comparison;
std::uint64_t stack_top = 0;
std::uintptr_t vdso_start = 0, vdso_end = 0;  // [vdso] in /proc/self/maps

void find_vdso() {
  vdso_start = static_cast<std::uintptr_t>(::getauxval(AT_SYSINFO_EHDR));
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, maps) != nullptr) {
      unsigned long start = 0, end = 0;
      if (std::strstr(line, "[vdso]") != nullptr && std::sscanf(line, "%lx-%lx", &start, &end) == 2) {
        vdso_start = start;
        vdso_end = end;
      }
    }
    std::fclose(maps);
  }
}
sd::cfi::RulesCache rules_cache;  // the handler's, as a sampler's

// spanprof's walk from the signal's context, with the rules it kept of earlier
// samples and without, against libgcc's walk through the signal frame.
void compare_walks(int, siginfo_t*, void* ucontext) {
  void* ours[64];
  const int depth = sd::walk_stack(sd::registers_from_ucontext(ucontext), stack_top, ours, 64, &rules_cache);
  void* uncached[64];
  const int uncached_depth = sd::walk_stack(sd::registers_from_ucontext(ucontext), stack_top, uncached, 64);
  const auto leaf = reinterpret_cast<std::uintptr_t>(ours[0]);
  if (depth > 0 && leaf >= vdso_start && leaf < vdso_end) {
    comparison.in_vdso.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  UnwindTrace theirs;
  _Unwind_Backtrace(&collect_frame, &theirs);
  int from = 0;
  while (from < theirs.depth && theirs.frames[from] != ours[0]) ++from;
  int their_depth = theirs.depth - from;
  if (their_depth > 0 && theirs.frames[theirs.depth - 1] == nullptr) --their_depth;  // libgcc's end marker
  if (their_depth > 64) their_depth = 64;
  bool same = from < theirs.depth && depth == their_depth && uncached_depth == depth;
  for (int i = 0; same && i < depth; ++i) same = ours[i] == theirs.frames[from + i] && uncached[i] == ours[i];
  comparison.samples.fetch_add(1, std::memory_order_relaxed);
  if (same) {
    comparison.identical.fetch_add(1, std::memory_order_relaxed);
  } else if (!comparison.recorded.exchange(true)) {
    std::copy(ours, ours + depth, comparison.ours);
    comparison.ours_depth = depth;
    std::copy(theirs.frames + from, theirs.frames + from + std::max(0, their_depth), comparison.theirs);
    comparison.theirs_depth = their_depth;
  }
}

__attribute__((noinline)) double mixed_work(int i) {
  std::vector<double> values(32);
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = std::sin(i * 0.37 + static_cast<double>(k));
  std::sort(values.begin(), values.end());
  const std::string text = std::to_string(values[7]);
  return values[3] + static_cast<double>(text.size());
}

__attribute__((noinline)) double mixed_caller(int i) {
  double sum = 0;
  for (int k = 0; k < 4; ++k) sum += mixed_work(i + k);
  asm volatile("" ::: "memory");
  return sum;
}

bool walks_match_libgcc() {
  UnwindTrace warm;  // libgcc initialises itself on first use: not in the handler
  _Unwind_Backtrace(&collect_frame, &warm);
  stack_top = sd::this_thread_stack_top();
  find_vdso();
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
  const double end = thread_cpu_seconds() + 1.0;
  for (int i = 0; thread_cpu_seconds() < end; ++i) sum += mixed_caller(i);
  ::timer_delete(timer);
  const long samples = comparison.samples.load(), identical = comparison.identical.load();
  std::printf("spanprof-arm64: walks from a signal: %ld samples, %ld identical to libgcc's; %ld more in the vDSO "
              "(sum %g)\n",
              samples, identical, comparison.in_vdso.load(), sum);
  if (comparison.recorded) {
    std::printf("spanprof-arm64: first difference (spanprof, libgcc):\n");
    for (int i = 0; i < std::max(comparison.ours_depth, comparison.theirs_depth); ++i)
      std::printf("spanprof-arm64:   %p  %p\n", i < comparison.ours_depth ? comparison.ours[i] : nullptr,
                  i < comparison.theirs_depth ? comparison.theirs[i] : nullptr);
  }
  return samples >= 100 && identical == samples;
}

// ---- the cost of one walk --------------------------------------------------------

enum class Walker { spanprof, libgcc, libunwind_step, libunwind_backtrace };

__attribute__((noinline)) int walk_once(Walker walker) {
  void* frames[80];
  switch (walker) {
    case Walker::spanprof: {
      sd::cfi::Registers regs;
      sd::capture_registers_here(regs);
      return sd::walk_stack(regs, stack_top, frames, 80, &rules_cache);
    }
    case Walker::libgcc: {
      UnwindTrace trace;
      _Unwind_Backtrace(&collect_frame, &trace);
      return trace.depth;
    }
    case Walker::libunwind_step: {  // as gperftools' GetStackTrace
      unw_context_t context;
      unw_cursor_t cursor;
      unw_getcontext(&context);
      if (unw_init_local(&cursor, &context) != 0) return 0;
      int n = 0;
      do {
        unw_word_t ip = 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        frames[n++] = reinterpret_cast<void*>(ip);
      } while (n < 80 && unw_step(&cursor) > 0);
      return n;
    }
    case Walker::libunwind_backtrace:
      return unw_backtrace(frames, 80);
  }
  return 0;
}

struct Timing {
  double seconds_per_walk = 0;
  int depth = 0;
};

// Recurses `levels` deep, then walks `walks` times.
__attribute__((noinline)) Timing at_depth(int levels, Walker walker, int walks) {
  if (levels > 0) {
    Timing t = at_depth(levels - 1, walker, walks);
    asm volatile("" ::: "memory");  // not a tail call: every level keeps its frame
    return t;
  }
  Timing t;
  t.depth = walk_once(walker);
  const double start = monotonic_seconds();
  for (int i = 0; i < walks; ++i) walk_once(walker);
  t.seconds_per_walk = (monotonic_seconds() - start) / walks;
  return t;
}

bool walk_costs() {
  const int base = at_depth(0, Walker::spanprof, 1).depth;  // the frames below the recursion
  bool ok = true;
  for (const int target : {13, 33, 63}) {
    const int levels = std::max(0, target - base);
    // Fewer walks of the slow ones: the VM's time is CI's.
    const Timing ours = at_depth(levels, Walker::spanprof, 2000);
    const Timing gcc = at_depth(levels, Walker::libgcc, 300);
    const Timing step = at_depth(levels, Walker::libunwind_step, 60);
    const Timing fast = at_depth(levels, Walker::libunwind_backtrace, 2000);
    std::printf("spanprof-arm64: walk of %d frames: spanprof %.2f us; libunwind's unw_step %.2f us (%.1fx), its "
                "unw_backtrace %.2f us (%.1fx); libgcc %.2f us (%.1fx)\n",
                ours.depth, ours.seconds_per_walk * 1e6, step.seconds_per_walk * 1e6,
                step.seconds_per_walk / ours.seconds_per_walk, fast.seconds_per_walk * 1e6,
                fast.seconds_per_walk / ours.seconds_per_walk, gcc.seconds_per_walk * 1e6,
                gcc.seconds_per_walk / ours.seconds_per_walk);
    ok = ok && ours.depth == target;
  }
  return ok;
}

}  // namespace

int main() {
  const bool init = ::getpid() == 1;
  if (init) ::mount("proc", "/proc", "proc", 0, nullptr);
  const bool same = walks_match_libgcc();
  const bool costs = walk_costs();
  std::printf("spanprof-arm64: %s\n", same && costs ? "PASS" : "FAIL");
  std::fflush(stdout);
  if (init) ::reboot(RB_POWER_OFF);
  return same && costs ? 0 : 1;
}
