// Small helpers the examples share: request ids, CPU-time budgets, the file uploader.
#pragma once

#include <spanprof/spanprof.hpp>

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
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

// The file uploader the options already have (the environment adds one when
// SPANPROF_OUTPUT_DIR is set beside a backend), or a new one into
// options.output_directory: the examples print where profiles were written.
inline std::shared_ptr<spanprof::FileUploader> file_uploader(spanprof::Options& options) {
  for (const auto& uploader : options.uploaders)
    if (auto files = std::dynamic_pointer_cast<spanprof::FileUploader>(uploader)) return files;
  auto files = std::make_shared<spanprof::FileUploader>(options.output_directory);
  options.uploaders.push_back(files);
  return files;
}

}  // namespace example
