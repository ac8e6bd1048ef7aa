// Small helpers the examples share: request ids, CPU-time budgets, the file uploader.
#pragma once

#include <spanprof/spanprof.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>
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

// Where a profile's CPU went: its n hottest innermost frames (a function inlined
// at the sampled address, with its source line when spanprof has them), with their
// share of the samples in percent.
inline std::vector<std::pair<std::string, double>> top_functions(const spanprof::Profile& profile, std::size_t n) {
  std::map<std::string, std::int64_t> self;
  std::int64_t total = 0;
  for (const auto& sample : profile.samples) {
    if (sample.location_ids.empty()) continue;
    // The innermost frame: a function inlined at the sampled address, if any, with
    // its source line when spanprof has them (built with libdw and -g).
    const auto& leaf = profile.locations[sample.location_ids.front() - 1];
    const std::uint64_t function_id = leaf.inlined.empty() ? leaf.function_id : leaf.inlined.front().function_id;
    const std::int64_t line = leaf.inlined.empty() ? leaf.line : leaf.inlined.front().line;
    std::string name = function_id ? profile.functions[function_id - 1].name : std::string("(unknown)");
    if (function_id && line > 0) {
      const std::string& file = profile.functions[function_id - 1].filename;
      name += "  " + file.substr(file.rfind('/') + 1) + ":" + std::to_string(line);
    }
    self[name] += sample.values[0];
    total += sample.values[0];
  }
  std::vector<std::pair<std::string, double>> ranked;
  for (const auto& [name, count] : self) ranked.emplace_back(name, total ? 100.0 * count / total : 0.0);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (ranked.size() > n) ranked.resize(n);
  return ranked;
}

}  // namespace example
