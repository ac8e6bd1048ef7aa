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
  const spanprof::SpanRecord& x = a.record;
  const spanprof::SpanRecord& y = b.record;
  return x.kind == y.kind && x.span.trace_id == y.span.trace_id && x.span.span_id == y.span.span_id &&
         x.span.flags.value == y.span.flags.value && x.span_name == y.span_name && x.start_unix_ns == y.start_unix_ns &&
         x.duration_ns == y.duration_ns && x.period_ns == y.period_ns &&
         x.heap_interval_bytes == y.heap_interval_bytes && a.sample_count == b.sample_count &&
         a.span_count == b.span_count && x.engine == y.engine && x.reason == y.reason;
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
  std::string payload;
  if (const spanprof::Status status = format::decode(file, uploader, decoded, payload); !status) {
    SPANPROF_FUZZ_CHECK(!status.message().empty());
    return;
  }
  SPANPROF_FUZZ_CHECK(static_cast<std::size_t>(decoded.record.kind) < spanprof::profile_kind_count);
  SPANPROF_FUZZ_CHECK(static_cast<std::size_t>(decoded.record.reason) < spanprof::profile_reason_count);

  const std::string encoded = format::encode(uploader, decoded, payload);
  SPANPROF_FUZZ_CHECK(encoded.size() == format::encoded_size(uploader, decoded, payload));
  EncodedProfile again;
  std::string payload_again;
  SPANPROF_FUZZ_CHECK(format::decode(encoded, uploader, again, payload_again).is_ok());
  SPANPROF_FUZZ_CHECK(same(decoded, again) && payload == payload_again);
  SPANPROF_FUZZ_CHECK(format::encode(uploader, again, payload_again) == encoded);
  if (in_encoder_order(file)) SPANPROF_FUZZ_CHECK(encoded == file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
