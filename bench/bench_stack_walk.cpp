// Cost of one stack walk, spanprof's call frame walker (walker 0; walker 2 with the
// rules of return addresses kept from the walk before, as the sample handler
// walks) side by side with gperftools' walker (walker 1: libunwind on Debian, what
// spanprof used before, and what the classic engine still uses), at 13, 33 and 63
// frames:
//   walk_here/<walker>/<depth>      a walk from a function that many frames deep:
//                                   the walk alone (the heap hooks' case)
//   walk_in_signal/<walker>/<depth> a signal to self whose handler walks from the
//                                   signal's context: a CPU sample's whole cost on
//                                   the sampled thread, delivery included
// The depth counts every frame of the walk, the benchmark's own included.
#include <spanprof/spanprof.hpp>

#include <benchmark/benchmark.h>
#include <gperftools/profiler.h>
#include <gperftools/stacktrace.h>

#include <csignal>
#include <cstdint>

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#if SPANPROF_HAS_CFI_WALKER

namespace {

namespace sd = spanprof::detail;

enum Walker : int { cfi_walker = 0, gperftools_walker = 1, cfi_cached_walker = 2 };

sd::cfi::RulesCache rules_cache;

std::uint64_t stack_top = 0;
void* frames[300];
volatile int walked_depth = 0;
int signal_walker = cfi_walker;

SPANPROF_NOINLINE int walk_here(int walker) {
  if (walker != gperftools_walker) {
    sd::cfi::Registers regs;
    sd::capture_registers_here(regs);
    return sd::walk_stack(regs, stack_top, frames, 300, walker == cfi_cached_walker ? &rules_cache : nullptr);
  }
  return GetStackTrace(frames, 300, 0);
}

void walking_handler(int, siginfo_t*, void* ucontext) {
  if (signal_walker != gperftools_walker)
    walked_depth = sd::walk_stack(sd::registers_from_ucontext(ucontext), stack_top, frames, 300,
                                  signal_walker == cfi_cached_walker ? &rules_cache : nullptr);
  else
    walked_depth = ProfilerGetStackTrace(frames, 300, 0, ucontext);
}

// Runs the benchmark loop `levels` frames below the caller.
template <class Body>
SPANPROF_NOINLINE int at_depth(int levels, Body& body) {
  if (levels <= 0) {
    body();
    return 0;
  }
  const int r = at_depth(levels - 1, body);
  benchmark::DoNotOptimize(r);
  return r + 1;
}

void walk_benchmark(benchmark::State& state, bool in_signal) {
  const int walker = static_cast<int>(state.range(0));
  const int wanted = static_cast<int>(state.range(1));
  stack_top = sd::this_thread_stack_top();
  if (in_signal) {
    struct sigaction action {};
    action.sa_sigaction = &walking_handler;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGRTMIN + 3, &action, nullptr);
    signal_walker = walker;
  }
  const pid_t pid = ::getpid();
  const auto tid = static_cast<pid_t>(::syscall(SYS_gettid));
  // The frames above this point, counted once by the walker itself.
  const int base = walk_here(cfi_walker) - 1;
  int depth = 0;
  auto loop = [&] {
    for (auto _ : state) {
      if (in_signal) {
        ::syscall(SYS_tgkill, pid, tid, SIGRTMIN + 3);
        depth = walked_depth;
      } else {
        depth = walk_here(walker);
      }
      benchmark::DoNotOptimize(depth);
    }
  };
  at_depth(wanted - base - 2, loop);
  state.counters["depth"] = depth;
  if (in_signal) ::signal(SIGRTMIN + 3, SIG_DFL);
}

void walk_here_benchmark(benchmark::State& state) { walk_benchmark(state, false); }
void walk_in_signal_benchmark(benchmark::State& state) { walk_benchmark(state, true); }

void depths(benchmark::internal::Benchmark* b) {
  b->ArgNames({"walker", "depth"});
  for (int depth : {13, 33, 63})
    for (int walker : {cfi_walker, cfi_cached_walker, gperftools_walker}) b->Args({walker, depth});
}

BENCHMARK(walk_here_benchmark)->Name("walk_here")->Apply(depths)->Unit(benchmark::kMicrosecond);
BENCHMARK(walk_in_signal_benchmark)->Name("walk_in_signal")->Apply(depths)->Unit(benchmark::kMicrosecond);

}  // namespace

#endif  // SPANPROF_HAS_CFI_WALKER
