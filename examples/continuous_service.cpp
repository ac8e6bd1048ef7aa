// The whole process, all the time: a service whose request threads serve requests
// in spans while a background thread (a cache refresh) burns CPU in none. With
// Options::continuous every thread is sampled, and the process's CPU profile comes
// out once per window, each sample taken in a span labelled with it. At the end it
// prints each window's CPU by span name, "outside any span" included, with the top
// functions of each, and where the window files are (open them with
// `go tool pprof -top FILE`, or `-tagfocus 'span_id=^...$'` for one request).
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using example::thread_cpu_ns;

// A request's hot code: pricing a cart.
__attribute__((noinline)) double price_cart(int ms) {
  const std::int64_t deadline = thread_cpu_ns() + ms * 1'000'000LL;
  double total = 0;
  while (thread_cpu_ns() < deadline)
    for (int i = 1; i < 20000; ++i) total += 1.0 / (i * 1.0001);
  return total;
}

// The background thread's: rebuilding a cache, in no span.
__attribute__((noinline)) std::uint64_t refresh_cache(int ms) {
  const std::int64_t deadline = thread_cpu_ns() + ms * 1'000'000LL;
  std::uint64_t h = 1469598103934665603ull;
  while (thread_cpu_ns() < deadline)
    for (int i = 0; i < 20000; ++i) h = (h ^ (h >> 29)) * 1099511628211ull;
  return h;
}

std::atomic<double> sink{0};

__attribute__((noinline)) void handle_checkout(const spanprof::SpanContext& span) {
  // A span of the request: here only a label of the continuous profile's samples
  // (the head sampler below profiles no span on its own).
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /checkout"});
  sink = sink + price_cart(40);
}

// What the example prints of each window: CPU by span name, and the top functions of each.
class WindowSummaries {
 public:
  explicit WindowSummaries(spanprof::Options& options, std::shared_ptr<spanprof::FileUploader> files)
      : files_(std::move(files)) {
    options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
        [this](const spanprof::EncodedProfile& p, std::string_view, const spanprof::UploadContext& context) {
          if (p.record.reason != spanprof::ProfileReason::continuous || context.profile == nullptr)
            return spanprof::UploadResult::ok();
          summarize(p, *context.profile);
          return spanprof::UploadResult::ok();
        },
        "window-summary"));
  }

  void print() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& text : printed_) std::printf("%s", text.c_str());
  }

 private:
  void summarize(const spanprof::EncodedProfile& p, const spanprof::Profile& profile) {
    // Each sample's span name ("outside any span" without one) and innermost function.
    std::map<std::string, std::map<std::string, std::int64_t>> by_span;
    std::map<std::string, std::int64_t> span_total;
    std::int64_t total = 0;
    for (const spanprof::Sample& sample : profile.samples) {
      std::string span = "outside any span";
      spanprof::for_each_label(profile, sample, [&](const spanprof::Label& label) {
        if (label.key == "span_name") span = label.str;
      });
      std::string leaf = "(unknown)";
      if (!sample.location_ids.empty()) {
        const spanprof::Location& location = profile.locations.at(sample.location_ids.front() - 1);
        const std::uint64_t function = location.inlined.empty() ? location.function_id : location.inlined.front().function_id;
        if (function != 0) leaf = profile.functions.at(function - 1).name;
      }
      by_span[span][leaf] += sample.values.at(1);
      span_total[span] += sample.values.at(1);
      total += sample.values.at(1);
    }
    std::string text;
    char line[256];
    std::snprintf(line, sizeof line, "window of %.0f s from %lld (unix ns): %.0f ms of CPU, %zu spans labelled\n",
                  static_cast<double>(p.record.duration_ns) / 1e9, static_cast<long long>(p.record.start_unix_ns),
                  static_cast<double>(total) / 1e6, p.span_count);
    text += line;
    for (const auto& [span, functions] : by_span) {
      std::snprintf(line, sizeof line, "  %-18s %5.1f%% of the process's CPU\n", span.c_str(),
                    total ? 100.0 * static_cast<double>(span_total[span]) / static_cast<double>(total) : 0.0);
      text += line;
      std::vector<std::pair<std::int64_t, std::string>> top;
      for (const auto& [function, cpu] : functions) top.emplace_back(cpu, function);
      std::sort(top.rbegin(), top.rend());
      for (std::size_t i = 0; i < top.size() && i < 3; ++i) {
        const std::string shown = top[i].second.size() > 70 ? top[i].second.substr(0, 67) + "..." : top[i].second;
        std::snprintf(line, sizeof line, "      %5.1f%%  %s\n",
                      100.0 * static_cast<double>(top[i].first) / static_cast<double>(span_total[span]), shown.c_str());
        text += line;
      }
    }
    text += "  file: " + files_->directory() + "/" + spanprof::FileUploader::file_name_for(p) + "\n";
    std::lock_guard<std::mutex> lock(mutex_);
    printed_.push_back(std::move(text));
  }

  std::shared_ptr<spanprof::FileUploader> files_;
  std::mutex mutex_;
  std::vector<std::string> printed_;
};

}  // namespace

int main() {
  spanprof::Options options;
  auto files = example::file_uploader(options);  // $SPANPROF_OUTPUT_DIR or ./profiles
  options.continuous = true;  // SPANPROF_CONTINUOUS=1 does the same
  // Spans are the continuous profile's labels here; no span is profiled on its own.
  options.head_sampler = std::make_shared<spanprof::NeverSampler>();
  WindowSummaries windows(options, files);
  spanprof::start(options);

  std::thread background([] { sink = sink + static_cast<double>(refresh_cache(600)); });
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([w] {
      std::mt19937_64 rng(4321 + w);
      for (int request = 0; request < 5; ++request) handle_checkout(example::random_span(rng));
    });
  }
  for (auto& t : workers) t.join();
  background.join();
  spanprof::flush();

  windows.print();
  const auto stats = spanprof::stats();
  std::printf("\n%llu samples in the continuous profile; spanprof's own threads left out: %llu\n",
              static_cast<unsigned long long>(stats.continuous_samples),
              static_cast<unsigned long long>(stats.continuous_threads_left_out));
  spanprof::shutdown();
  return 0;
}
