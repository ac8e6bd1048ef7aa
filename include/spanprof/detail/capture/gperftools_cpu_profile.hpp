// Reader for the file gperftools' ProfilerStart() writes: the "legacy" binary CPU
// profile. The classic engine profiles into such a file and converts it here.
//
// Layout, in native-endian 64-bit words:
//   header   0, 3, 0, period_us, 0      (header count, header words, version, period, padding)
//   records  count, npcs, pc1 .. pcN    (pc1 is the innermost frame)
//   trailer  0, 1, 0
//   then the text of /proc/self/maps at the time the profile was written.
//
// The file may be truncated (a crash mid-write) or not ours at all, so every read
// is bounds-checked and each rejection says what was wrong and where.
#ifndef SPANPROF_DETAIL_CAPTURE_GPERFTOOLS_CPU_PROFILE_HPP_
#define SPANPROF_DETAIL_CAPTURE_GPERFTOOLS_CPU_PROFILE_HPP_

#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct LegacyCpuProfile {
  std::int64_t period_us = 0;
  std::vector<RawSample> samples;  // values = {count, count * period_ns}; frames as written
  std::string maps_text;
};

// gperftools caps stacks at 64 frames; anything far beyond that is not its output.
inline constexpr std::uint64_t legacy_cpu_max_pcs = 4096;

class LegacyCpuProfileParser {
 public:
  static constexpr std::size_t word_size = 8;
  static constexpr std::size_t header_words = 5;
  static constexpr std::size_t trailer_words = 3;

  LegacyCpuProfileParser(std::string_view bytes, LegacyCpuProfile& out, std::string& error) noexcept
      : bytes_(bytes), out_(out), error_(error) {}

  bool parse() {
    out_ = LegacyCpuProfile{};
    if (!parse_header()) return false;
    const std::int64_t period_ns = out_.period_us * 1000;
    std::size_t offset = header_words * word_size;
    for (;;) {
      const std::size_t record_offset = offset;
      if (bytes_.size() - offset < 2 * word_size) {
        if (offset == bytes_.size()) return fail("missing trailer: the file ends after " +
                                                 std::to_string(out_.samples.size()) + " records");
        return fail("truncated record header at offset " + std::to_string(record_offset));
      }
      const std::uint64_t count = word_at(offset);
      const std::uint64_t npcs = word_at(offset + word_size);
      offset += 2 * word_size;
      if (npcs > legacy_cpu_max_pcs) {
        return fail("record at offset " + std::to_string(record_offset) + " claims " + std::to_string(npcs) +
                    " pcs (more than " + std::to_string(legacy_cpu_max_pcs) + ")");
      }
      // npcs <= 4096, so the multiplication cannot overflow.
      if ((bytes_.size() - offset) / word_size < npcs) {
        return fail("record at offset " + std::to_string(record_offset) + " with " + std::to_string(npcs) +
                    " pcs runs past the end of the file");
      }
      if (count == 0 && npcs == 1 && word_at(offset) == 0) {
        offset += word_size;
        break;  // the trailer
      }
      if (npcs == 0) {
        return fail("record at offset " + std::to_string(record_offset) + " has no pcs");
      }
      if (count == 0) {
        return fail("record at offset " + std::to_string(record_offset) + " has a zero count");
      }
      if (count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / period_ns)) {
        return fail("record at offset " + std::to_string(record_offset) + " has an implausible count " +
                    std::to_string(count));
      }
      RawSample sample;
      sample.values = {static_cast<std::int64_t>(count), static_cast<std::int64_t>(count) * period_ns};
      sample.frames.reserve(static_cast<std::size_t>(npcs));
      for (std::uint64_t i = 0; i < npcs; ++i, offset += word_size) {
        const std::uint64_t pc = word_at(offset);
        if (pc > std::numeric_limits<std::uintptr_t>::max()) {
          return fail("pc at offset " + std::to_string(offset) + " does not fit an address on this machine");
        }
        sample.frames.push_back(static_cast<std::uintptr_t>(pc));
      }
      out_.samples.push_back(std::move(sample));
    }
    out_.maps_text.assign(bytes_.data() + offset, bytes_.size() - offset);
    return true;
  }

 private:
  bool parse_header() {
    if (bytes_.size() < header_words * word_size) {
      return fail("too short for a CPU profile header: " + std::to_string(bytes_.size()) + " bytes, need " +
                  std::to_string(header_words * word_size));
    }
    const std::uint64_t header_count = word_at(0);
    const std::uint64_t header_size = word_at(word_size);
    const std::uint64_t version = word_at(2 * word_size);
    const std::uint64_t period_us = word_at(3 * word_size);
    const std::uint64_t padding = word_at(4 * word_size);
    if (header_count != 0 || header_size != 3) {
      if (byte_swapped(header_count) == 0 && byte_swapped(header_size) == 3) {
        return fail("bad header: the profile was written with the other byte order");
      }
      if (looks_like_32_bit_header()) {
        return fail("bad header: the profile uses 32-bit words; only 64-bit profiles are supported");
      }
      return fail("bad header: expected words 0, 3 at the start (not a gperftools CPU profile)");
    }
    if (version != 0) return fail("bad header: unsupported version " + std::to_string(version));
    if (padding != 0) return fail("bad header: nonzero padding word");
    if (period_us == 0) return fail("bad header: sampling period is zero");
    // Byte-swapped small periods look like huge ones: a second catches them too.
    if (period_us > 1000000) {
      return fail("bad header: implausible sampling period " + std::to_string(period_us) + " us");
    }
    out_.period_us = static_cast<std::int64_t>(period_us);
    return true;
  }

  bool looks_like_32_bit_header() const noexcept {
    std::uint32_t first;
    std::uint32_t second;
    std::memcpy(&first, bytes_.data(), sizeof first);
    std::memcpy(&second, bytes_.data() + sizeof first, sizeof second);
    return first == 0 && second == 3;
  }

  static std::uint64_t byte_swapped(std::uint64_t value) noexcept {
    std::uint64_t swapped = 0;
    for (int i = 0; i < 8; ++i) swapped = (swapped << 8) | ((value >> (8 * i)) & 0xff);
    return swapped;
  }

  // Callers have checked offset + 8 <= size; memcpy because the view need not be aligned.
  std::uint64_t word_at(std::size_t offset) const noexcept {
    std::uint64_t word;
    std::memcpy(&word, bytes_.data() + offset, sizeof word);
    return word;
  }

  bool fail(std::string message) {
    error_ = "legacy cpu profile: " + message;
    out_ = LegacyCpuProfile{};
    return false;
  }

  std::string_view bytes_;
  LegacyCpuProfile& out_;
  std::string& error_;
};

// A failure (profiler_failed) says what is wrong with the file, and leaves `out` empty.
inline Status parse_legacy_cpu_profile(std::string_view bytes, LegacyCpuProfile& out) noexcept {
  std::string error;
  SPANPROF_TRY {
    if (LegacyCpuProfileParser(bytes, out, error).parse()) return Status::ok();
    return Status(ErrorCode::profiler_failed, error);
  } SPANPROF_CATCH_ALL {
    // Only allocation can throw here; the bounds checks above hold for any input.
    out = LegacyCpuProfile{};
    return Status(ErrorCode::profiler_failed, "legacy cpu profile: out of memory while parsing");
  }
  return Status(ErrorCode::internal, "unreachable");  // -fno-exceptions: the try is an if (true)
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_GPERFTOOLS_CPU_PROFILE_HPP_
