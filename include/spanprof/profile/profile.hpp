// The profile data model, between capture and encoding.
//
// SpanRecord is one span's profile as the guard describes it: built once when the
// guard closes, then carried as is by batching, both encoders, the spool and every
// uploader (the ids stay bytes until an encoder writes them). RawProfile is a
// record with the sampled stacks as bare program counters; Profile is the
// symbolized form, shaped like pprof's profile.proto so encoders translate it
// field by field, with the records of the spans its samples belong to.
#ifndef SPANPROF_PROFILE_PROFILE_HPP_
#define SPANPROF_PROFILE_PROFILE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/time_split.hpp>
#include <spanprof/span/span_context.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

// Why a profile was kept; written into every kept profile as the `profile_reason`
// label.
enum class ProfileReason : std::uint8_t {
  sampled,    // the head sampler chose the span and the tail policy kept it as such
  slow,       // the span lasted at least the slow threshold
  error,      // the span failed: an exception left the scope, or it was marked
  triggered,  // the adaptive trigger asked for spans of this name
  // Not a decision: the span labels samples of the process's continuous profile
  // (Options::continuous), where it is no profile of its own.
  continuous,
};
inline constexpr std::size_t profile_reason_count = 5;
// The reasons a tail decision gives (all but continuous), each with its kept_* counter.
inline constexpr std::size_t keep_reason_count = 4;

constexpr std::string_view to_string(ProfileReason reason) noexcept {
  switch (reason) {
    case ProfileReason::sampled: return "sampled";
    case ProfileReason::slow: return "slow";
    case ProfileReason::error: return "error";
    case ProfileReason::triggered: return "triggered";
    case ProfileReason::continuous: return "continuous";
  }
  return "unknown";
}

// What a profile measures: CPU time, allocations, wall-clock time (where the
// span's elapsed time went, waiting included), or lock contention (the span's waits
// for a mutex another thread held, and the waits it caused while it held one).
enum class ProfileKind : std::uint8_t { cpu, heap, wall, lock };
inline constexpr std::size_t profile_kind_count = 4;

constexpr std::string_view to_string(ProfileKind kind) noexcept {
  switch (kind) {
    case ProfileKind::cpu: return "cpu";
    case ProfileKind::heap: return "heap";
    case ProfileKind::wall: return "wall";
    case ProfileKind::lock: return "lock";
  }
  return "unknown";
}

// Which profiles a guard records: `spanprof::cpu`, `spanprof::heap`,
// `spanprof::wall`, `spanprof::lock` or any union, e.g. `spanprof::cpu | spanprof::wall`. A scope
// profiled for several yields one profile of each kind, with the same span labels.
class ProfileKinds {
 public:
  constexpr ProfileKinds() noexcept = default;
  constexpr ProfileKinds(ProfileKind kind) noexcept : bits_(bit(kind)) {}  // NOLINT: a kind is a set of one

