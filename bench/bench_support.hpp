// Small helpers the benchmarks share.
#pragma once

#include <cstdlib>

namespace bench {

// Long-running benchmarks read their length from the environment, so CI can run
// them briefly (scripts/test.sh) and a person at length.
inline double seconds_from_environment(const char* name, double fallback) {
  const char* text = std::getenv(name);
  return text && *text ? std::atof(text) : fallback;
}

// A count from the environment, at least 1: CI's smoke run of the benchmarks takes
// fewer of the slow ones (each iteration burns milliseconds of CPU on purpose).
inline long count_from_environment(const char* name, long fallback) {
  const char* text = std::getenv(name);
  const long value = text && *text ? std::atol(text) : fallback;
  return value < 1 ? 1 : value;
}

}  // namespace bench
