// What both server benchmarks share (server_bench.cpp over HTTP, grpc_bench.cpp
// over gRPC): the handler's work, ~100 µs of CPU on this machine class (JSON-like
// text rendered, parsed back and sorted, so that a request costs what a small real
// handler does and the profiler's share is read against it), and the process CPU
// clock their control endpoint reports.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

namespace bench {

inline std::int64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline std::uint64_t next_random(std::uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// The state requests share, as a real handler's cache or counters do: each request
// records its result under one std::mutex, so that requests on different threads
// now and then wait for each other (what a lock profile sees).
struct SharedStats {
  std::mutex mutex;
  std::uint64_t requests = 0;
  double medians[64] = {};
};
inline SharedStats shared_stats;

__attribute__((noinline)) inline void record_median(double median) {
  std::lock_guard<std::mutex> held(shared_stats.mutex);
  shared_stats.medians[shared_stats.requests++ % 64] = median;
}

// The handler's work: ~100 µs of CPU on this machine class.
__attribute__((noinline)) inline std::string render_numbers(std::uint64_t& random) {
  std::string body = "{\"values\":[";
  char number[32];
  for (int i = 0; i < 400; ++i) {
    const double value = static_cast<double>(next_random(random) % 1000000) / 7.0;
    std::snprintf(number, sizeof number, i == 0 ? "%.4f" : ",%.4f", value);
    body += number;
  }
  body += "]}";
  return body;
}

__attribute__((noinline)) inline std::vector<double> parse_numbers(const std::string& body) {
  std::vector<double> values;
  values.reserve(400);
  const char* at = std::strchr(body.c_str(), '[');
  while (at != nullptr && *at != ']') {
    char* end = nullptr;
    values.push_back(std::strtod(at + 1, &end));
    at = end;
  }
  return values;
}

__attribute__((noinline)) inline std::string handle_work() {
  thread_local std::uint64_t random = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(::gettid());
  std::string body = render_numbers(random);
  std::vector<double> values = parse_numbers(body);
  std::sort(values.begin(), values.end());
  const double median = values.empty() ? 0.0 : values[values.size() / 2];
  record_median(median);
  char summary[96];
  std::snprintf(summary, sizeof summary, "{\"count\":%zu,\"median\":%.4f}\n", values.size(), median);
  return summary;
}

}  // namespace bench
