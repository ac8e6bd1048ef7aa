// Profile only the slow requests. Every request is recorded cheaply (the sampling
// engine keeps samples in a per-thread buffer); when a request ends, a tail policy
// keeps its profile only if it took at least the threshold. One request in 100 is
// slow here, and only those are written, each labelled profile_reason=slow.
//
// Prints the slow requests' span ids and the files written; tests/check_slow_requests.sh
// checks that the two lists match and reads every file back with `go tool pprof`.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

// A slow dependency: the 1-in-100 requests that miss a cache recompute everything.
__attribute__((noinline)) double recompute_inventory(std::int64_t cpu_ns) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  double stock = 1.0;
  while (example::thread_cpu_ns() < end)
    for (int i = 1; i < 20000; ++i) stock += 1.0 / (i * 1.5);
  return stock;
}

__attribute__((noinline)) double read_cached_inventory(std::int64_t cpu_ns) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  double stock = 2.0;
  while (example::thread_cpu_ns() < end)
    for (int i = 1; i < 2000; ++i) stock *= 1.0000001;
  return stock;
}

double handle_inventory(const spanprof::SpanContext& span, bool cache_miss) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /inventory"});
  return cache_miss ? recompute_inventory(60'000'000) : read_cached_inventory(500'000);
}

}  // namespace

int main() {
  spanprof::Options options;
  auto files = std::make_shared<spanprof::FileUploader>(options.output_directory);  // $SPANPROF_OUTPUT_DIR or ./profiles
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 250;
  options.tail_policy = std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(40));  // slow ones take 60 ms of CPU; the rest 0.5 ms
  options.uploaders = {files};
  spanprof::start(options);

  std::mutex mutex;
  std::vector<std::string> slow_spans;
  double sink = 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(100 + w);
      double local = 0;
      for (int request = 0; request < 200; ++request) {
        const auto span = example::random_span(rng);
        const bool miss = request % 100 == 37;
        if (miss) {
          std::lock_guard<std::mutex> lock(mutex);
          slow_spans.push_back(span.span_id.to_hex());
        }
        local += handle_inventory(span, miss);
      }
      std::lock_guard<std::mutex> lock(mutex);
      sink += local;
    });
  }
  for (auto& t : workers) t.join();
  spanprof::flush();

  const auto stats = spanprof::stats();
  std::printf("requests: 400, slow: %zu, profiles started: %llu, kept (slow): %llu, discarded: %llu\n",
              slow_spans.size(), static_cast<unsigned long long>(stats.profiles_started),
              static_cast<unsigned long long>(stats.kept_slow),
              static_cast<unsigned long long>(stats.discarded_by_tail_policy));
  for (const auto& id : slow_spans) std::printf("slow span %s\n", id.c_str());
  std::printf("profiles in %s (open with: go tool pprof -tags FILE)\n", files->directory().c_str());
  spanprof::shutdown();
  return sink == 42 ? 2 : 0;
}
