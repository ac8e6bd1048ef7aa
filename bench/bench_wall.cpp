// Wall-clock span profiles, side by side in one run:
//   guard_not_sampled_wall       a wall guard the head sampler turns down
//   guard_wall_open_close        a wall-profiled span that takes no sample:
//                                what opening and closing one costs the request
//   guard_cpu_open_close         the same with a CPU-profiled span, for scale
//   request_loop/<mode>          requests of 100 us of CPU and a 100 us sleep on
//                                one thread; items/s with no guard, every request
//                                CPU-profiled, every request wall-profiled (100 Hz),
//                                each for $SPANPROF_BENCH_LOOP_SECONDS (default 1)
//   eintr_nanosleep_1ms          a host loop of nanosleep(1 ms) inside one wall
//                                span for $SPANPROF_BENCH_EINTR_SECONDS (default
//                                10): how often the host sees EINTR, per second
#include <spanprof/spanprof.hpp>

#include "bench_support.hpp"

#include <benchmark/benchmark.h>

#include <cerrno>
#include <chrono>
#include <ctime>

namespace {

const spanprof::SpanContext span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902c1-01").context;

void start_with(std::shared_ptr<spanprof::HeadSampler> sampler, int wall_hz = 100) {
  spanprof::Options options;
  options.head_sampler = std::move(sampler);
  options.wall_frequency_hz = wall_hz;
  options.uploaders.push_back(
      std::make_shared<spanprof::CallbackUploader>([](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::ok(); }));
  spanprof::start(options);
}

void guard_not_sampled_wall(benchmark::State& state) {
  start_with(std::make_shared<spanprof::NeverSampler>());
  for (auto _ : state) {
    spanprof::ScopedProfile guard(span, "GET /", spanprof::wall);
    benchmark::DoNotOptimize(&guard);
  }
}
BENCHMARK(guard_not_sampled_wall);

template <class Kinds>
void open_close(benchmark::State& state, Kinds kinds) {
  start_with(nullptr);
  const auto before = spanprof::stats();
  for (auto _ : state) {
    spanprof::ScopedProfile guard(span, "GET /", kinds);
    benchmark::DoNotOptimize(&guard);
  }
  const auto after = spanprof::stats();
  state.counters["wall_samples"] = static_cast<double>(after.wall_samples_captured - before.wall_samples_captured);
  spanprof::flush();
}
void guard_wall_open_close(benchmark::State& state) { open_close(state, spanprof::wall); }
void guard_cpu_open_close(benchmark::State& state) { open_close(state, spanprof::cpu); }
BENCHMARK(guard_wall_open_close);
BENCHMARK(guard_cpu_open_close);

std::int64_t thread_cpu_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

__attribute__((noinline)) void handle_request() {
  const std::int64_t end = thread_cpu_ns() + 100'000;
  double x = 1;
  while (thread_cpu_ns() < end) x = x * 1.0000001 + 1e-9;
  benchmark::DoNotOptimize(x);
  timespec pause{0, 100'000};
  while (::nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
}

enum class Mode { off, cpu, wall };

void request_loop(benchmark::State& state, Mode mode) {
  start_with(nullptr);
  const auto before = spanprof::stats();
  for (auto _ : state) {
    if (mode == Mode::off) {
      handle_request();
    } else {
      spanprof::ScopedProfile guard(span, "GET /", mode == Mode::cpu ? spanprof::cpu : spanprof::wall);
      handle_request();
    }
  }
  const auto after = spanprof::stats();
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["wall_samples"] = static_cast<double>(after.wall_samples_captured - before.wall_samples_captured);
  state.counters["cpu_samples"] = static_cast<double>(after.samples_captured - before.samples_captured);
  spanprof::flush();
}
const double loop_seconds = bench::seconds_from_environment("SPANPROF_BENCH_LOOP_SECONDS", 1.0);
BENCHMARK_CAPTURE(request_loop, off, Mode::off)->UseRealTime()->MinTime(loop_seconds);
BENCHMARK_CAPTURE(request_loop, cpu, Mode::cpu)->UseRealTime()->MinTime(loop_seconds);
BENCHMARK_CAPTURE(request_loop, wall, Mode::wall)->UseRealTime()->MinTime(loop_seconds);

void eintr_nanosleep_1ms(benchmark::State& state) {
  start_with(nullptr);
  const double seconds = bench::seconds_from_environment("SPANPROF_BENCH_EINTR_SECONDS", 10);
  const auto before = spanprof::stats();
  std::int64_t sleeps = 0, interrupted = 0;
  for (auto _ : state) {
    spanprof::ScopedProfile guard(span, "host loop", spanprof::wall);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      timespec pause{0, 1'000'000};
      ++sleeps;
      while (::nanosleep(&pause, &pause) != 0 && errno == EINTR) ++interrupted;  // a correct host retries
    }
  }
  const auto after = spanprof::stats();
  state.counters["sleeps"] = static_cast<double>(sleeps);
  state.counters["eintr"] = static_cast<double>(interrupted);
  state.counters["eintr_per_second"] = static_cast<double>(interrupted) / seconds;
  state.counters["ticks_signalled"] = static_cast<double>(after.wall_ticks_signalled - before.wall_ticks_signalled);
  state.counters["ticks_confirmed"] = static_cast<double>(after.wall_ticks_confirmed - before.wall_ticks_confirmed);
  spanprof::flush();
}
BENCHMARK(eintr_nanosleep_1ms)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace
