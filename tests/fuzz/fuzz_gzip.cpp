// gzip_decompress(), the bounded gunzip for bytes from a file or a peer (a
// spooled payload, a pprof file), and gzip_compress() behind every upload.
//
// Invariants: decompression never yields more than the limit it was given, fails
// with a reason and an empty output, and what it yields compresses and
// decompresses back to itself; any input compresses and decompresses to itself,
// through spanprof's fixed-code deflate too.
#include "fuzz_support.hpp"

#include <spanprof/detail/profile/gzip.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

// Far above what a 64 KiB fuzz input needs to be interesting, far below the
// 64 MiB malloc limit libFuzzer enforces (the default limit is 256 MiB).
constexpr std::size_t max_out = std::size_t{1} << 20;

void fuzz_one(std::string_view bytes) {
  namespace sd = spanprof::detail;

  std::string out;
  const spanprof::Status inflated = sd::gzip_decompress(bytes, out, max_out);
  if (inflated) {
    SPANPROF_FUZZ_CHECK(out.size() <= max_out);
    std::string packed, unpacked;
    SPANPROF_FUZZ_CHECK(sd::gzip_compress(out, packed));
    SPANPROF_FUZZ_CHECK(sd::gzip_decompress(packed, unpacked, max_out) && unpacked == out);
  } else {
    SPANPROF_FUZZ_CHECK(out.empty() && !inflated.message().empty());
  }

  std::string packed, unpacked;
  SPANPROF_FUZZ_CHECK(sd::gzip_compress(bytes, packed));
  SPANPROF_FUZZ_CHECK(sd::gzip_decompress(packed, unpacked, bytes.size()) && unpacked == bytes);

  // The fixed codes on their own, whatever the size (gzip_compress stores the
  // small inputs a fuzzer mostly makes).
  if (bytes.size() < sd::deflate_fixed_max_input) {
    std::string fixed(sd::gzip_header, sizeof sd::gzip_header);
    sd::deflate_fixed(bytes, fixed);
    sd::append_gzip_trailer(bytes, fixed);
    SPANPROF_FUZZ_CHECK(sd::gzip_decompress(fixed, unpacked, bytes.size()) && unpacked == bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
