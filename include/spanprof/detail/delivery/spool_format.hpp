// The content of a spool file: a profile's metadata and the payload its uploader
// sends, as bytes that a later process (perhaps a later version) reads back after
// a restart. The names of the files are detail/delivery/spool_names.hpp's, the directory
// they live in detail/delivery/spool.hpp's. A file is read as untrusted input (a power
// loss, a text-mode copy, another program), and fuzzed as such (fuzz_spool_file).
//
// Content (integers little-endian):
//
//   magic "\x89SPOOL\r\n" | u32 version | u64 body length | body | u32 CRC-32
//
// where the body is a sequence of records `u32 field id | u64 length | bytes`,
// one per field of the profile's SpanRecord and EncodedProfile's counts, plus the
// payload, and the CRC (zlib's crc32) covers everything
// before it. The magic's high byte and CR LF expose a file mangled by a text-mode
// copy. Unknown field ids are skipped, so later versions of this header can add
// fields without a version bump; a changed meaning needs a new version.
// Version 1 stored pprof for every uploader; its files are refused (and removed)
// as an unsupported version.
#ifndef SPANPROF_DETAIL_DELIVERY_SPOOL_FORMAT_HPP_
#define SPANPROF_DETAIL_DELIVERY_SPOOL_FORMAT_HPP_

#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>
#include <spanprof/delivery/uploader.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include <zlib.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {
namespace spool_format {

inline constexpr char magic[8] = {'\x89', 'S', 'P', 'O', 'O', 'L', '\r', '\n'};
inline constexpr std::uint32_t version = 2;
inline constexpr std::size_t header_size = sizeof magic + 4 + 8;
inline constexpr std::size_t record_header_size = 4 + 8;
inline constexpr std::size_t crc_size = 4;

enum class Field : std::uint32_t {
  uploader = 1,
  kind,
  trace_id,
  span_id,
  trace_flags,
  span_name,
  start_unix_ns,
  duration_ns,
  period_ns,
  heap_interval_bytes,
  sample_count,
  engine,
  reason,
  payload,
  span_count,
  time_split,  // five i64: running, waiting, blocked ns, voluntary and involuntary switches
};
inline constexpr std::uint32_t field_count = static_cast<std::uint32_t>(Field::time_split);
// Fields a file written before them lacks: read as their default.
inline constexpr std::uint32_t optional_fields = std::uint32_t{1} << static_cast<std::uint32_t>(Field::time_split);

inline void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(static_cast<std::uint8_t>(value >> (8 * i)));
}

inline void put_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(static_cast<std::uint8_t>(value >> (8 * i)));
}

inline std::uint64_t get_le(const char* bytes, int size) noexcept {
  std::uint64_t value = 0;
  for (int i = 0; i < size; ++i) value |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes[i])) << (8 * i);
  return value;
}

inline std::uint32_t crc32_of(std::string_view bytes) noexcept {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* data = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  while (left > 0) {  // zlib counts in uInt
    const std::size_t slice = std::min<std::size_t>(left, std::size_t{1} << 30);
    crc = ::crc32(crc, data, static_cast<uInt>(slice));
    data += slice;
    left -= slice;
  }
  return static_cast<std::uint32_t>(crc);
}

inline std::uint64_t encoded_size(std::string_view uploader, const EncodedProfile& p, std::string_view bytes) noexcept {
  const std::uint64_t payload = uploader.size() + 1 + TraceId::size + SpanId::size + 1 + p.record.span_name.size() +
                                4 * 8 + 8 + p.record.engine.size() + 1 + bytes.size() + 8 + 5 * 8;
  return header_size + field_count * record_header_size + payload + crc_size;
}

inline void put_record(std::string& out, Field field, std::string_view bytes) {
  put_u32(out, static_cast<std::uint32_t>(field));
  put_u64(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

inline void put_record_u64(std::string& out, Field field, std::uint64_t value) {
  put_u32(out, static_cast<std::uint32_t>(field));
  put_u64(out, 8);
  put_u64(out, value);
}

inline void put_record_u8(std::string& out, Field field, std::uint8_t value) {
  put_u32(out, static_cast<std::uint32_t>(field));
  put_u64(out, 1);
  out += static_cast<char>(value);
}

// The metadata of `p` and the payload `bytes`. May throw std::bad_alloc.
inline std::string encode(std::string_view uploader, const EncodedProfile& p, std::string_view bytes) {
  std::string out;
  out.reserve(static_cast<std::size_t>(encoded_size(uploader, p, bytes)));
  out.append(magic, sizeof magic);
  put_u32(out, version);
  put_u64(out, encoded_size(uploader, p, bytes) - header_size - crc_size);
  // Every field of the span's record is stored: a field added to SpanRecord makes
  // this binding fail to compile until the format stores it too (Field, here,
  // decode, encoded_size).
  const SpanRecord& record = p.record;
  const auto& [kind, span, span_name, reason, start_unix_ns, duration_ns, period_ns, heap_interval_bytes, engine,
               time] = record;
  const auto& trace = span.trace_id.bytes();
  const auto& span_id = span.span_id.bytes();
  put_record(out, Field::uploader, uploader);
  put_record_u8(out, Field::kind, static_cast<std::uint8_t>(kind));
  put_record(out, Field::trace_id, std::string_view(reinterpret_cast<const char*>(trace.data()), trace.size()));
  put_record(out, Field::span_id, std::string_view(reinterpret_cast<const char*>(span_id.data()), span_id.size()));
  put_record_u8(out, Field::trace_flags, span.flags.value);
  put_record(out, Field::span_name, span_name);
  put_record_u64(out, Field::start_unix_ns, static_cast<std::uint64_t>(start_unix_ns));
  put_record_u64(out, Field::duration_ns, static_cast<std::uint64_t>(duration_ns));
  put_record_u64(out, Field::period_ns, static_cast<std::uint64_t>(period_ns));
  put_record_u64(out, Field::heap_interval_bytes, static_cast<std::uint64_t>(heap_interval_bytes));
  // EncodedProfile's counts and the payload among them, in the order files have
  // always had.
  put_record_u64(out, Field::sample_count, static_cast<std::uint64_t>(p.sample_count));
  put_record(out, Field::engine, engine);
  put_record_u8(out, Field::reason, static_cast<std::uint8_t>(reason));
  put_record(out, Field::payload, bytes);
  put_record_u64(out, Field::span_count, static_cast<std::uint64_t>(p.span_count));
  put_u32(out, static_cast<std::uint32_t>(Field::time_split));
  put_u64(out, 5 * 8);
  for (const std::int64_t value :
       {time.running_ns, time.waiting_ns, time.blocked_ns, time.voluntary_switches, time.involuntary_switches})
    put_u64(out, static_cast<std::uint64_t>(value));
  put_u32(out, crc32_of(out));
  return out;
}

// Why a file cannot be read back.
inline Status invalid(std::string_view why) noexcept { return Status(ErrorCode::upload_failed, why); }

// Checks everything before trusting anything: size, magic, version, CRC, then
// each record's bounds, size and range. A failure says what is wrong with the
// file. May throw std::bad_alloc.
inline Status decode(std::string_view bytes, std::string_view expected_uploader, EncodedProfile& out,
                     std::string& payload) {
  if (bytes.size() < header_size + crc_size) {
    return invalid("truncated: " + std::to_string(bytes.size()) + " bytes");
  }
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    return invalid("not a spool file (bad magic)");
  }
  const auto file_version = static_cast<std::uint32_t>(get_le(bytes.data() + sizeof magic, 4));
  if (file_version != version) {
    return invalid("unsupported version " + std::to_string(file_version));
  }
  const std::uint64_t body_size = get_le(bytes.data() + sizeof magic + 4, 8);
  const std::uint64_t room = bytes.size() - header_size - crc_size;
  if (body_size != room) {
    return invalid((body_size > room ? "truncated: " : "trailing bytes: ") + std::to_string(bytes.size()) +
          " bytes where the header announces " +
          (body_size > UINT64_MAX - header_size - crc_size ? std::string("more than 2^64")
                                                           : std::to_string(body_size + header_size + crc_size)));
  }
  const std::size_t crc_at = bytes.size() - crc_size;
  const auto stored_crc = static_cast<std::uint32_t>(get_le(bytes.data() + crc_at, 4));
  if (crc32_of(bytes.substr(0, crc_at)) != stored_crc) {
    return invalid("CRC mismatch");
  }

  EncodedProfile p;
  SpanRecord& record = p.record;
  std::string bytes_of_payload;
  std::uint32_t seen = 0;
  std::size_t pos = header_size;
  while (pos < crc_at) {
    if (crc_at - pos < record_header_size) {
      return invalid("record header runs past the body");
    }
    const auto id = static_cast<std::uint32_t>(get_le(bytes.data() + pos, 4));
    const std::uint64_t size = get_le(bytes.data() + pos + 4, 8);
    pos += record_header_size;
    if (size > crc_at - pos) {
      return invalid("record " + std::to_string(id) + " runs past the body");
    }
    const std::string_view value = bytes.substr(pos, static_cast<std::size_t>(size));
    pos += static_cast<std::size_t>(size);
    if (id == 0 || id > field_count) continue;  // a later version's field
    const std::uint32_t bit = std::uint32_t{1} << id;
    if ((seen & bit) != 0) {
      return invalid("field " + std::to_string(id) + " appears twice");
    }
    seen |= bit;
    auto fixed = [&](std::size_t expected) {
      if (value.size() == expected) return Status::ok();
      return invalid("field " + std::to_string(id) + " has " + std::to_string(value.size()) + " bytes, expected " +
                     std::to_string(expected));
    };
    auto as_i64 = [&] { return static_cast<std::int64_t>(get_le(value.data(), 8)); };
    switch (static_cast<Field>(id)) {
      case Field::uploader:
        if (value != expected_uploader) {
          return invalid("belongs to another uploader");
        }
        break;
      case Field::kind:
        if (Status sized = fixed(1); !sized) return sized;
        if (static_cast<std::uint8_t>(value[0]) >= profile_kind_count) {
          return invalid("unknown profile kind " + std::to_string(static_cast<std::uint8_t>(value[0])));
        }
        record.kind = static_cast<ProfileKind>(static_cast<std::uint8_t>(value[0]));
        break;
      case Field::trace_id:
        if (Status sized = fixed(TraceId::size); !sized) return sized;
        record.span.trace_id = TraceId(reinterpret_cast<const std::uint8_t*>(value.data()));
        break;
      case Field::span_id:
        if (Status sized = fixed(SpanId::size); !sized) return sized;
        record.span.span_id = SpanId(reinterpret_cast<const std::uint8_t*>(value.data()));
        break;
      case Field::trace_flags:
        if (Status sized = fixed(1); !sized) return sized;
        record.span.flags.value = static_cast<std::uint8_t>(value[0]);
        break;
      case Field::span_name:
        record.span_name.assign(value.data(), value.size());
        break;
      case Field::start_unix_ns:
        if (Status sized = fixed(8); !sized) return sized;
        record.start_unix_ns = as_i64();
        break;
      case Field::duration_ns:
        if (Status sized = fixed(8); !sized) return sized;
        record.duration_ns = as_i64();
        break;
      case Field::period_ns:
        if (Status sized = fixed(8); !sized) return sized;
        record.period_ns = as_i64();
        break;
      case Field::heap_interval_bytes:
        if (Status sized = fixed(8); !sized) return sized;
        record.heap_interval_bytes = as_i64();
        break;
      case Field::sample_count:
        if (Status sized = fixed(8); !sized) return sized;
        if (get_le(value.data(), 8) > SIZE_MAX) {
          return invalid("sample_count out of range");
        }
        p.sample_count = static_cast<std::size_t>(get_le(value.data(), 8));
        break;
      case Field::engine:
        record.engine.assign(value.data(), value.size());
        break;
      case Field::reason:
        if (Status sized = fixed(1); !sized) return sized;
        if (static_cast<std::uint8_t>(value[0]) >= profile_reason_count) {
          return invalid("unknown profile reason " + std::to_string(static_cast<std::uint8_t>(value[0])));
        }
        record.reason = static_cast<ProfileReason>(static_cast<std::uint8_t>(value[0]));
        break;
      case Field::payload:
        bytes_of_payload.assign(value.data(), value.size());
        break;
      case Field::span_count:
        if (Status sized = fixed(8); !sized) return sized;
        if (get_le(value.data(), 8) > SIZE_MAX) {
          return invalid("span_count out of range");
        }
        p.span_count = static_cast<std::size_t>(get_le(value.data(), 8));
        break;
      case Field::time_split: {
        if (Status sized = fixed(5 * 8); !sized) return sized;
        std::int64_t parts[5];
        for (std::size_t i = 0; i < 5; ++i) parts[i] = static_cast<std::int64_t>(get_le(value.data() + 8 * i, 8));
        record.time = TimeSplit{parts[0], parts[1], parts[2], parts[3], parts[4]};
        break;
      }
    }
  }
  for (std::uint32_t id = 1; id <= field_count; ++id) {
    if ((seen & (std::uint32_t{1} << id)) == 0 && (optional_fields & (std::uint32_t{1} << id)) == 0) {
      return invalid("field " + std::to_string(id) + " is missing");
    }
  }
  out = std::move(p);
  payload = std::move(bytes_of_payload);
  return Status::ok();
}

}  // namespace spool_format
}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_SPOOL_FORMAT_HPP_
