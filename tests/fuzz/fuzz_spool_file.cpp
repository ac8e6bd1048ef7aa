// The content of a spool file, as Spool::load() hands it to spool_format::decode()
// after a restart: written by an older or newer spanprof, cut short by a power
// loss, or replaced by something else entirely.
//
// Input: one length byte and that many bytes of the uploader the file is expected
// to belong to, one byte of flags, then the file. Flag bit 0 rewrites the body
// length and the CRC so they match, letting mutations reach the records behind
// them (the CRC would otherwise refuse almost every mutated file).
//
// Invariants: a decoded profile encodes again to a file that decodes to the same
// profile, that encoding is stable, and its size is what encoded_size() predicts
// (Spool::store() checks the bound with it); a file with its records in the
// encoder's order and no unknown records is byte-identical to its re-encoding.
#include "fuzz_support.hpp"

#include <spanprof/detail/delivery/spool_format.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

namespace format = spanprof::detail::spool_format;
using spanprof::EncodedProfile;

bool same(const EncodedProfile& a, const EncodedProfile& b) {
  return a.kind == b.kind && a.span.trace_id == b.span.trace_id && a.span.span_id == b.span.span_id &&
         a.span.flags.value == b.span.flags.value && a.span_name == b.span_name && a.start_unix_ns == b.start_unix_ns &&
         a.duration_ns == b.duration_ns && a.period_ns == b.period_ns &&
         a.heap_interval_bytes == b.heap_interval_bytes && a.sample_count == b.sample_count &&
         a.span_count == b.span_count && a.engine == b.engine && a.reason == b.reason && a.pprof_gzip == b.pprof_gzip;
}

void put_le(std::string& bytes, std::size_t at, std::uint64_t value, int size) {
  for (int i = 0; i < size; ++i) bytes[at + i] = static_cast<char>(static_cast<std::uint8_t>(value >> (8 * i)));
}

// Field ids 1, 2, ... in order, each once, nothing else: the encoder's layout.
bool in_encoder_order(std::string_view file) {
  std::size_t pos = format::header_size;
  const std::size_t end = file.size() - format::crc_size;
  for (std::uint32_t expected = 1; expected <= format::field_count; ++expected) {
    if (end - pos < format::record_header_size) return false;
    if (format::get_le(file.data() + pos, 4) != expected) return false;
    pos += format::record_header_size + static_cast<std::size_t>(format::get_le(file.data() + pos + 4, 8));
  }
  return pos == end;
}

void fuzz_one(std::string_view bytes) {
  spanprof_fuzz::Input input(bytes);
  const std::string uploader(input.bytes(input.byte() % 64));
  const std::uint8_t flags = input.byte();
  std::string file(input.rest());
  if ((flags & 1) != 0 && file.size() >= format::header_size + format::crc_size) {
    put_le(file, sizeof format::magic + 4, file.size() - format::header_size - format::crc_size, 8);
    put_le(file, file.size() - format::crc_size,
           format::crc32_of(std::string_view(file).substr(0, file.size() - format::crc_size)), 4);
  }

  EncodedProfile decoded;
  std::string why;
  if (!format::decode(file, uploader, decoded, why)) {
    SPANPROF_FUZZ_CHECK(!why.empty());
    return;
  }
  SPANPROF_FUZZ_CHECK(static_cast<std::size_t>(decoded.kind) < spanprof::profile_kind_count);
  SPANPROF_FUZZ_CHECK(static_cast<std::size_t>(decoded.reason) < spanprof::profile_reason_count);
  SPANPROF_FUZZ_CHECK(decoded.profile == nullptr);

  const std::string encoded = format::encode(uploader, decoded, decoded.pprof_gzip);
  SPANPROF_FUZZ_CHECK(encoded.size() == format::encoded_size(uploader, decoded, decoded.pprof_gzip));
  EncodedProfile again;
  SPANPROF_FUZZ_CHECK(format::decode(encoded, uploader, again, why));
  SPANPROF_FUZZ_CHECK(same(decoded, again));
  SPANPROF_FUZZ_CHECK(format::encode(uploader, again, again.pprof_gzip) == encoded);
  if (in_encoder_order(file)) SPANPROF_FUZZ_CHECK(encoded == file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
