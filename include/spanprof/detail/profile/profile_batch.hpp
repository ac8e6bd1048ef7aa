// Merges the raw profiles of many spans (of one kind) into one profile, before
// symbolization: identical (stack, span) samples become one sample with summed
// values, and every sample keeps its own span's labels. One span's profile merges
// its repeated stacks the same way (a span with 151 samples in 2 stacks is 2
// samples).
//
// The batch also keeps the figures delivery cuts on: distinct samples, and an
// estimate of the encoded size (pprof's uncompressed bytes, from above), so a
// window can be sent before it outgrows a backend's limits.
//
// The process's continuous profile (Options::continuous) is a batch too: its raw
// profiles (ProfileReason::continuous) are a span's samples, or those outside any
// span (no ids), and each span keeps one record for all its samples of the window.
#ifndef SPANPROF_DETAIL_PROFILE_PROFILE_BATCH_HPP_
#define SPANPROF_DETAIL_PROFILE_PROFILE_BATCH_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/profile/profile_builder.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class ProfileBatch {
 public:
  bool empty() const noexcept { return !started_; }
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
      started_ = true;
      kind_ = raw.kind;
      period_ = period_of(raw);
      if (!fixed_window_) {
        start_ns_ = raw.start_unix_ns;
        end_ns_ = raw.start_unix_ns + raw.duration_ns;
      }
    }
    if (!fixed_window_) {
      start_ns_ = std::min(start_ns_, raw.start_unix_ns);
      end_ns_ = std::max(end_ns_, raw.start_unix_ns + raw.duration_ns);
    }
    const std::uint32_t span = span_of(raw);  // 1 + its record's index; 0: none
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
      const Key key{span, stack->second, sample.thread_state, label_set_of(sample.labels)};
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

  // A window of the clock rather than of its spans' times (the continuous
  // profile's): what window_record() says, whatever is added.
  void set_window(std::int64_t start_unix_ns, std::int64_t end_unix_ns) noexcept {
    fixed_window_ = true;
    start_ns_ = start_unix_ns;
    end_ns_ = end_unix_ns;
  }

  // The record of the window as a whole: its kind, period, engines and time span;
  // no span's ids or name (each sample has its own span's).
  SpanRecord window_record() const {
    SpanRecord window;
    window.reason = continuous_ ? ProfileReason::continuous : ProfileReason::sampled;
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
      samples.push_back({stack_list_[entry.key.stack], &entry.values, entry.key.span, entry.key.state,
                         entry.key.labels != 0 ? &label_sets_[entry.key.labels - 1] : nullptr});
    return builder.build(window_record(), samples, spans_, comments);
  }

  std::uint64_t dropped_samples() const noexcept { return dropped_samples_; }
  const std::string& engine() const noexcept { return engine_; }

 private:
  struct Key {
    std::uint32_t span;   // 1 + the index of its record in spans_; 0: none
    std::uint32_t stack;  // index into stack_list_
    ThreadState state;    // a wall sample's: samples of one stack in two states stay apart
    std::uint32_t labels;  // 1 + the index of its own labels in label_sets_; 0: none
    bool operator==(const Key& other) const noexcept {
      return span == other.span && stack == other.stack && state == other.state && labels == other.labels;
    }
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return static_cast<std::size_t>(
          ((static_cast<std::uint64_t>(key.span) << 32 | key.stack) ^ static_cast<std::uint64_t>(key.state) << 30 ^
           static_cast<std::uint64_t>(key.labels) << 40) *
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

  // The record `raw`'s samples go under: its own, or for the continuous profile the
  // one its span already has in this batch (none outside any span).
  std::uint32_t span_of(const RawProfile& raw) {
    if (raw.reason == ProfileReason::continuous) {
      continuous_ = true;
      if (!raw.span.span_id.valid()) return 0;
      std::string key(reinterpret_cast<const char*>(raw.span.trace_id.bytes().data()), TraceId::size);
      key.append(reinterpret_cast<const char*>(raw.span.span_id.bytes().data()), SpanId::size);
      key += raw.span_name;
      const auto [it, inserted] = continuous_spans_.try_emplace(std::move(key), 0);
      if (!inserted) return it->second;
      it->second = add_record(raw);
      return it->second;
    }
    return add_record(raw);
  }

  // A sample's own labels (a lock sample's), stored once per distinct set: samples
  // with other labels stay apart. 0: none.
  std::uint32_t label_set_of(const std::vector<Label>& labels) {
    if (labels.empty()) return 0;
    std::string key;
    for (const Label& label : labels) {
      key += label.key;
      key += '\0';
      key += label.is_num ? std::to_string(label.num) : label.str;
      key += '\0';
    }
    const auto [it, inserted] = label_set_index_.try_emplace(std::move(key), 0);
    if (inserted) {
      label_sets_.push_back(labels);
      it->second = static_cast<std::uint32_t>(label_sets_.size());
      for (const Label& label : labels) estimated_bytes_ += 16 + label.key.size() + label.str.size();
    }
    return it->second;
  }

  std::uint32_t add_record(const RawProfile& raw) {
    spans_.push_back(raw);  // the record, without its stacks
    // A span's labels: two ids, a name, a reason (keys are shared strings).
    estimated_bytes_ += 80 + raw.span_name.size();
    return static_cast<std::uint32_t>(spans_.size());
  }

  static std::int64_t period_of(const RawProfile& raw) noexcept {
    return raw.kind == ProfileKind::heap ? raw.heap_interval_bytes : raw.period_ns;
  }

  bool started_ = false;
  bool fixed_window_ = false;  // set_window()
  bool continuous_ = false;    // the continuous profile's
  ProfileKind kind_ = ProfileKind::cpu;
  std::int64_t period_ = 0;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;
  std::size_t estimated_bytes_ = 0;
  std::uint64_t dropped_samples_ = 0;
  std::string engine_;
  std::vector<SpanRecord> spans_;
  std::unordered_map<std::string, std::uint32_t> continuous_spans_;  // ids and name -> 1 + index
  std::unordered_map<std::vector<std::uintptr_t>, std::uint32_t, StackHash> stacks_;
  std::vector<const std::vector<std::uintptr_t>*> stack_list_;  // node-based map: stable keys
  std::unordered_map<Key, std::size_t, KeyHash> index_;
  std::vector<Entry> samples_;  // in order of first appearance
  std::unordered_set<std::uintptr_t> addresses_;
  std::unordered_map<std::string, std::uint32_t> label_set_index_;  // label_set_of's key -> 1 + index
  std::deque<std::vector<Label>> label_sets_;  // stable while samples point at them
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_PROFILE_PROFILE_BATCH_HPP_
