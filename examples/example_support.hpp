// Small helpers the examples share: request ids, CPU-time budgets, the file uploader.
#pragma once

#include <spanprof/spanprof.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <string_view>

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

// What the examples print of every profile: an extra uploader, beside the files,
// remembers a summary of each, and print() lists them by span name.
class ProfileSummaries {
 public:
  struct Summary {
    std::string span_id, trace_id, name, file;
    std::size_t samples = 0;
    std::vector<std::pair<std::string, double>> top;  // function, share of CPU samples
    std::int64_t duration_ns = 0;
    spanprof::TimeSplit time;  // where the span's time went
  };

  // Adds the summarizing uploader to `options`; `files` names where each profile went.
  ProfileSummaries(spanprof::Options& options, std::shared_ptr<spanprof::FileUploader> files)
      : files_(std::move(files)) {
    options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
        [this](const spanprof::EncodedProfile& p, std::string_view, const spanprof::UploadContext& context) {
          Summary s{p.record.span.span_id.to_hex(), p.record.span.trace_id.to_hex(), p.record.span_name,
                    files_->directory() + "/" + spanprof::FileUploader::file_name_for(p), p.sample_count,
                    top_functions(*context.profile, 3), p.record.duration_ns, p.record.time};
          std::lock_guard<std::mutex> lock(mutex_);
          summaries_.push_back(std::move(s));
          return spanprof::UploadResult::ok();
        },
        "summary"));
  }

  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return summaries_.size();
  }

  // Each profile: its span's ids and name, where its CPU went, its time split when
  // measured, its file. Call after spanprof::flush().
  void print() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::sort(summaries_.begin(), summaries_.end(), [](const Summary& a, const Summary& b) { return a.name < b.name; });
    for (const auto& s : summaries_) {
      std::printf("span %s  trace %s  %-15s %3zu samples\n", s.span_id.c_str(), s.trace_id.c_str(), s.name.c_str(),
                  s.samples);
      for (const auto& [function, share] : s.top) {
        const std::string shown = function.size() > 90 ? function.substr(0, 87) + "..." : function;
        std::printf("    %5.1f%%  %s\n", share, shown.c_str());
      }
      if (s.time.measured()) {
        std::printf("    time: %.1f ms = running %.1f + waiting for a CPU %.1f + blocked %.1f ms "
                    "(%lld voluntary, %lld involuntary context switches)\n",
                    static_cast<double>(s.duration_ns) / 1e6, static_cast<double>(s.time.running_ns) / 1e6,
                    static_cast<double>(s.time.waiting_ns) / 1e6, static_cast<double>(s.time.blocked_ns) / 1e6,
                    static_cast<long long>(s.time.voluntary_switches), static_cast<long long>(s.time.involuntary_switches));
      }
      std::printf("    file: %s\n", s.file.c_str());
    }
  }

 private:
  std::shared_ptr<spanprof::FileUploader> files_;
  std::mutex mutex_;
  std::vector<Summary> summaries_;
};

}  // namespace example
