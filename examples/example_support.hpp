// Small helpers the examples share: request ids and CPU-time budgets.
#pragma once

#include <spanprof/spanprof.hpp>

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>

namespace example {

// A traceparent header with random ids, as a client would send.
inline std::string random_traceparent(std::mt19937_64& rng) {
  char header[56];
  std::snprintf(header, sizeof header, "00-%016llx%016llx-%016llx-01", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()), static_cast<unsigned long long>(rng() | 1));
  return header;
}

inline spanprof::SpanContext random_span(std::mt19937_64& rng) {
  return spanprof::parse_traceparent(random_traceparent(rng)).context;
}

// Work is measured in this thread's CPU time, so profiles are comparable however
// busy the machine is.
inline std::int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

}  // namespace example
