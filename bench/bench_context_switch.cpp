// What a thread's sampler costs at every context switch of that thread, outside
// and inside a span. Two threads, pinned to one core, pass a byte back and forth
// through two pipes: one iteration is a round trip, two context switches. Each
// thread runs under the sampler of the source named, armed by a guard first
// (and kept armed by the ticks of a busy span, or idle between spans).
//   context_switch/none                  spanprof not started
//   context_switch/<source>/idle         the threads' samplers armed, no span open
//   context_switch/<source>/in_span      a span open on both threads throughout
// <source> is default (automatic), perf_event or posix_timer. Per switch, spanprof
// costs (round trip - none) / 2. The round trip of `none` moves by a few hundred
// nanoseconds from run to run on a VM: compare medians of interleaved repetitions,
//   spanprof_bench --benchmark_filter=context_switch --benchmark_repetitions=10
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <spanprof/spanprof.hpp>

#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <thread>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

namespace {

const spanprof::SpanContext switch_span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01").context;

void pin_to_first_core() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

enum class Sampling { none, idle, in_span };

void start_spanprof(spanprof::CpuSampleSource source) {
  spanprof::Options options(spanprof::ignore_environment);
  options.cpu_sample_source = source;
  options.uploaders.push_back(
      std::make_shared<spanprof::CallbackUploader>([](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::ok(); }));
  spanprof::start(options);
}

// Arms this thread's sampler: a guard that opens and closes.
void arm_this_thread() {
  spanprof::ScopedProfile guard(switch_span, "arm");
  benchmark::DoNotOptimize(&guard);
}

void context_switch(benchmark::State& state, Sampling sampling, spanprof::CpuSampleSource source) {
  if (sampling != Sampling::none) start_spanprof(source);
  int ping[2], pong[2];
  if (::pipe(ping) != 0 || ::pipe(pong) != 0) {
    state.SkipWithError("pipe");
    return;
  }
  std::atomic<bool> ready{false};
  std::thread echo([&] {
    pin_to_first_core();
    if (sampling != Sampling::none) arm_this_thread();
    std::unique_ptr<spanprof::ScopedProfile> span;
    if (sampling == Sampling::in_span) span = std::make_unique<spanprof::ScopedProfile>(switch_span, "echo");
    ready = true;
    char byte = 0;
    while (::read(ping[0], &byte, 1) == 1 && byte != 'q') {
      if (::write(pong[1], &byte, 1) != 1) break;
    }
    if (span) span->discard();
  });
  pin_to_first_core();
  if (sampling != Sampling::none) arm_this_thread();
  std::unique_ptr<spanprof::ScopedProfile> span;
  if (sampling == Sampling::in_span) span = std::make_unique<spanprof::ScopedProfile>(switch_span, "ping");
  while (!ready) std::this_thread::yield();
  char byte = 'p';
  for (auto _ : state) {
    if (::write(ping[1], &byte, 1) != 1 || ::read(pong[0], &byte, 1) != 1) {
      state.SkipWithError("pipe");
      break;
    }
  }
  byte = 'q';
  (void)!::write(ping[1], &byte, 1);
  echo.join();
  if (span) span->discard();
  span.reset();
  for (int fd : {ping[0], ping[1], pong[0], pong[1]}) ::close(fd);
  // Back on every core, for the benchmarks that follow.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  ::pthread_setaffinity_np(::pthread_self(), sizeof all, &all);
  if (sampling != Sampling::none) spanprof::shutdown(std::chrono::seconds(5));
}

using Source = spanprof::CpuSampleSource;
BENCHMARK_CAPTURE(context_switch, none, Sampling::none, Source::automatic)->Name("context_switch/none");
BENCHMARK_CAPTURE(context_switch, default_idle, Sampling::idle, Source::automatic)
    ->Name("context_switch/default/idle");
BENCHMARK_CAPTURE(context_switch, default_in_span, Sampling::in_span, Source::automatic)
    ->Name("context_switch/default/in_span");
BENCHMARK_CAPTURE(context_switch, perf_event_idle, Sampling::idle, Source::perf_event)
    ->Name("context_switch/perf_event/idle");
BENCHMARK_CAPTURE(context_switch, perf_event_in_span, Sampling::in_span, Source::perf_event)
    ->Name("context_switch/perf_event/in_span");
BENCHMARK_CAPTURE(context_switch, posix_timer_idle, Sampling::idle, Source::posix_timer)
    ->Name("context_switch/posix_timer/idle");
BENCHMARK_CAPTURE(context_switch, posix_timer_in_span, Sampling::in_span, Source::posix_timer)
    ->Name("context_switch/posix_timer/in_span");

}  // namespace
