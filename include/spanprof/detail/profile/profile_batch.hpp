// Merges the raw profiles of many spans (of one kind) into one profile, before
// symbolization: identical (stack, span) samples become one sample with summed
// values, and every sample keeps its own span's labels. One span's profile merges
// its repeated stacks the same way (a span with 151 samples in 2 stacks is 2
// samples).
//
// The batch also keeps the figures delivery cuts on: distinct samples, and an
// estimate of the encoded size (pprof's uncompressed bytes, from above), so a
// window can be sent before it outgrows a backend's limits.
#ifndef SPANPROF_DETAIL_PROFILE_PROFILE_BATCH_HPP_
#define SPANPROF_DETAIL_PROFILE_PROFILE_BATCH_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/profile/profile_builder.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class ProfileBatch {
 public:
  bool empty() const noexcept { return spans_.empty(); }
  std::size_t span_count() const noexcept { return spans_.size(); }
  std::size_t sample_count() const noexcept { return samples_.size(); }  // distinct (stack, span)
  std::size_t estimated_bytes() const noexcept { return estimated_bytes_; }
  ProfileKind kind() const noexcept { return kind_; }
  std::int64_t period() const noexcept { return period_; }
  std::int64_t start_unix_ns() const noexcept { return start_ns_; }
  std::int64_t end_unix_ns() const noexcept { return end_ns_; }
  const std::vector<SpanRecord>& spans() const noexcept { return spans_; }

  // Whether `raw` can join this batch: the same kind and sampling period (a
  // profile has one period; a restart with another frequency starts a new batch).
  bool accepts(const RawProfile& raw) const noexcept {
    return empty() || (raw.kind == kind_ && period_of(raw) == period_);
  }

  // Adds every sample of `raw` under its span. May throw std::bad_alloc.
  void add(const RawProfile& raw) {
    if (empty()) {
      kind_ = raw.kind;
      period_ = period_of(raw);
      start_ns_ = raw.start_unix_ns;
      end_ns_ = raw.start_unix_ns + raw.duration_ns;
    }
    start_ns_ = std::min(start_ns_, raw.start_unix_ns);
    end_ns_ = std::max(end_ns_, raw.start_unix_ns + raw.duration_ns);
    const auto span = static_cast<std::uint32_t>(spans_.size());
    spans_.push_back(raw);  // the record, without its stacks
    // A span's labels: two ids, a name, a reason (keys are shared strings).
    estimated_bytes_ += 80 + raw.span_name.size();
    dropped_samples_ += raw.dropped_samples;
    if (!raw.engine.empty() && engine_.find(raw.engine) == std::string::npos)
      engine_ += (engine_.empty() ? "" : ",") + raw.engine;
    for (const RawSample& sample : raw.samples) {
      // Stacks are stored once: the spans of a service share most of theirs.
      const auto [stack, new_stack] = stacks_.try_emplace(sample.frames, static_cast<std::uint32_t>(stack_list_.size()));
      if (new_stack) {
        stack_list_.push_back(&stack->first);
        for (const std::uintptr_t pc : sample.frames)
          if (addresses_.insert(pc).second) estimated_bytes_ += 64;  // a location, its function, a name
      }
      const Key key{span, stack->second, sample.thread_state};
      auto [it, inserted] = index_.try_emplace(key, samples_.size());
      if (inserted) {
        samples_.push_back(Entry{key, sample.values});
        // A sample: its location ids, values and four label references.
        estimated_bytes_ += 24 + 2 * sample.frames.size() + 6 * sample.values.size();
      } else {
        std::vector<std::int64_t>& values = samples_[it->second].values;
        for (std::size_t i = 0; i < values.size() && i < sample.values.size(); ++i) values[i] += sample.values[i];
      }
    }
  }

  // The record of the window as a whole: its kind, period, engines and time span;
  // no span's ids or name (each sample has its own span's).
  SpanRecord window_record() const {
    SpanRecord window;
    window.kind = kind_;
    window.period_ns = kind_ != ProfileKind::heap ? period_ : 0;
    window.heap_interval_bytes = kind_ == ProfileKind::heap ? period_ : 0;
    window.start_unix_ns = start_ns_;
    window.duration_ns = end_ns_ - start_ns_;
    window.engine = engine_;
    return window;
  }

  // The merged profile, symbolized. Every sample belongs to its span's record.
  Profile build(ProfileBuilder& builder, const std::vector<std::string>& comments) const {
    std::vector<ProfileBuilder::Sample> samples;
    samples.reserve(samples_.size());
    for (const Entry& entry : samples_)
      samples.push_back({stack_list_[entry.key.stack], &entry.values, entry.key.span + 1, entry.key.state});
    return builder.build(window_record(), samples, spans_, comments);
  }

  std::uint64_t dropped_samples() const noexcept { return dropped_samples_; }
  const std::string& engine() const noexcept { return engine_; }

 private:
  struct Key {
    std::uint32_t span;
    std::uint32_t stack;  // index into stack_list_
    ThreadState state;    // a wall sample's: samples of one stack in two states stay apart
    bool operator==(const Key& other) const noexcept {
      return span == other.span && stack == other.stack && state == other.state;
    }
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return static_cast<std::size_t>(
          ((static_cast<std::uint64_t>(key.span) << 32 | key.stack) ^ static_cast<std::uint64_t>(key.state) << 30) *
          0x9E3779B97F4A7C15ull);
    }
  };
  struct StackHash {
    std::size_t operator()(const std::vector<std::uintptr_t>& frames) const noexcept {
      std::uint64_t h = 0xcbf29ce484222325ull;
      for (const std::uintptr_t pc : frames) h = (h ^ pc) * 0x100000001B3ull;
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };
  struct Entry {
    Key key;
    std::vector<std::int64_t> values;
  };

  static std::int64_t period_of(const RawProfile& raw) noexcept {
    return raw.kind == ProfileKind::heap ? raw.heap_interval_bytes : raw.period_ns;
  }

  ProfileKind kind_ = ProfileKind::cpu;
  std::int64_t period_ = 0;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;
  std::size_t estimated_bytes_ = 0;
  std::uint64_t dropped_samples_ = 0;
  std::string engine_;
  std::vector<SpanRecord> spans_;
  std::unordered_map<std::vector<std::uintptr_t>, std::uint32_t, StackHash> stacks_;
  std::vector<const std::vector<std::uintptr_t>*> stack_list_;  // node-based map: stable keys
  std::unordered_map<Key, std::size_t, KeyHash> index_;
  std::vector<Entry> samples_;  // in order of first appearance
  std::unordered_set<std::uintptr_t> addresses_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_PROFILE_PROFILE_BATCH_HPP_
