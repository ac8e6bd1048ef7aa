// What a guard hands to the background worker when its span closes, and how the
// worker turns it into a RawProfile. The request thread only copies bytes out of
// its log (or names a gperftools file); all parsing happens off the request path.
#ifndef SPANPROF_CAPTURE_CAPTURED_PROFILE_HPP_
#define SPANPROF_CAPTURE_CAPTURED_PROFILE_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/capture/gperftools_cpu_profile.hpp>
#include <spanprof/capture/gperftools_heap_profile.hpp>
#include <spanprof/capture/sample_records.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The span's identity and timing, plus exactly one of: packed records copied out
// of its thread's log (sampling engines, sample_records.hpp), the path of a
// gperftools CPU profile file, or the text of a gperftools heap profile (classic
// engines).
struct CapturedProfile {
  RawProfile profile;
  std::vector<std::uint64_t> packed_samples;
  std::string gperftools_cpu_file;  // deleted once read, or when the profile is dropped
  std::string gperftools_heap_text;
};

// A dropped hand-off must not leave its gperftools file behind.
inline void discard_captured_profile(CapturedProfile& captured) noexcept {
  if (!captured.gperftools_cpu_file.empty()) ::unlink(captured.gperftools_cpu_file.c_str());
}

inline bool read_gperftools_heap_text(const std::string& text, RawProfile& raw) {
  LegacyHeapProfile legacy;
  std::string error;
  if (!parse_legacy_heap_profile(text, legacy, error)) {
    report_error(ErrorCode::profiler_failed, "unreadable gperftools heap profile: " + error);
    return false;
  }
  raw.heap_interval_bytes = legacy.sample_period;
  raw.samples = std::move(legacy.samples);
  if (raw.heap_interval_bytes > 0) {
    // A sampled gperftools profile (heap_v2/<period>): scale each bucket by the
    // probability of its average allocation size, as pprof does for these files.
    for (RawSample& sample : raw.samples) {
      for (std::size_t pair = 0; pair + 1 < sample.values.size(); pair += 2) {
        const std::int64_t count = sample.values[pair];
        if (count <= 0) continue;
        const double scale = heap_sample_scale(static_cast<double>(sample.values[pair + 1]) / static_cast<double>(count),
                                               static_cast<double>(raw.heap_interval_bytes));
        sample.values[pair] = std::llround(static_cast<double>(count) * scale);
        sample.values[pair + 1] = std::llround(static_cast<double>(sample.values[pair + 1]) * scale);
      }
    }
  }
  return true;
}

inline bool read_gperftools_cpu_file(const std::string& path, RawProfile& raw) {
  constexpr std::size_t max_file_bytes = 256u << 20;
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      report_error(ErrorCode::profiler_failed, "cannot read gperftools profile " + path);
      return false;
    }
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(in.tellg());
    if (size < 0 || static_cast<std::size_t>(size) > max_file_bytes) {
      ::unlink(path.c_str());
      report_error(ErrorCode::profiler_failed, "gperftools profile too large or unreadable: " + path);
      return false;
    }
    in.seekg(0, std::ios::beg);
    bytes.resize(static_cast<std::size_t>(size));
    in.read(bytes.data(), size);
  }
  ::unlink(path.c_str());
  LegacyCpuProfile legacy;
  std::string error;
  if (!parse_legacy_cpu_profile(bytes, legacy, error)) {
    report_error(ErrorCode::profiler_failed, "unreadable gperftools profile: " + error);
    return false;
  }
  raw.period_ns = legacy.period_us * 1000;
  raw.samples = std::move(legacy.samples);
  return true;
}

// Fills captured.profile.samples from what the guard handed over and releases the
// packed form. False when nothing could be read (reported).
inline bool unpack_captured_profile(CapturedProfile& captured) {
  RawProfile& raw = captured.profile;
  bool ok = true;
  if (!captured.gperftools_cpu_file.empty()) {
    ok = read_gperftools_cpu_file(captured.gperftools_cpu_file, raw);
  } else if (!captured.gperftools_heap_text.empty()) {
    ok = read_gperftools_heap_text(captured.gperftools_heap_text, raw);
  } else if (raw.kind == ProfileKind::heap) {
    read_heap_handoff_records(captured.packed_samples, raw);
  } else {
    read_cpu_records(captured.packed_samples.data(), captured.packed_samples.size(), raw);
  }
  captured.packed_samples = {};
  captured.gperftools_heap_text = {};
  return ok;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_CAPTURE_CAPTURED_PROFILE_HPP_
