// The legacy CPU profile gperftools' ProfilerStop() writes (the classic engine reads
// one after every profiled scope).
//
// Invariants: an accepted file writes back to exactly its own bytes from what the
// parser kept (header, records, trailer, maps text), so nothing is dropped,
// invented or reordered; values are {count >= 1, count * period in ns} with
// 1..4096 frames; a rejection says why and leaves nothing behind.
#include "fuzz_support.hpp"

#include <spanprof/detail/capture/gperftools_cpu_profile.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace {

void put_word(std::string& out, std::uint64_t word) {
  char bytes[8];
  std::memcpy(bytes, &word, sizeof bytes);  // native order, as ProfilerStop writes
  out.append(bytes, sizeof bytes);
}

std::string write_back(const spanprof::detail::LegacyCpuProfile& profile) {
  std::string out;
  for (std::uint64_t word : {0ull, 3ull, 0ull, static_cast<unsigned long long>(profile.period_us), 0ull})
    put_word(out, word);
  for (const auto& sample : profile.samples) {
    put_word(out, static_cast<std::uint64_t>(sample.values[0]));
    put_word(out, sample.frames.size());
    for (const std::uintptr_t pc : sample.frames) put_word(out, pc);
  }
  for (std::uint64_t word : {0ull, 1ull, 0ull}) put_word(out, word);
  return out + profile.maps_text;
}

void fuzz_one(std::string_view bytes) {
  spanprof::detail::LegacyCpuProfile profile;
  if (const spanprof::Status parsed = spanprof::detail::parse_legacy_cpu_profile(bytes, profile); !parsed) {
    SPANPROF_FUZZ_CHECK(parsed.message().rfind("legacy cpu profile: ", 0) == 0);
    SPANPROF_FUZZ_CHECK(profile.samples.empty() && profile.maps_text.empty() && profile.period_us == 0);
    return;
  }
  SPANPROF_FUZZ_CHECK(profile.period_us >= 1 && profile.period_us <= 1000000);
  std::size_t frames = 0;
  for (const auto& sample : profile.samples) {
    SPANPROF_FUZZ_CHECK(sample.values.size() == 2);
    SPANPROF_FUZZ_CHECK(sample.values[0] >= 1);
    SPANPROF_FUZZ_CHECK(sample.values[1] / 1000 / profile.period_us == sample.values[0]);
    SPANPROF_FUZZ_CHECK(!sample.frames.empty() && sample.frames.size() <= spanprof::detail::legacy_cpu_max_pcs);
    frames += sample.frames.size();
  }
  // Every kept frame is a word of the input: memory stays proportional to it.
  SPANPROF_FUZZ_CHECK(frames <= bytes.size() / 8);
  SPANPROF_FUZZ_CHECK(write_back(profile) == bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
