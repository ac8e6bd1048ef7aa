// gzip_decompress(), the bounded gunzip for bytes from a file or a peer (a
// spooled payload, a pprof file), and gzip_compress() behind every upload.
//
// Invariants: decompression never yields more than the limit it was given, fails
// with a reason and an empty output, and what it yields compresses and
// decompresses back to itself; any input compresses and decompresses to itself.
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

  std::string out, error;
  if (sd::gzip_decompress(bytes, out, error, max_out)) {
    SPANPROF_FUZZ_CHECK(out.size() <= max_out);
    std::string packed, unpacked;
    SPANPROF_FUZZ_CHECK(sd::gzip_compress(out, packed, error));
    SPANPROF_FUZZ_CHECK(sd::gzip_decompress(packed, unpacked, error, max_out) && unpacked == out);
  } else {
    SPANPROF_FUZZ_CHECK(out.empty() && !error.empty());
  }

  std::string packed, unpacked;
  SPANPROF_FUZZ_CHECK(sd::gzip_compress(bytes, packed, error));
  SPANPROF_FUZZ_CHECK(sd::gzip_decompress(packed, unpacked, error, bytes.size()) && unpacked == bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
