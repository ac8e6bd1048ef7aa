// Run by scripts/arm64.sh in an aarch64 VM (a real arm64 kernel under
// qemu-system-aarch64, tests/arm64/init/init.cpp), built statically for it. spanprof's stack
// walker (detail/capture/stack_walker.hpp) against the compiler runtime's unwinder
// (libgcc's _Unwind_Backtrace): a CPU timer interrupts a workload of library code
// (sort, to_string, sin) a thousand times a CPU-second, and in the handler both
// walk the interrupted stack; every walk must find the same frames (but where the
// signal came in the vDSO, whose unwind tables libgcc does not find in a static
// program, or in a PLT stub, which has none: those are counted apart). Then the cost of one walk at 13, 33 and 63
// frames, next to libgcc's and libunwind's (unw_step, as gperftools walks on
// arm64; and its unw_backtrace), as ratios: the VM's cores are emulated.
#include "../support/walk_oracle.hpp"
#include "vm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#define UNW_LOCAL_ONLY  // this process only, as gperftools walks
#include <libunwind.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#if !SPANPROF_HAS_CFI_WALKER
#error "spanprof's own walker is expected on aarch64"
#endif

namespace {

namespace sd = spanprof::detail;
namespace oracle = spanprof_test::walk_oracle;

double monotonic_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The vDSO's range, counted apart: libgcc does not find its unwind tables in a
// static program.
void skip_vdso() {
  auto& c = oracle::comparison();
  c.skip_start = static_cast<std::uintptr_t>(::getauxval(AT_SYSINFO_EHDR));
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, maps) != nullptr) {
      unsigned long start = 0, end = 0;
      if (std::strstr(line, "[vdso]") != nullptr && std::sscanf(line, "%lx-%lx", &start, &end) == 2) {
        c.skip_start = start;
        c.skip_end = end;
      }
    }
    std::fclose(maps);
  }
}

bool walks_match_libgcc() {
  skip_vdso();
  // Half a second of CPU at a time until 100 walks are compared (at most 8 s): the
  // emulated CPU timer fires less often when the host is busy (one CI run compared
  // 73 in one second, with 57 more in the vDSO).
  double sum = 0;
  for (int round = 0; round < 16 && oracle::comparison().samples.load() < 100; ++round) sum += oracle::compare_for(0.5);
  const auto& c = oracle::comparison();
  const long samples = c.samples.load(), identical = c.identical.load();
  std::printf("spanprof-arm64: walks from a signal: %ld samples, %ld identical to libgcc's; %ld more in the vDSO "
              "or a PLT stub, which libgcc cannot unwind (sum %g)\n",
              samples, identical, c.skipped.load(), sum);
  oracle::print_first_difference("spanprof-arm64: ");
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
      return sd::walk_stack(regs, oracle::comparison().stack_top, frames, 80, &oracle::comparison().rules_cache);
    }
    case Walker::libgcc: {
      oracle::UnwindTrace trace;
      _Unwind_Backtrace(&oracle::collect_frame, &trace);
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
  const bool same = walks_match_libgcc();
  const bool costs = walk_costs();
  return arm64_vm::finish(same && costs);
}
