// The heap profile text gperftools' GetHeapProfile() returns (the classic heap
// engine reads one after every profiled scope), through the parser and through
// the worker's conversion that scales sampled (heap_v2) counts.
//
// Invariants: accepted text, written back in gperftools' own layout, parses to the
// same samples, period and maps text; counts are never negative and a bucket with
// all four zero is dropped; a bucket has 1..4096 frames; the maps text is the
// input's tail; a rejection names its 1-based line and leaves nothing behind.
// The worker's scaled values are never negative, also for counts whose scaled
// product passes int64 (they saturate).
#include "fuzz_support.hpp"

#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/detail/capture/gperftools_heap_profile.hpp>

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace {

using spanprof::detail::LegacyHeapProfile;

std::string write_back(const LegacyHeapProfile& profile) {
  char line[128];
  std::string out = "heap profile:    0:        0 [     0:        0] @ ";
  out += profile.sample_period > 0 ? "heap_v2/" + std::to_string(profile.sample_period) : std::string("heapprofile");
  out += '\n';
  for (const auto& sample : profile.samples) {
    std::snprintf(line, sizeof line, "%6" PRId64 ": %8" PRId64 " [%6" PRId64 ": %8" PRId64 "] @", sample.values[2],
                  sample.values[3], sample.values[0], sample.values[1]);
    out += line;
    for (const std::uintptr_t pc : sample.frames) {
      std::snprintf(line, sizeof line, " 0x%016" PRIxPTR, pc);
      out += line;
    }
    out += '\n';
  }
  return out + "\nMAPPED_LIBRARIES:\n" + profile.maps_text;
}

bool same(const LegacyHeapProfile& a, const LegacyHeapProfile& b) {
  if (a.sample_period != b.sample_period || a.maps_text != b.maps_text || a.samples.size() != b.samples.size())
    return false;
  for (std::size_t i = 0; i < a.samples.size(); ++i)
    if (a.samples[i].values != b.samples[i].values || a.samples[i].frames != b.samples[i].frames) return false;
  return true;
}

void fuzz_one(std::string_view input) {
  const std::string text(input);

  LegacyHeapProfile profile;
  if (const spanprof::Status parsed = spanprof::detail::parse_legacy_heap_profile(text, profile); !parsed) {
    SPANPROF_FUZZ_CHECK(parsed.message().rfind("legacy heap profile: line ", 0) == 0);
    SPANPROF_FUZZ_CHECK(profile.samples.empty() && profile.maps_text.empty() && profile.sample_period == 0);
    return;
  }
  SPANPROF_FUZZ_CHECK(profile.sample_period >= 0);
  SPANPROF_FUZZ_CHECK(text.size() >= profile.maps_text.size() &&
                      text.compare(text.size() - profile.maps_text.size(), std::string::npos, profile.maps_text) == 0);
  std::size_t frames = 0;
  for (const auto& sample : profile.samples) {
    SPANPROF_FUZZ_CHECK(sample.values.size() == 4);
    SPANPROF_FUZZ_CHECK(sample.values[0] >= 0 && sample.values[1] >= 0 && sample.values[2] >= 0 &&
                        sample.values[3] >= 0);
    SPANPROF_FUZZ_CHECK((sample.values[0] | sample.values[1] | sample.values[2] | sample.values[3]) != 0);
    SPANPROF_FUZZ_CHECK(!sample.frames.empty() && sample.frames.size() <= spanprof::detail::legacy_heap_max_pcs);
    frames += sample.frames.size();
  }
  // "0x" and a digit, then a blank: memory stays proportional to the input.
  SPANPROF_FUZZ_CHECK(frames <= text.size() / 4);

  LegacyHeapProfile again;
  SPANPROF_FUZZ_CHECK(spanprof::detail::parse_legacy_heap_profile(write_back(profile), again).is_ok());
  SPANPROF_FUZZ_CHECK(same(profile, again));

  spanprof::RawProfile raw;
  SPANPROF_FUZZ_CHECK(spanprof::detail::read_gperftools_heap_text(text, raw));
  SPANPROF_FUZZ_CHECK(raw.samples.size() == profile.samples.size());
  for (const auto& sample : raw.samples)
    for (const std::int64_t value : sample.values) SPANPROF_FUZZ_CHECK(value >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
