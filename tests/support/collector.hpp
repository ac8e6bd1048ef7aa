// Starts spanprof with an uploader that keeps every profile, decoded from the
// bytes that were really encoded, and records what reaches the error channel.
#pragma once

#include "catch.hpp"
#include "pprof_reader.hpp"

#include <spanprof/spanprof.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace spanprof_test {

// Names a profiler should never show: the suffixes compilers give function copies.
inline bool has_clone_suffix(const std::string& name) {
  for (const char* suffix : {"[clone", ".isra.", ".constprop.", ".part.", ".cold"})
    if (name.find(suffix) != std::string::npos) return true;
  return false;
}

// The adaptive trigger as the trigger tests set it up: it times every span the
// head sampler declines (which is every span: nothing is profiled unless
// triggered), arms after 16 of a name, and profiles that name's next 3.
inline std::shared_ptr<spanprof::AdaptiveTrigger> profile_only_when_triggered(spanprof::Options& options) {
  spanprof::AdaptiveTriggerOptions trigger_options;
  trigger_options.min_observations = 16;
  trigger_options.observe_one_in = 1;
  trigger_options.spans_to_profile = 3;
  auto trigger = std::make_shared<spanprof::AdaptiveTrigger>(trigger_options);
  options.head_sampler = std::make_shared<spanprof::NeverSampler>();
  options.trigger = trigger;
  return trigger;
}

struct CollectedProfile {
  spanprof::EncodedProfile meta;
  std::string pprof_gzip;  // the bytes the uploader was given
  spanprof::Profile decoded;
};

class Collector {
 public:
  // Restarts spanprof with `options` plus the collecting uploader.
  explicit Collector(spanprof::Options options = {}) {
    state_ = std::make_shared<State>();
    auto state = state_;
    uploader_ = std::make_shared<spanprof::CallbackUploader>(
        [state](const spanprof::EncodedProfile& p, std::string_view pprof_gzip) {
          CollectedProfile c;
          c.meta = p;
          c.pprof_gzip.assign(pprof_gzip.data(), pprof_gzip.size());
          pprof_test::DecodedPprof decoded;
          std::string error;
          if (!pprof_test::decode_pprof(c.pprof_gzip, decoded, error)) {
            return spanprof::UploadResult::permanent("test decoder: " + error);
          }
          c.decoded = std::move(decoded.profile);
          std::lock_guard<std::mutex> lock(state->mutex);
          for (const auto& function : c.decoded.functions)
            if (has_clone_suffix(function.name)) state->clone_named.push_back(function.name);
          state->profiles.push_back(std::move(c));
          return spanprof::UploadResult::ok();
        },
        "collector");
    spanprof::set_error_handler([state](const spanprof::Error& e) {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->errors.emplace_back(e.code, std::string(e.message));
    });
    restart(std::move(options));
  }

  // Starts spanprof again with new options, still collecting into this object.
  void restart(spanprof::Options options) {
    options.uploaders.push_back(uploader_);
    spanprof::start(std::move(options));
  }

  ~Collector() {
    spanprof::shutdown(std::chrono::seconds(5));
    // Every profile any test collects: one function, one name (clone suffixes stripped).
    std::vector<std::string> clone_named;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      clone_named = state_->clone_named;
    }
    try {
      if (!clone_named.empty()) WARN("a function name with a clone suffix: " << clone_named.front());
      CHECK(clone_named.empty());
    } catch (...) {
      // Outside a test case (a child-process scenario) Catch has nowhere to record
      // the check: say it where the parent reads the child's output.
      if (!clone_named.empty()) std::printf("a function name with a clone suffix: %s\n", clone_named.front().c_str());
    }
    spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
  }

  std::vector<CollectedProfile> profiles() {
    spanprof::flush(std::chrono::seconds(30));
    std::lock_guard<std::mutex> lock(state_->mutex);
    return {state_->profiles.begin(), state_->profiles.end()};
  }

  const CollectedProfile* profile_for(const spanprof::SpanId& span) {
    spanprof::flush(std::chrono::seconds(30));
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (const auto& p : state_->profiles)
      if (p.meta.record.span.span_id == span) return &p;
    return nullptr;
  }

  // The span's profile of one kind (a guard for cpu | wall hands over two).
  const CollectedProfile* profile_for(const spanprof::SpanId& span, spanprof::ProfileKind kind) {
    spanprof::flush(std::chrono::seconds(30));
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (const auto& p : state_->profiles)
      if (p.meta.record.span.span_id == span && p.meta.record.kind == kind) return &p;
    return nullptr;
  }

  std::vector<std::pair<spanprof::ErrorCode, std::string>> errors() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->errors;
  }

  bool has_error(spanprof::ErrorCode code, const std::string& containing = {}) {
    for (const auto& [c, message] : errors())
      if (c == code && message.find(containing) != std::string::npos) return true;
    return false;
  }

 private:
  struct State {
    std::mutex mutex;
    // A deque: profile_for() hands out pointers that the worker thread's later
    // push_back must neither move nor invalidate.
    std::deque<CollectedProfile> profiles;
    std::vector<std::pair<spanprof::ErrorCode, std::string>> errors;
    std::vector<std::string> clone_named;  // function names that kept a clone suffix
  };
  std::shared_ptr<State> state_;  // shared with the callbacks, which may outlive us
  std::shared_ptr<spanprof::Uploader> uploader_;
};

