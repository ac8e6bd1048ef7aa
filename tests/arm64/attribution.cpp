// Run by scripts/arm64.sh in an aarch64 VM (a real arm64 kernel under
// qemu-system-aarch64, tests/arm64/init/init.cpp), built statically for it (twice: as it is, and
// with frame pointers, attribution_frame_pointers.cpp). Eight threads, each in its
// own spans with its own hot function, sampled on the default source: each span's
// profile must hold its own function on top, as on x86-64. It prints one line per
// span and its verdict.
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include "vm.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

// Outside the anonymous namespace: their names are what a span is checked against.
__attribute__((noinline)) double hot_sum(long n) {
  volatile double x = 0;
  for (long i = 0; i < n; ++i) x = x + static_cast<double>(i) * 0.5;
  return x;
}
__attribute__((noinline)) double hot_product(long n) {
  volatile double x = 1;
  for (long i = 0; i < n; ++i) x = x * 1.0000001 + 1;
  return x;
}
__attribute__((noinline)) std::uint64_t hot_hash(long n) {
  volatile std::uint64_t h = 14695981039346656037ull;
  for (long i = 0; i < n; ++i) h = (h ^ static_cast<std::uint64_t>(i)) * 1099511628211ull;
  return h;
}
__attribute__((noinline)) std::uint64_t hot_shift(long n) {
  volatile std::uint64_t s = 88172645463325252ull;
  for (long i = 0; i < n; ++i) s = s ^ (s << 13) ^ (s >> 7) ^ (s << 17);
  return s;
}
__attribute__((noinline)) double hot_divide(long n) {
  volatile double x = 1e300;
  for (long i = 0; i < n; ++i) x = x / 1.0000001 + 1e-300;
  return x;
}
__attribute__((noinline)) std::uint64_t hot_multiply(long n) {
  volatile std::uint64_t m = 3;
  for (long i = 0; i < n; ++i) m = m * 6364136223846793005ull + 1442695040888963407ull;
  return m;
}
__attribute__((noinline)) double hot_polynomial(long n) {
  volatile double y = 0;
  for (long i = 0; i < n; ++i) {
    const double t = static_cast<double>(i & 1023) * 1e-3;
    y = y + ((0.5 * t + 0.25) * t + 0.125) * t;
  }
  return y;
}
__attribute__((noinline)) std::uint64_t hot_rotate(long n) {
  volatile std::uint64_t r = 0x9E3779B97F4A7C15ull;
  for (long i = 0; i < n; ++i) r = ((r << 7) | (r >> 57)) + static_cast<std::uint64_t>(i);
  return r;
}

namespace {

struct Tally {
  std::int64_t own = 0;
  std::int64_t all = 0;
  std::map<std::string, std::int64_t> elsewhere;  // leaf function -> samples not in the span's own
};

}  // namespace

int main() {
  const char* names[] = {"hot_sum",    "hot_product",  "hot_hash",       "hot_shift",
                         "hot_divide", "hot_multiply", "hot_polynomial", "hot_rotate"};
  std::mutex mutex;
  std::map<std::string, Tally> spans;  // span name -> its samples
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = 250;
  arm64_vm::tally_profiles(
      options, mutex, [](const spanprof::SpanRecord&) {},
      [&](const arm64_vm::SampleSeen& sample) {
        if (sample.functions.empty()) return;
        const std::string& span = sample.span.span_name;
        const std::string_view leaf = sample.functions.front();
        Tally& tally = spans[span];
        tally.all += sample.values.at(0);
        if (arm64_vm::names_function(leaf, span)) tally.own += sample.values.at(0);
        else tally.elsewhere[leaf.empty() ? "(unnamed)" : std::string(leaf)] += sample.values.at(0);
      });
  const auto started = spanprof::start(options);
  for (const auto& problem : started.problems) std::printf("spanprof: %s\n", problem.message.c_str());

  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t, &names] {
      for (int i = 0; i < 2; ++i) {
        std::array<std::uint8_t, 16> trace{};
        std::array<std::uint8_t, 8> id{};
        trace[15] = 1;
        id[7] = static_cast<std::uint8_t>(1 + t * 2 + i);
        const spanprof::SpanContext span{spanprof::TraceId(trace), spanprof::SpanId(id),
                                         spanprof::TraceFlags{spanprof::TraceFlags::sampled_bit}};
        spanprof::ScopedProfile guard(spanprof::NamedSpan{span, names[t]});
        // About a quarter of a second of emulated CPU each (qemu's TCG runs them
        // at different speeds): ~50 samples a span at 250 Hz.
        switch (t) {
          case 0: hot_sum(10'000'000); break;
          case 1: hot_product(10'000'000); break;
          case 2: hot_hash(30'000'000); break;
          case 3: hot_shift(15'000'000); break;
          case 4: hot_divide(10'000'000); break;
          case 5: hot_multiply(30'000'000); break;
          case 6: hot_polynomial(7'000'000); break;
          default: hot_rotate(20'000'000); break;
        }
      }
    });
  for (std::thread& thread : threads) thread.join();
  spanprof::flush(std::chrono::seconds(30));
  spanprof::shutdown();

  // Every span at least 95 % its own, all of them together at least 99 %.
  bool pass = spans.size() == 8;
  std::int64_t own = 0, all = 0;
  for (const auto& [span, tally] : spans) {
    own += tally.own;
    all += tally.all;
    const double share = tally.all > 0 ? static_cast<double>(tally.own) / static_cast<double>(tally.all) : 0.0;
    std::printf("spanprof-arm64: span %s: %lld samples, %.1f %% in its own function\n", span.c_str(),
                static_cast<long long>(tally.all), 100.0 * share);
    for (const auto& [function, samples] : tally.elsewhere)
      std::printf("spanprof-arm64:   elsewhere: %s %lld\n", function.c_str(), static_cast<long long>(samples));
    pass = pass && tally.all >= 20 && share >= 0.95;
  }
  const double share = all > 0 ? static_cast<double>(own) / static_cast<double>(all) : 0.0;
  std::printf("spanprof-arm64: all spans: %lld samples, %.2f %% in their own function\n", static_cast<long long>(all),
              100.0 * share);
  pass = pass && share >= 0.99;
  return arm64_vm::finish(pass);
}
