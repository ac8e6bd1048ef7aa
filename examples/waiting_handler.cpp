// Where did a slow request's time go? A handler that computes, then waits for a
// lock another thread holds, then waits for a slow backend. Its CPU profile shows
// only the computing; its wall-clock profile (spanprof::wall) shows all of its
// elapsed time, the waiting included, function by function.
//
// Each request is profiled with `spanprof::cpu | spanprof::wall`. The profiles are
// written as files (SPANPROF_OUTPUT_DIR, default ./profiles) and, through a second
// uploader, summed here by phase, so the program prints where the time went.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <chrono>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

// The lock a background refresher holds most of the time: requests queue on it.
std::mutex inventory_mutex;

__attribute__((noinline)) double compute_quote(std::int64_t cpu_ns) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  double price = 1.0;
  while (example::thread_cpu_ns() < end)
    for (int i = 1; i < 5000; ++i) price += 1.0 / (i * 3.0);
  return price;
}

__attribute__((noinline)) void wait_for_inventory_lock() {
  std::lock_guard<std::mutex> lock(inventory_mutex);
  asm volatile("");  // not a tail call: this frame stays on the stack while it waits
}

__attribute__((noinline)) void call_pricing_backend() {
  std::this_thread::sleep_for(40ms);  // a downstream call that takes 40 ms
  asm volatile("");
}

double handle_quote(const spanprof::SpanContext& span) {
  spanprof::ScopedProfile guard(span, "GET /quote", spanprof::cpu | spanprof::wall);
  const double price = compute_quote(20'000'000);  // 20 ms of CPU
  wait_for_inventory_lock();
  call_pricing_backend();
  return price;
}

// The phases a sample is charged to: the outermost of these functions on its stack.
constexpr const char* phases[] = {"compute_quote", "wait_for_inventory_lock", "call_pricing_backend"};

struct Totals {
  std::map<std::string, std::int64_t> wall_ns, cpu_ns;  // by phase
  std::int64_t elapsed_ns = 0;
  int requests = 0;
};

// Sums the profile's time value by phase (the uploader runs off the request thread).
void add_profile(Totals& totals, const spanprof::SpanRecord& record, const spanprof::Profile& profile) {
  std::map<std::uint64_t, std::string> function_of_location;
  std::map<std::uint64_t, const std::string*> function_names;
  for (const auto& function : profile.functions) function_names[function.id] = &function.name;
  for (const auto& location : profile.locations) {
    auto name = function_names.find(location.function_id);
    if (name != function_names.end()) function_of_location[location.id] = *name->second;
  }
  auto& into = record.kind == spanprof::ProfileKind::wall ? totals.wall_ns : totals.cpu_ns;
  if (record.kind == spanprof::ProfileKind::wall) {
    totals.elapsed_ns += record.duration_ns;
    ++totals.requests;
  }
  for (const auto& sample : profile.samples) {
    std::string phase = "elsewhere";
    for (auto id = sample.location_ids.rbegin(); id != sample.location_ids.rend(); ++id) {
      const std::string& function = function_of_location[*id];
      for (const char* name : phases)
        if (function.find(name) != std::string::npos) phase = name;
      if (phase != "elsewhere") break;
    }
    into[phase] += sample.values.at(1);  // {samples, ns}
  }
}

}  // namespace

int main() {
  spanprof::Options options;
  if (!std::getenv("SPANPROF_WALL_FREQUENCY")) options.wall_frequency_hz = 500;  // ~50 samples per request
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 500;
  auto files = example::file_uploader(options);
  std::mutex totals_mutex;
  Totals totals;
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [&](const spanprof::EncodedProfile& p, std::string_view, const spanprof::UploadContext& context) {
        if (context.profile == nullptr) return spanprof::UploadResult::ok();  // sent again from a spool: no model
        std::lock_guard<std::mutex> lock(totals_mutex);
        add_profile(totals, p.record, *context.profile);
        return spanprof::UploadResult::ok();
      }));
  spanprof::start(options);

  // The refresher: holds the inventory lock for 30 ms, lets go for 2 ms.
  std::atomic<bool> done{false};
  std::thread refresher([&] {
    while (!done.load()) {
      {
        std::lock_guard<std::mutex> lock(inventory_mutex);
        std::this_thread::sleep_for(30ms);
      }
      std::this_thread::sleep_for(2ms);
    }
  });

  double sink = 0;
  std::vector<std::thread> workers;
  std::mutex sink_mutex;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(7 + w);
      double local = 0;
      for (int request = 0; request < 5; ++request) local += handle_quote(example::random_span(rng));
      std::lock_guard<std::mutex> lock(sink_mutex);
      sink += local;
    });
  }
  for (auto& t : workers) t.join();
  done = true;
  refresher.join();
  spanprof::flush();

  std::lock_guard<std::mutex> lock(totals_mutex);
  std::printf("%d requests, %.1f ms each on average. Where the time went:\n\n", totals.requests,
              totals.requests ? static_cast<double>(totals.elapsed_ns) / totals.requests / 1e6 : 0.0);
  std::printf("  %-26s %12s %12s\n", "", "wall (ms)", "cpu (ms)");
  std::int64_t wall_sum = 0;
  for (const char* name : {"compute_quote", "wait_for_inventory_lock", "call_pricing_backend", "elsewhere"}) {
    const auto wall = totals.wall_ns[name], cpu = totals.cpu_ns[name];
    wall_sum += wall;
    std::printf("  %-26s %12.1f %12.1f\n", name, static_cast<double>(wall) / 1e6, static_cast<double>(cpu) / 1e6);
  }
  std::printf("  %-26s %12.1f   (the spans' elapsed time: %.1f ms)\n\n", "total", static_cast<double>(wall_sum) / 1e6,
              static_cast<double>(totals.elapsed_ns) / 1e6);
  std::printf("The CPU profile sees only compute_quote; the wall profile shows the waits.\n");
  std::printf("profiles in %s (*-wall.pb.gz, *-cpu.pb.gz; open with: go tool pprof -top FILE)\n",
              files->directory().c_str());
  spanprof::shutdown();
  return sink == 42 ? 2 : 0;
}
