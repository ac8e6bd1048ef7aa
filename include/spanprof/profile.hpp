// The profile data model, between capture and encoding.
//
// RawProfile is what a request thread hands over: span identity, timing and the
// sampled stacks as bare program counters. Profile is the symbolized form, shaped
// like pprof's profile.proto so encoders translate it field by field.
#ifndef SPANPROF_PROFILE_HPP_
#define SPANPROF_PROFILE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span_context.hpp>

#include <cstdint>
#include <string>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

enum class ProfileKind : std::uint8_t { cpu, heap };

constexpr std::string_view to_string(ProfileKind kind) noexcept {
  return kind == ProfileKind::cpu ? "cpu" : "heap";
}

// One sampled stack. `frames` runs from the innermost frame outwards. Frame 0 is
// the exact interrupted instruction; the others are return addresses.
struct RawSample {
  std::vector<std::int64_t> values;  // one per sample type, e.g. {1, period_ns}
  std::vector<std::uintptr_t> frames;
};

struct RawProfile {
  ProfileKind kind = ProfileKind::cpu;
  SpanContext span;
  std::string span_name;
  std::int64_t start_unix_ns = 0;  // wall clock at guard open
  std::int64_t duration_ns = 0;    // wall time the guard was open
  std::int64_t period_ns = 0;      // CPU time one sample stands for
  std::uint64_t dropped_samples = 0;  // samples lost to a full buffer
  std::string engine;              // "sampling:perf_event", "classic", ...
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
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_HPP_
