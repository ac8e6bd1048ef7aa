// A small multi-threaded "service" with two handlers whose hot code differs.
// Every request arrives with a W3C traceparent; each handler profiles its own span.
// At the end it prints, per profiled span, its ids and where its CPU time went, and
// where the pprof files are (open them with `go tool pprof -top FILE`).
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---- the service's code ---------------------------------------------------------

// Each hot function runs for a fixed amount of this thread's CPU time.
using example::thread_cpu_ns;
inline std::int64_t cpu_deadline(int ms) { return thread_cpu_ns() + ms * 1'000'000LL; }
inline bool cpu_budget_left(std::int64_t deadline) { return thread_cpu_ns() < deadline; }

// Checkout's hot spots: pricing (floating point) and, smaller, a discount pass.
__attribute__((noinline)) double apply_discounts(double total, int ms) {
  const std::int64_t deadline = cpu_deadline(ms);
  while (cpu_budget_left(deadline))
    for (int i = 0; i < 20000; ++i) total = total * 0.9999999 + 0.5;
  return total;
}

__attribute__((noinline)) double add_taxes(double total, int ms) {
  const std::int64_t deadline = cpu_deadline(ms);
  while (cpu_budget_left(deadline))
    for (int i = 0; i < 20000; ++i) total += total * 1e-9 + 0.25;
  return total;
}

__attribute__((noinline)) double compute_prices(int ms) {
  double total = 0;
  const std::int64_t deadline = cpu_deadline(ms);
  while (cpu_budget_left(deadline))
    for (int i = 1; i < 20000; ++i) total += 1.0 / (i * 1.0001);
  total = apply_discounts(total, ms / 3);
  return add_taxes(total, ms / 5) - 1.0;
}

// Search's hot spot: scoring candidate documents by hashing, then sorting them.
__attribute__((noinline)) std::uint64_t rank_documents(int ms) {
  std::vector<std::uint64_t> scores;
  std::uint64_t h = 1469598103934665603ull;
  const std::int64_t deadline = cpu_deadline(ms);
  while (cpu_budget_left(deadline)) {
    for (int i = 0; i < 20000; ++i) h = (h ^ (h >> 29)) * 1099511628211ull;
    scores.push_back(h);
  }
  std::sort(scores.begin(), scores.end());
  return scores.empty() ? 0 : scores[scores.size() / 2];
}

std::atomic<double> sink{0};

__attribute__((noinline)) void handle_checkout(const spanprof::SpanContext& span) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /checkout"});
  sink = sink + compute_prices(150);
}

__attribute__((noinline)) void handle_search(const spanprof::SpanContext& span) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /search"});
  sink = sink + static_cast<double>(rank_documents(150));
}


}  // namespace

int main() {
  spanprof::Options options;
  auto files = example::file_uploader(options);  // $SPANPROF_OUTPUT_DIR or ./profiles
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 250;  // more samples in a short demo
  // Four workers on a machine of fewer cores wait for one: each span says how long.
  if (!std::getenv("SPANPROF_TIME_SPLIT")) options.time_split = true;
  example::ProfileSummaries summaries(options, files);
  spanprof::start(options);

  // Four worker threads serve requests concurrently, each profiling its own span.
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([w] {
      std::mt19937_64 rng(1234 + w);
      for (int request = 0; request < 3; ++request) {
        const auto parsed = spanprof::parse_traceparent(example::random_traceparent(rng));
        if (!parsed) continue;
        if ((w + request) % 2 == 0) handle_checkout(parsed.context);
        else handle_search(parsed.context);
      }
    });
  }
  for (auto& t : workers) t.join();
  spanprof::flush();

  summaries.print();
  const auto stats = spanprof::stats();
  std::printf("\n%zu profiles written to %s (sampling source: %s, %llu samples, %llu spans without samples)\n",
              summaries.size(), files->directory().c_str(), std::string(spanprof::to_string(stats.cpu_sample_source)).c_str(),
              static_cast<unsigned long long>(stats.samples_captured),
              static_cast<unsigned long long>(stats.spans_without_samples));
  spanprof::shutdown();
  return 0;
}