// A span context with distinct, valid ids derived from n.
inline spanprof::SpanContext span_number(unsigned n) {
  char header[64];
  std::snprintf(header, sizeof header, "00-%016x%016x-%016x-01", 0xabc00000u + n, n + 1, 0x5000u + n);
  return spanprof::parse_traceparent(header).context;
}

inline double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Fraction of a profile's CPU samples whose innermost frame is `function`.
// The leaf is the sampled instruction's location: `function`, or a function the
// compiler inlined into it there (with source lines, pprof names those too).
// The hot functions below read their thread's CPU clock, a system call, between
// rounds of work; on a saturated machine the timer's signal is often delivered at
// that call's return, so a sample's leaf is the clock read the function made. The
// leaf is the first frame that is not that read: the function's own time, which
// is what a user looking for it on top would count. A frame is a function of a
// location: the read is often inlined into the hot function, one location for both.
inline bool is_test_clock_read(const std::string& frame) {
  return frame.find("clock_gettime") != std::string::npos || frame.find("thread_cpu_seconds") != std::string::npos;
}

inline double share_of_leaf(const spanprof::Profile& profile, const std::string& function) {
  std::map<std::uint64_t, std::string> names;
  for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
  std::int64_t total = 0, hits = 0;
  for (const auto& sample : profile.samples) {
    total += sample.values[0];
    std::string leaf;
    for (auto id = sample.location_ids.begin(); id != sample.location_ids.end() && leaf.empty(); ++id) {
      std::istringstream frames(names[*id]);  // innermost first, one per line
      for (std::string frame; std::getline(frames, frame);) {
        if (!is_test_clock_read(frame)) {
          leaf = frame;
          break;
        }
      }
    }
    if (leaf.find(function) != std::string::npos) hits += sample.values[0];
  }
  return total ? static_cast<double>(hits) / static_cast<double>(total) : 0.0;
}

// "leaf: count" for every innermost frame, most frequent first: a failed share
// check says what the other samples were.
inline std::string leaf_summary(const spanprof::Profile& profile) {
  std::map<std::string, std::int64_t> counts;
  for (const auto& sample : profile.samples) counts[pprof_test::leaf_function(profile, sample)] += sample.values[0];
  std::vector<std::pair<std::string, std::int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text = "leaves:";
  for (const auto& entry : sorted) text += " " + entry.first + ": " + std::to_string(entry.second) + ";";
  return text;
}

// The whole stacks (innermost first) of the samples without `function` on them,
// with their counts: a failed share check says where the rest of the samples were.
inline std::string stacks_without(const spanprof::Profile& profile, const std::string& function) {
  std::map<std::uint64_t, std::string> names;
  for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
  std::string text = "stacks without " + function + ":";
  for (const auto& sample : profile.samples) {
    std::string stack;
    for (auto id : sample.location_ids) stack += names[id] + (names[id].empty() || names[id].back() == '\n' ? "" : "\n");
    if (stack.find(function) != std::string::npos) continue;
    text += "\n[" + std::to_string(sample.values[0]) + "]\n" + stack;
  }
  return text;
}

// Fraction of samples with `function` anywhere on the stack, by the value at
// `value_index` (0: sample counts; 1: CPU or wall nanoseconds).
inline double share_on_stack(const spanprof::Profile& profile, const std::string& function,
                             std::size_t value_index = 0) {
  std::int64_t total = 0, hits = 0;
  std::map<std::uint64_t, std::string> names;
  for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
  for (const auto& sample : profile.samples) {
    total += sample.values[value_index];
    for (auto id : sample.location_ids) {
      if (names[id].find(function) != std::string::npos) {
        hits += sample.values[value_index];
        break;
      }
    }
  }
  return total ? static_cast<double>(hits) / static_cast<double>(total) : 0.0;
}

// Defines a function that burns `cpu_seconds` of this thread's CPU under its own
// name, for tests that look for that name in profiles. Use it inside an anonymous
// namespace (internal linkage: finding the name proves .symtab is read). Each body
// differs by a __COUNTER__ constant: the suites are compiled in unity batches, and
// identical functions in one translation unit would be folded into one name.
#define SPANPROF_TEST_HOT_FUNCTION(name)                                          \
  __attribute__((noinline)) double name(double cpu_seconds) {                     \
    const double end = spanprof_test::thread_cpu_seconds() + cpu_seconds;         \
    volatile double x = 1.0;                                                      \
    do {                                                                          \
      for (int i = 0; i < 20000; ++i) x = x * 1.0000001 + 1e-9 * (1 + __COUNTER__); \
    } while (spanprof_test::thread_cpu_seconds() < end);                          \
    return x;                                                                     \
  }

inline std::int64_t sample_count(const spanprof::Profile& profile) {
  std::int64_t total = 0;
  for (const auto& sample : profile.samples) total += sample.values[0];
  return total;
}

// The sum of every sample's value at `value_index`.
inline std::int64_t value_total(const spanprof::Profile& profile, std::size_t value_index) {
  std::int64_t total = 0;
  for (const auto& sample : profile.samples) total += sample.values.at(value_index);
  return total;
}

}  // namespace spanprof_test
