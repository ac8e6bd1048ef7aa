// Request-thread cost of a guard, side by side in one run:
//   not_sampled        the head sampler says no (target <= 10 ns)
//   sampling_engine    profiled span, default engine; nearly all iterations take no
//                      sample (target <= 1 us, stretch <= 100 ns); the rare one that
//                      does is included, so this is the true amortized cost
//   classic_engine     gperftools ProfilerStart/ProfilerStop around the scope
//   sampling_engine_time_split  the same with Options::time_split: the thread's
//                      times read at the open and the close (docs/time_split.md)
//   tail_discarded     profiled span that the tail policy throws away at close
//                      (here: not slow), having taken no sample (target <= 1 us)
//   not_sampled_with_trigger  the head sampler says no while an adaptive trigger
//                      times one span in 8 per thread for its latency baselines
//   fragment_switch    one turn of a profiled request (spanprof::Fragment open and
//                      close, request.hpp), as an async handler pays per resumption
//                      (goal <= 50 ns, no allocation, no syscall without a sample)
//   fragment_not_sampled  the same, for a request the head sampler turned down
//   request_lifetime   a profiled request begun, run in one fragment and ended,
//                      without a sample (its state is allocated once per request)
//   parse_traceparent  an incoming request's W3C header read into its span, as a
//                      server (the gRPC interceptor, an HTTP handler) does for every
//                      request: 4096 headers of random ids in turn
// The default engine must be >= 1000x faster than the classic one.
#include <spanprof/spanprof.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

const spanprof::SpanContext span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").context;

void start_with(spanprof::CpuEngine engine, std::shared_ptr<spanprof::HeadSampler> sampler,
                std::shared_ptr<spanprof::TailPolicy> tail_policy = nullptr,
                std::shared_ptr<spanprof::AdaptiveTrigger> trigger = nullptr, bool time_split = false) {
  spanprof::Options options;
  options.time_split = time_split;
  options.cpu_engine = engine;
  options.head_sampler = std::move(sampler);
  options.tail_policy = std::move(tail_policy);
  options.trigger = std::move(trigger);
  // Profiles are symbolized and encoded as usual, then discarded: no disk I/O.
  options.uploaders.push_back(
      std::make_shared<spanprof::CallbackUploader>([](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::ok(); }));
  spanprof::start(options);
}

void guard_not_sampled(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, std::make_shared<spanprof::NeverSampler>());
  for (auto _ : state) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /"});
    benchmark::DoNotOptimize(&guard);
  }
}
BENCHMARK(guard_not_sampled);

void guard_sampling_engine(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, nullptr);
  const auto before = spanprof::stats();
  for (auto _ : state) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /"});
    benchmark::DoNotOptimize(&guard);
  }
  const auto after = spanprof::stats();
  state.counters["spans_with_samples"] = static_cast<double>(
      (after.guards_opened - before.guards_opened) - (after.spans_without_samples - before.spans_without_samples));
}
BENCHMARK(guard_sampling_engine);

void guard_sampling_engine_time_split(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, nullptr, nullptr, nullptr, true);
  for (auto _ : state) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /"});
    benchmark::DoNotOptimize(&guard);
  }
}
BENCHMARK(guard_sampling_engine_time_split);

void guard_tail_discarded(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, nullptr, std::make_shared<spanprof::KeepSlowSpans>(std::chrono::seconds(1)));
  const auto before = spanprof::stats();
  for (auto _ : state) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /"});
    benchmark::DoNotOptimize(&guard);
  }
  const auto after = spanprof::stats();
  state.counters["discarded"] = static_cast<double>(after.discarded_by_tail_policy - before.discarded_by_tail_policy);
}
BENCHMARK(guard_tail_discarded);

void guard_not_sampled_with_trigger(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, std::make_shared<spanprof::NeverSampler>(), nullptr,
             std::make_shared<spanprof::AdaptiveTrigger>());
  for (auto _ : state) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /"});
    benchmark::DoNotOptimize(&guard);
  }
}
BENCHMARK(guard_not_sampled_with_trigger);

void guard_classic_engine(benchmark::State& state) {
  start_with(spanprof::CpuEngine::classic, nullptr);
  for (auto _ : state) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /"});
    benchmark::DoNotOptimize(&guard);
  }
  spanprof::flush();
}
void fragment_switch(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, nullptr);
  spanprof::RequestProfile request(spanprof::NamedSpan{span, "GET /"});
  for (auto _ : state) {
    spanprof::Fragment fragment(request);
    benchmark::DoNotOptimize(&fragment);
  }
  request.discard();
}
BENCHMARK(fragment_switch);

void fragment_not_sampled(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, std::make_shared<spanprof::NeverSampler>());
  spanprof::RequestProfile request(spanprof::NamedSpan{span, "GET /"});
  for (auto _ : state) {
    spanprof::Fragment fragment(request);
    benchmark::DoNotOptimize(&fragment);
  }
}
BENCHMARK(fragment_not_sampled);

void request_lifetime(benchmark::State& state) {
  start_with(spanprof::CpuEngine::sampling, nullptr);
  for (auto _ : state) {
    spanprof::RequestProfile request(spanprof::NamedSpan{span, "GET /"});
    {
      spanprof::Fragment fragment(request);
      benchmark::DoNotOptimize(&fragment);
    }
    request.end();
  }
}
BENCHMARK(request_lifetime);

void parse_traceparent(benchmark::State& state) {
  // Random ids: which digits are letters changes from header to header, as it does
  // from request to request (a branch predictor cannot learn one header's).
  std::vector<std::string> headers;
  std::uint64_t random = 0x9E3779B97F4A7C15ull;
  const auto next = [&random] {
    random ^= random << 13;
    random ^= random >> 7;
    random ^= random << 17;
    return random;
  };
  char text[64];
  for (int i = 0; i < 4096; ++i) {
    std::snprintf(text, sizeof text, "00-%016llx%016llx-%016llx-01", static_cast<unsigned long long>(next()),
                  static_cast<unsigned long long>(next()), static_cast<unsigned long long>(next() | 1));
    headers.emplace_back(text);
  }
  std::size_t i = 0;
  for (auto _ : state) {
    const spanprof::TraceparentParse parsed = spanprof::parse_traceparent(headers[i++ & 4095]);
    benchmark::DoNotOptimize(parsed);
  }
}
BENCHMARK(parse_traceparent);

BENCHMARK(guard_classic_engine)->Unit(benchmark::kMicrosecond)->Iterations(50);

}  // namespace

BENCHMARK_MAIN();
