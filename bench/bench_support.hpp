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

}  // namespace bench