  constexpr bool contains(ProfileKind kind) const noexcept { return (bits_ & bit(kind)) != 0; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  constexpr ProfileKinds without(ProfileKind kind) const noexcept {
    return ProfileKinds(static_cast<std::uint8_t>(bits_ & ~bit(kind)));
  }
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
inline constexpr ProfileKinds lock{ProfileKind::lock};

// Where a thread stood when the wall ticker looked at it: on a core, runnable but
// waiting for one (preempted, or woken and not yet scheduled), or blocked (asleep,
// on a lock, in I/O). Wall samples carry it as the thread_state label, so
// `go tool pprof -tagfocus=thread_state=runnable` shows where a span stood preempted.
enum class ThreadState : std::uint8_t { unknown, running, runnable, blocked };

constexpr std::string_view to_string(ThreadState state) noexcept {
  switch (state) {
    case ThreadState::running: return "running";
    case ThreadState::runnable: return "runnable";
    case ThreadState::blocked: return "blocked";
    case ThreadState::unknown: break;
  }
  return "unknown";
}

// A sample's label, as pprof's Sample.label: a string or a number.
struct Label {
  std::string key;
  std::string str;           // set for string labels
  std::int64_t num = 0;      // used when str is empty and is_num is true
  std::string num_unit;
  bool is_num = false;
};

// One sampled stack. `frames` runs from the innermost frame outwards. In CPU and
// wall profiles frame 0 is the exact interrupted instruction and the others are return
// addresses; in heap profiles every frame is a return address (frame 0 is the call
// into the allocator).
struct RawSample {
  // One per sample type: CPU {samples, cpu ns}; wall {samples, wall ns}; heap
  // {alloc_objects, alloc_space, inuse_objects, inuse_space}; lock {contentions, delay ns}.
  std::vector<std::int64_t> values;
  std::vector<std::uintptr_t> frames;
  ThreadState thread_state = ThreadState::unknown;  // wall samples: where the thread stood at the tick
  std::vector<Label> labels;  // lock samples: which side of the wait it is, and who held the lock
};

// One span's profile, described once. RawProfile and EncodedProfile (uploader.hpp)
// are this record plus what their stage adds; batching keeps one per span; the
// spool stores every field (spool_format.hpp fails to compile when one is added).
struct SpanRecord {
  ProfileKind kind = ProfileKind::cpu;
  SpanContext span;                // the ids, as bytes
  std::string span_name;
  ProfileReason reason = ProfileReason::sampled;  // why it was kept
  std::int64_t start_unix_ns = 0;  // wall clock at guard open
  std::int64_t duration_ns = 0;    // wall time the guard was open
  std::int64_t period_ns = 0;      // CPU: CPU time one sample stands for; wall: the mean wall interval
  std::int64_t heap_interval_bytes = 0;  // mean bytes between heap samples; 0: every allocation
  std::string engine;              // "sampling:perf_event", "classic", ...
  TimeSplit time;                  // where its elapsed time went (Options::time_split)
};

// What a request thread hands over: the record and its stacks.
struct RawProfile : SpanRecord {
  std::uint64_t dropped_samples = 0;  // samples lost to a full buffer
  std::vector<RawSample> samples;
};

// ---- symbolized form (mirrors profile.proto; indices are 1-based ids) ----------

struct ValueType {
  std::string type;
  std::string unit;
};

struct Mapping {
  std::uint64_t id = 0;
  std::uint64_t memory_start = 0;
  std::uint64_t memory_limit = 0;
  std::uint64_t file_offset = 0;
  std::string filename;
  std::string build_id;  // lowercase hex of the GNU build id note
  std::string htl_hash;  // OpenTelemetry's file id (OTLP only: pprof has no field for it)
  bool has_functions = false;
  bool has_filenames = false;
  bool has_line_numbers = false;
  bool has_inline_frames = false;
};

struct Function {
  std::uint64_t id = 0;
  std::string name;         // demangled
  std::string system_name;  // as in the symbol table
  std::string filename;
  std::int64_t start_line = 0;
};

// A function inlined at a location, and its line there.
struct Line {
  std::uint64_t function_id = 0;
  std::int64_t line = 0;
};

struct Location {
  std::uint64_t id = 0;
  std::uint64_t mapping_id = 0;   // 0: no mapping known
  std::uint64_t address = 0;
  std::uint64_t function_id = 0;  // 0: not symbolized
  std::int64_t line = 0;          // in function_id's file; 0: unknown
  // The functions inlined into function_id at the address, innermost first: in
  // pprof, the Location's lines before its last (function_id, line).
  std::vector<Line> inlined{};  // (an initializer: brace-initialized Locations of four fields stay warning-free)
};

struct Sample {
  std::vector<std::uint64_t> location_ids;  // innermost first
  std::vector<std::int64_t> values;
  std::vector<Label> labels;  // its own; its span's follow (for_each_label)
  // The span it belongs to: Profile::spans[span - 1]; 0 for none.
  std::uint32_t span = 0;
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
  // The spans the samples belong to (Sample::span): one for a span's profile,
  // every span of a window for a batched one.
  std::vector<SpanRecord> spans;
};

namespace detail {
// The labels a span gives each of its samples; Pyroscope and Grafana match on
// these names.
inline constexpr const char* trace_id_label = "trace_id";
inline constexpr const char* span_id_label = "span_id";
inline constexpr const char* span_name_label = "span_name";
inline constexpr const char* profile_reason_label = "profile_reason";
inline constexpr const char* thread_state_label = "thread_state";  // wall samples' own (ThreadState)
// A lock sample's own (docs/locks.md): which side of the wait it is, and who held
// the lock, in which span, and where.
inline constexpr const char* lock_role_label = "lock_role";
inline constexpr const char* holder_thread_label = "holder_thread";
inline constexpr const char* holder_span_id_label = "holder_span_id";
inline constexpr const char* holder_trace_id_label = "holder_trace_id";
inline constexpr const char* holder_span_name_label = "holder_span_name";
inline constexpr const char* holder_function_label = "holder_function";
inline constexpr const char* holder_location_label = "holder_location";
// A raw lock sample's, numeric and repeated: the addresses where the holder
// released the lock, innermost first, which the profile builder turns into
// holder_function and holder_location.
inline constexpr const char* holder_frame_label = "holder_frame";

// Whether a function is the standard library's or the C library's: namespace std,
// pthread_*, and the names reserved to the implementation (__gthread_*,
// __glibcxx_*, __gnu_cxx::). Where a lock was held, and where it was waited for,
// is the first frame that is not, whether std::mutex's code was inlined there or not.
inline bool is_library_function(std::string_view name) noexcept {
  for (const std::string_view prefix : {"std::", "__", "pthread_"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  return false;
}
}  // namespace detail

// The record `sample` belongs to, or null.
inline const SpanRecord* span_of(const Profile& profile, const Sample& sample) noexcept {
  return sample.span != 0 && sample.span <= profile.spans.size() ? &profile.spans[sample.span - 1] : nullptr;
}

// Calls `visit(key, value)` with each label a span gives its samples, its ids in
// lowercase hex: where the record's bytes become text, for the encoders.
template <class Visit>
void for_each_span_label(const SpanRecord& record, Visit&& visit) {
  visit(detail::trace_id_label, std::string_view(record.span.trace_id.to_hex()));
  visit(detail::span_id_label, std::string_view(record.span.span_id.to_hex()));
  if (!record.span_name.empty()) visit(detail::span_name_label, std::string_view(record.span_name));
  // A continuous profile's samples carry their span and nothing else: a backend
  // such as Pyroscope makes every other sample label a series label.
  if (record.reason != ProfileReason::continuous) visit(detail::profile_reason_label, to_string(record.reason));
}

// Calls `visit(const Label&)` for each label of `sample`: its own, then its span's.
template <class Visit>
void for_each_label(const Profile& profile, const Sample& sample, Visit&& visit) {
  for (const Label& label : sample.labels) visit(label);
  if (const SpanRecord* record = span_of(profile, sample)) {
    for_each_span_label(*record, [&](const char* key, std::string_view value) {
      Label label;
      label.key = key;
      label.str = std::string(value);
      visit(static_cast<const Label&>(label));
    });
  }
}

// Gives every sample its span's labels as its own and forgets the records: for a
// caller that rewrites labels (Pyroscope's drop and rename) before encoding.
inline void materialize_span_labels(Profile& profile) {
  for (Sample& sample : profile.samples) {
    if (const SpanRecord* record = span_of(profile, sample)) {
      for_each_span_label(*record, [&](const char* key, std::string_view value) {
        Label label;
        label.key = key;
        label.str = std::string(value);
        sample.labels.push_back(std::move(label));
      });
    }
    sample.span = 0;
  }
  profile.spans.clear();
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_PROFILE_HPP_
