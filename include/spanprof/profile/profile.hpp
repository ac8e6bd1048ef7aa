// The profile data model, between capture and encoding.
//
// RawProfile is what a request thread hands over: span identity, timing and the
// sampled stacks as bare program counters. Profile is the symbolized form, shaped
// like pprof's profile.proto so encoders translate it field by field.
#ifndef SPANPROF_PROFILE_PROFILE_HPP_
#define SPANPROF_PROFILE_PROFILE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span/span_context.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

// Why a profile was kept; written into every kept profile as the `profile_reason`
// label.
enum class ProfileReason : std::uint8_t {
  sampled,    // the head sampler chose the span and the tail policy kept it as such
  slow,       // the span lasted at least the slow threshold
  error,      // the span failed: an exception left the scope, or it was marked
  triggered,  // the adaptive trigger asked for spans of this name
};
inline constexpr std::size_t profile_reason_count = 4;

constexpr std::string_view to_string(ProfileReason reason) noexcept {
  switch (reason) {
    case ProfileReason::sampled: return "sampled";
    case ProfileReason::slow: return "slow";
    case ProfileReason::error: return "error";
    case ProfileReason::triggered: return "triggered";
  }
  return "unknown";
}

// What a profile measures: CPU time, allocations, or wall-clock time (where the
// span's elapsed time went, waiting included).
enum class ProfileKind : std::uint8_t { cpu, heap, wall };
inline constexpr std::size_t profile_kind_count = 3;

constexpr std::string_view to_string(ProfileKind kind) noexcept {
  switch (kind) {
    case ProfileKind::cpu: return "cpu";
    case ProfileKind::heap: return "heap";
    case ProfileKind::wall: return "wall";
  }
  return "unknown";
}

// Which profiles a guard records: `spanprof::cpu`, `spanprof::heap`,
// `spanprof::wall` or any union, e.g. `spanprof::cpu | spanprof::wall`. A scope
// profiled for several yields one profile of each kind, with the same span labels.
class ProfileKinds {
 public:
  constexpr ProfileKinds() noexcept = default;
  constexpr ProfileKinds(ProfileKind kind) noexcept : bits_(bit(kind)) {}  // NOLINT: a kind is a set of one

  constexpr bool contains(ProfileKind kind) const noexcept { return (bits_ & bit(kind)) != 0; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  friend constexpr ProfileKinds operator|(ProfileKinds a, ProfileKinds b) noexcept {
    return ProfileKinds(static_cast<std::uint8_t>(a.bits_ | b.bits_));
  }
  friend constexpr bool operator==(ProfileKinds a, ProfileKinds b) noexcept { return a.bits_ == b.bits_; }
  friend constexpr bool operator!=(ProfileKinds a, ProfileKinds b) noexcept { return a.bits_ != b.bits_; }

 private:
  constexpr explicit ProfileKinds(std::uint8_t bits) noexcept : bits_(bits) {}
  static constexpr std::uint8_t bit(ProfileKind kind) noexcept {
    return static_cast<std::uint8_t>(1u << static_cast<unsigned>(kind));
  }
  std::uint8_t bits_ = 0;
};

inline constexpr ProfileKinds cpu{ProfileKind::cpu};
inline constexpr ProfileKinds heap{ProfileKind::heap};
inline constexpr ProfileKinds wall{ProfileKind::wall};

// One sampled stack. `frames` runs from the innermost frame outwards. In CPU and
// wall profiles frame 0 is the exact interrupted instruction and the others are return
// addresses; in heap profiles every frame is a return address (frame 0 is the call
// into the allocator).
struct RawSample {
  // One per sample type: CPU {samples, cpu ns}; wall {samples, wall ns}; heap
  // {alloc_objects, alloc_space, inuse_objects, inuse_space}.
  std::vector<std::int64_t> values;
  std::vector<std::uintptr_t> frames;
};

struct RawProfile {
  ProfileKind kind = ProfileKind::cpu;
  SpanContext span;
  std::string span_name;
  std::int64_t start_unix_ns = 0;  // wall clock at guard open
  std::int64_t duration_ns = 0;    // wall time the guard was open
  std::int64_t period_ns = 0;      // CPU: CPU time one sample stands for; wall: the mean wall interval
  std::int64_t heap_interval_bytes = 0;  // mean bytes between heap samples; 0: every allocation
  std::uint64_t dropped_samples = 0;  // samples lost to a full buffer
  std::string engine;              // "sampling:perf_event", "classic", ...
  ProfileReason reason = ProfileReason::sampled;  // why it was kept
  std::vector<RawSample> samples;
};

// ---- symbolized form (mirrors profile.proto; indices are 1-based ids) ----------

struct ValueType {
  std::string type;
  std::string unit;
};

struct Label {
  std::string key;
  std::string str;           // set for string labels
  std::int64_t num = 0;      // used when str is empty and is_num is true
  std::string num_unit;
  bool is_num = false;
};

struct Mapping {
  std::uint64_t id = 0;
  std::uint64_t memory_start = 0;
  std::uint64_t memory_limit = 0;
  std::uint64_t file_offset = 0;
  std::string filename;
  std::string build_id;  // lowercase hex of the GNU build id note
  bool has_functions = false;
};

struct Function {
  std::uint64_t id = 0;
  std::string name;         // demangled
  std::string system_name;  // as in the symbol table
  std::string filename;
};

struct Location {
  std::uint64_t id = 0;
  std::uint64_t mapping_id = 0;   // 0: no mapping known
  std::uint64_t address = 0;
  std::uint64_t function_id = 0;  // 0: not symbolized
};

struct Sample {
  std::vector<std::uint64_t> location_ids;  // innermost first
  std::vector<std::int64_t> values;
  std::vector<Label> labels;
  // Labels shared by many samples (a span's, in a profile that merges spans):
  // Profile::label_sets[label_set - 1]; 0 for none. A sample's labels are
  // `labels` followed by these (for_each_label() visits both).
  std::uint32_t label_set = 0;
};

struct Profile {
  std::vector<ValueType> sample_types;
  std::vector<Sample> samples;
  std::vector<Mapping> mappings;
  std::vector<Location> locations;
  std::vector<Function> functions;
  std::int64_t time_nanos = 0;
  std::int64_t duration_nanos = 0;
  ValueType period_type;
  std::int64_t period = 0;
  std::vector<std::string> comments;
  std::string default_sample_type;
  std::vector<std::vector<Label>> label_sets;  // see Sample::label_set
};

// Calls `visit(const Label&)` for each label of `sample`: its own, then its set's.
template <class Visit>
void for_each_label(const Profile& profile, const Sample& sample, Visit&& visit) {
  for (const Label& label : sample.labels) visit(label);
  if (sample.label_set != 0 && sample.label_set <= profile.label_sets.size())
    for (const Label& label : profile.label_sets[sample.label_set - 1]) visit(label);
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_PROFILE_HPP_
