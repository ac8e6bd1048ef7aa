// A bounded on-disk spool: payloads an uploader could not deliver during an
// outage wait here and are re-sent later, also by the next process after a
// restart. A payload is what the uploader sends (a gzip'd pprof, an OTLP request,
// a Pyroscope push), stored with the profile's metadata the uploader needs to send
// it again, so a re-send never re-encodes.
//
// Layout: one file per (uploader, profile) in one directory,
//
//   <sequence:20 digits>-<stored unix ns:20 digits>-<uploader>.spool
//
// The sequence orders files (the wall clock may step back; the sequence never
// does) and resumes after the highest one found when a spool is opened again.
// <uploader> is the uploader's name with every byte outside [A-Za-z0-9_-]
// written as %XX, so distinct names never share files; names too long for a file
// name keep a prefix and gain a hash ("~" + 16 hex digits).
//
// A file appears whole or not at all: it is written under a hidden temporary name
// (".<name>.tmp", mode 0600) and renamed into place; a failed write removes the
// temporary file, and temporary files a crash left behind are deleted by open().
// Files are not fsync'ed unless asked (sync_to_disk): a process crash loses
// nothing either way, and after a power loss an unsynced file is at worst found
// corrupt by its CRC and dropped — losing a few profiles of an outage is cheaper
// than a disk flush per profile while the outage lasts.
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
// as an unsupported version. EncodedProfile::profile is not stored.
//
// The spool is bounded: after each store, the oldest files (of any uploader) are
// deleted until the spool's files fit in max_bytes again. A profile that alone
// exceeds the bound is refused instead of emptying the spool for it.
//
// Threads and processes: a Spool is owned by one thread (the upload worker) and
// has no locking of its own. open() takes an advisory lock (flock) on a lock
// file in the directory, so a second Spool on the same directory — in this or
// another process — fails to open instead of interleaving sequence numbers and
// deleting the other's temporary files.
//
// Nothing here throws: every failure comes back as false plus a message.
#ifndef SPANPROF_DELIVERY_SPOOL_HPP_
#define SPANPROF_DELIVERY_SPOOL_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/filesystem.hpp>
#include <spanprof/profile/gzip.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/delivery/uploader.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// ---- file names ---------------------------------------------------------------------

namespace spool_format {

inline constexpr std::string_view suffix = ".spool";
inline constexpr std::string_view temp_suffix = ".tmp";
inline constexpr std::string_view lock_name = ".spanprof-spool.lock";
inline constexpr std::size_t number_digits = 20;  // UINT64_MAX has 20 decimal digits
inline constexpr std::size_t prefix_size = 2 * (number_digits + 1);
// Keeps the longest name (prefix, component, suffixes, temp dot) far below NAME_MAX.
inline constexpr std::size_t max_component = 96;
inline constexpr std::size_t hashed_prefix = 64;

inline bool keeps_byte(unsigned char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

inline std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

inline void append_hex(std::string& out, std::uint64_t value, int digits) {
  for (int i = digits - 1; i >= 0; --i) out += lower_hex_digits[(value >> (4 * i)) & 0xf];
}

// The uploader's part of a file name: injective for names up to max_component
// escaped characters; longer names are told apart by a 64-bit hash, and the full
// name stored in the file settles any doubt.
inline std::string uploader_component(std::string_view uploader) {
  std::string escaped;
  for (const char c : uploader) {
    const auto byte = static_cast<unsigned char>(c);
    if (keeps_byte(byte)) {
      escaped += c;
    } else {
      escaped += '%';
      append_hex(escaped, byte, 2);
    }
  }
  if (escaped.size() <= max_component) return escaped;
  std::size_t cut = hashed_prefix;
  // Never split an escape: back up to the start of a "%xx" the cut falls into.
  for (std::size_t back = 1; back <= 2 && cut >= back; ++back) {
    if (escaped[cut - back] == '%') {
      cut -= back;
      break;
    }
  }
  escaped.resize(cut);
  escaped += '~';
  append_hex(escaped, fnv1a(uploader), 16);
  return escaped;
}

inline void append_number(std::string& out, std::uint64_t value) {
  char digits[number_digits];
  for (std::size_t i = number_digits; i-- > 0;) {
    digits[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  out.append(digits, number_digits);
}

inline std::string file_name(std::uint64_t sequence, std::int64_t stored_unix_ns, std::string_view component) {
  std::string name;
  name.reserve(prefix_size + component.size() + suffix.size());
  append_number(name, sequence);
  name += '-';
  append_number(name, static_cast<std::uint64_t>(stored_unix_ns));
  name += '-';
  name.append(component.data(), component.size());
  name.append(suffix.data(), suffix.size());
  return name;
}

inline std::string temp_name(std::string_view final_name) {
  std::string name = ".";
  name.append(final_name.data(), final_name.size());
  name.append(temp_suffix.data(), temp_suffix.size());
  return name;
}

inline bool parse_number(std::string_view digits, std::uint64_t& value) noexcept {
  if (digits.size() != number_digits) return false;
  value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  return true;
}

struct ParsedName {
  std::uint64_t sequence = 0;
  std::int64_t stored_unix_ns = 0;
  std::string_view component;
};

// Only names this code could have written qualify; anything else in the
// directory is somebody else's and is left alone.
inline bool parse_file_name(std::string_view name, ParsedName& parsed) noexcept {
  if (name.size() < prefix_size + suffix.size()) return false;
  if (name.substr(name.size() - suffix.size()) != suffix) return false;
  if (name[number_digits] != '-' || name[prefix_size - 1] != '-') return false;
  std::uint64_t stored = 0;
  // The top sequence is refused so the next one can never wrap to 0.
  if (!parse_number(name.substr(0, number_digits), parsed.sequence) || parsed.sequence == UINT64_MAX ||
      !parse_number(name.substr(number_digits + 1, number_digits), stored) || stored > INT64_MAX) {
    return false;
  }
  parsed.stored_unix_ns = static_cast<std::int64_t>(stored);
  parsed.component = name.substr(prefix_size, name.size() - prefix_size - suffix.size());
  for (const char c : parsed.component) {
    if (!keeps_byte(static_cast<unsigned char>(c)) && c != '%' && c != '~') return false;
  }
  return true;
}

inline bool is_temp_name(std::string_view name) noexcept {
  if (name.size() < 1 + temp_suffix.size() || name[0] != '.') return false;
  if (name.substr(name.size() - temp_suffix.size()) != temp_suffix) return false;
  ParsedName ignored;
  return parse_file_name(name.substr(1, name.size() - 1 - temp_suffix.size()), ignored);
}

// ---- file content -----------------------------------------------------------------

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
};
inline constexpr std::uint32_t field_count = static_cast<std::uint32_t>(Field::span_count);

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
  const std::uint64_t payload = uploader.size() + 1 + TraceId::size + SpanId::size + 1 + p.span_name.size() + 4 * 8 +
                                8 + p.engine.size() + 1 + bytes.size() + 8;
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
  const SpanRecord& record = p;
  const auto& [kind, span, span_name, reason, start_unix_ns, duration_ns, period_ns, heap_interval_bytes, engine] =
      record;
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
  // always had (the model and the cancellation flag live only in memory).
  put_record_u64(out, Field::sample_count, static_cast<std::uint64_t>(p.sample_count));
  put_record(out, Field::engine, engine);
  put_record_u8(out, Field::reason, static_cast<std::uint8_t>(reason));
  put_record(out, Field::payload, bytes);
  put_record_u64(out, Field::span_count, static_cast<std::uint64_t>(p.span_count));
  put_u32(out, crc32_of(out));
  return out;
}

// Checks everything before trusting anything: size, magic, version, CRC, then
// each record's bounds, size and range. The payload lands in out.pprof_gzip.
// May throw std::bad_alloc.
inline bool decode(std::string_view bytes, std::string_view expected_uploader, EncodedProfile& out, std::string& why) {
  if (bytes.size() < header_size + crc_size) {
    why = "truncated: " + std::to_string(bytes.size()) + " bytes";
    return false;
  }
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    why = "not a spool file (bad magic)";
    return false;
  }
  const auto file_version = static_cast<std::uint32_t>(get_le(bytes.data() + sizeof magic, 4));
  if (file_version != version) {
    why = "unsupported version " + std::to_string(file_version);
    return false;
  }
  const std::uint64_t body_size = get_le(bytes.data() + sizeof magic + 4, 8);
  const std::uint64_t room = bytes.size() - header_size - crc_size;
  if (body_size != room) {
    why = (body_size > room ? "truncated: " : "trailing bytes: ") + std::to_string(bytes.size()) +
          " bytes where the header announces " +
          (body_size > UINT64_MAX - header_size - crc_size ? std::string("more than 2^64")
                                                           : std::to_string(body_size + header_size + crc_size));
    return false;
  }
  const std::size_t crc_at = bytes.size() - crc_size;
  const auto stored_crc = static_cast<std::uint32_t>(get_le(bytes.data() + crc_at, 4));
  if (crc32_of(bytes.substr(0, crc_at)) != stored_crc) {
    why = "CRC mismatch";
    return false;
  }

  EncodedProfile p;
  std::uint32_t seen = 0;
  std::size_t pos = header_size;
  while (pos < crc_at) {
    if (crc_at - pos < record_header_size) {
      why = "record header runs past the body";
      return false;
    }
    const auto id = static_cast<std::uint32_t>(get_le(bytes.data() + pos, 4));
    const std::uint64_t size = get_le(bytes.data() + pos + 4, 8);
    pos += record_header_size;
    if (size > crc_at - pos) {
      why = "record " + std::to_string(id) + " runs past the body";
      return false;
    }
    const std::string_view value = bytes.substr(pos, static_cast<std::size_t>(size));
    pos += static_cast<std::size_t>(size);
    if (id == 0 || id > field_count) continue;  // a later version's field
    const std::uint32_t bit = std::uint32_t{1} << id;
    if ((seen & bit) != 0) {
      why = "field " + std::to_string(id) + " appears twice";
      return false;
    }
    seen |= bit;
    auto fixed = [&](std::size_t expected) {
      if (value.size() == expected) return true;
      why = "field " + std::to_string(id) + " has " + std::to_string(value.size()) + " bytes, expected " +
            std::to_string(expected);
      return false;
    };
    auto as_i64 = [&] { return static_cast<std::int64_t>(get_le(value.data(), 8)); };
    switch (static_cast<Field>(id)) {
      case Field::uploader:
        if (value != expected_uploader) {
          why = "belongs to another uploader";
          return false;
        }
        break;
      case Field::kind:
        if (!fixed(1)) return false;
        if (static_cast<std::uint8_t>(value[0]) >= profile_kind_count) {
          why = "unknown profile kind " + std::to_string(static_cast<std::uint8_t>(value[0]));
          return false;
        }
        p.kind = static_cast<ProfileKind>(static_cast<std::uint8_t>(value[0]));
        break;
      case Field::trace_id:
        if (!fixed(TraceId::size)) return false;
        p.span.trace_id = TraceId(reinterpret_cast<const std::uint8_t*>(value.data()));
        break;
      case Field::span_id:
        if (!fixed(SpanId::size)) return false;
        p.span.span_id = SpanId(reinterpret_cast<const std::uint8_t*>(value.data()));
        break;
      case Field::trace_flags:
        if (!fixed(1)) return false;
        p.span.flags.value = static_cast<std::uint8_t>(value[0]);
        break;
      case Field::span_name:
        p.span_name.assign(value.data(), value.size());
        break;
      case Field::start_unix_ns:
        if (!fixed(8)) return false;
        p.start_unix_ns = as_i64();
        break;
      case Field::duration_ns:
        if (!fixed(8)) return false;
        p.duration_ns = as_i64();
        break;
      case Field::period_ns:
        if (!fixed(8)) return false;
        p.period_ns = as_i64();
        break;
      case Field::heap_interval_bytes:
        if (!fixed(8)) return false;
        p.heap_interval_bytes = as_i64();
        break;
      case Field::sample_count:
        if (!fixed(8)) return false;
        if (get_le(value.data(), 8) > SIZE_MAX) {
          why = "sample_count out of range";
          return false;
        }
        p.sample_count = static_cast<std::size_t>(get_le(value.data(), 8));
        break;
      case Field::engine:
        p.engine.assign(value.data(), value.size());
        break;
      case Field::reason:
        if (!fixed(1)) return false;
        if (static_cast<std::uint8_t>(value[0]) >= profile_reason_count) {
          why = "unknown profile reason " + std::to_string(static_cast<std::uint8_t>(value[0]));
          return false;
        }
        p.reason = static_cast<ProfileReason>(static_cast<std::uint8_t>(value[0]));
        break;
      case Field::payload:
        p.pprof_gzip.assign(value.data(), value.size());
        break;
      case Field::span_count:
        if (!fixed(8)) return false;
        if (get_le(value.data(), 8) > SIZE_MAX) {
          why = "span_count out of range";
          return false;
        }
        p.span_count = static_cast<std::size_t>(get_le(value.data(), 8));
        break;
    }
  }
  for (std::uint32_t id = 1; id <= field_count; ++id) {
    if ((seen & (std::uint32_t{1} << id)) == 0) {
      why = "field " + std::to_string(id) + " is missing";
      return false;
    }
  }
  out = std::move(p);
  return true;
}

}  // namespace spool_format

// ---- the spool --------------------------------------------------------------------

struct SpoolItem {
  std::string uploader;
  std::uint64_t sequence = 0;
  std::int64_t stored_unix_ns = 0;  // wall clock when stored; informative, not the order
  std::uint64_t size_bytes = 0;
  std::string file_name;  // relative to the spool directory
};

struct SpoolCounters {
  std::uint64_t stored = 0;           // profiles written
  std::uint64_t evicted = 0;          // oldest files deleted to stay within max_bytes
  std::uint64_t corrupt_removed = 0;  // files that failed verification and were deleted
  std::uint64_t temp_removed = 0;     // temporary files of an interrupted store, deleted by open()
};

class Spool {
 public:
  // sync_to_disk: fsync each file before its rename and the directory after it,
  // so stored profiles survive a power loss too (see the top of this file).
  Spool(std::string directory, std::uint64_t max_bytes, bool sync_to_disk = false) noexcept
      : directory_(std::move(directory)), max_bytes_(max_bytes), sync_to_disk_(sync_to_disk) {
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  }

  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;
  ~Spool() { close(); }

  const std::string& directory() const noexcept { return directory_; }
  std::uint64_t max_bytes() const noexcept { return max_bytes_; }
  bool is_open() const noexcept { return dir_fd_ >= 0; }

  // Creates the directory (0700) if needed, locks it, deletes leftover temporary
  // files, indexes the spool files already there and resumes the sequence after
  // the highest. Trims to max_bytes, oldest first, in case the bound shrank
  // since they were written. Calling it again rescans.
  bool open(std::string& error) noexcept {
    close();
    SPANPROF_TRY {
      if (directory_.empty()) return fail(error, "spool: no directory configured");
      if (!detail::make_directories(directory_)) return fail_errno(error, "cannot create directory", directory_);
      dir_fd_ = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir_fd_ < 0) return fail_errno(error, "cannot open directory", directory_);
      lock_fd_ = ::openat(dir_fd_, std::string(spool_format::lock_name).c_str(),
                          O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (lock_fd_ < 0) return close_after(fail_errno(error, "cannot create", path_of(spool_format::lock_name)));
      if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
          return close_after(fail(error, "spool: " + directory_ + " is in use by another spool (lock held on " +
                                             path_of(spool_format::lock_name) + ")"));
        }
        return close_after(fail_errno(error, "cannot lock", path_of(spool_format::lock_name)));
      }
      if (!scan(error)) return close_after(false);
      enforce_bound();
      return true;
    } SPANPROF_CATCH_ALL {
      close();
      set_error_message(error, "spool: out of memory while opening");
      return false;
    }
  }

  // Writes one payload for `uploader` with the profile's metadata, then evicts the
  // oldest files while the spool exceeds max_bytes. On failure nothing new is left
  // in the directory.
  bool store(std::string_view uploader, const EncodedProfile& metadata, std::string_view payload,
             std::string& error) noexcept {
    if (!is_open()) return fail(error, "spool: not open");
    SPANPROF_TRY {
      const std::uint64_t size = spool_format::encoded_size(uploader, metadata, payload);
      if (size > max_bytes_) {
        return fail(error, "spool: a profile of " + std::to_string(size) + " bytes exceeds the spool's bound of " +
                               std::to_string(max_bytes_) + " bytes; not stored");
      }
      const std::string bytes = spool_format::encode(uploader, metadata, payload);
      // A failed attempt still consumes its number: a name is never reused.
      const std::uint64_t sequence = next_sequence_++;
      const std::int64_t stored_ns = now_unix_ns();
      std::string component = spool_format::uploader_component(uploader);
      std::string name = spool_format::file_name(sequence, stored_ns, component);
      // Indexed before it is written, so no allocation can fail between a file
      // appearing and the spool knowing about it.
      const auto it =
          entries_.emplace(Key{sequence, std::move(name)}, Entry{std::move(component), stored_ns, bytes.size()}).first;
      if (!write_file(it->first.second, bytes, error)) {
        entries_.erase(it);
        return false;
      }
      bytes_ += bytes.size();
      ++counters_.stored;
      enforce_bound();
      return true;
    } SPANPROF_CATCH_ALL {
      set_error_message(error, "spool: out of memory while storing");
      return false;
    }
  }

  // A profile whose payload is its gzip'd pprof.
  bool store(std::string_view uploader, const EncodedProfile& profile, std::string& error) noexcept {
    return store(uploader, profile, profile.pprof_gzip, error);
  }

  // The items stored for `uploader`, oldest first. Empty when there are none,
  // and also when the list cannot be allocated (retried on the next call).
  std::vector<SpoolItem> pending(std::string_view uploader) const noexcept {
    std::vector<SpoolItem> items;
    SPANPROF_TRY {
      const std::string component = spool_format::uploader_component(uploader);
      for (const auto& [key, entry] : entries_) {
        if (entry.component != component) continue;
        items.push_back(SpoolItem{std::string(uploader), key.first, entry.stored_unix_ns, entry.size, key.second});
      }
    } SPANPROF_CATCH_ALL {
      items.clear();
    }
    return items;
  }

  // Reads and verifies an item; the payload lands in out.pprof_gzip. A file that
  // fails verification is deleted and counted (retrying it could never succeed); a
  // transient failure (e.g. too many open files) leaves it in place. out.profile is
  // set to nullptr.
  bool load(const SpoolItem& item, EncodedProfile& out, std::string& error) noexcept {
    SPANPROF_TRY {
      const auto it = find(item, error);
      if (it == entries_.end()) return false;
      std::string bytes;
      bool corrupt = false;
      if (!read_file(it, bytes, corrupt, error)) {
        if (corrupt) remove_corrupt(it, error);
        return false;
      }
      std::string why;
      EncodedProfile decoded;
      if (!spool_format::decode(bytes, item.uploader, decoded, why)) {
        error = std::move(why);
        remove_corrupt(it, error);
        return false;
      }
      out = std::move(decoded);
      out.profile = nullptr;
      return true;
    } SPANPROF_CATCH_ALL {
      set_error_message(error, "spool: out of memory while loading");
      return false;
    }
  }

  // load(), with the payload apart from the metadata.
  bool load(const SpoolItem& item, EncodedProfile& metadata, std::string& payload, std::string& error) noexcept {
    if (!load(item, metadata, error)) return false;
    payload.swap(metadata.pprof_gzip);
    metadata.pprof_gzip.clear();
    return true;
  }

  // Forgets an item and deletes its file (after a successful upload). Returns
  // false when the file could not be deleted; the item is forgotten anyway, so
  // this process does not send it twice, but it comes back after a restart.
  bool remove(const SpoolItem& item) noexcept {
    const auto it = entries_.find(Key{item.sequence, item.file_name});
    if (it == entries_.end()) return true;
    return erase(it);
  }

  std::uint64_t bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return entries_.size(); }
  SpoolCounters counters() const noexcept { return counters_; }

  // The size store() would write for this profile, for checking against the bound.
  static std::uint64_t stored_size(std::string_view uploader, const EncodedProfile& profile) noexcept {
    return spool_format::encoded_size(uploader, profile, profile.pprof_gzip);
  }

 private:
  using Key = std::pair<std::uint64_t, std::string>;  // (sequence, file name): sorts oldest first
  struct Entry {
    std::string component;
    std::int64_t stored_unix_ns = 0;
    std::uint64_t size = 0;
  };
  using Entries = std::map<Key, Entry>;

  // ---- errors -------------------------------------------------------------------------

  static bool fail(std::string& error, std::string_view message) noexcept {
    set_error_message(error, message);
    return false;
  }

  static bool fail_errno(std::string& error, const char* what, const std::string& path) noexcept {
    const int saved = errno;
    SPANPROF_TRY {
      error = std::string("spool: ") + what + " " + path + ": " + std::strerror(saved);
    } SPANPROF_CATCH_ALL {
      error.clear();
    }
    errno = saved;
    return false;
  }

  bool close_after(bool result) noexcept {
    close();
    return result;
  }

  std::string path_of(std::string_view name) const { return directory_ + "/" + std::string(name); }

  // ---- directory ----------------------------------------------------------------------

 public:
  // In a forked child, on the parent's spool: the child's copies of its
  // descriptors would keep the parent's lock alive after the parent exits.
  void close_files_after_fork() noexcept {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    if (dir_fd_ >= 0) ::close(dir_fd_);
    lock_fd_ = dir_fd_ = -1;
  }

 private:
  void close() noexcept {
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
    if (dir_fd_ >= 0) ::close(dir_fd_);
    lock_fd_ = dir_fd_ = -1;
    entries_.clear();
    bytes_ = 0;
    next_sequence_ = 1;
  }

  bool scan(std::string& error) {
    // A fresh open file description: fdopendir takes ownership of it, and sharing
    // dir_fd_'s offset would make a second scan start at the end.
    const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail_errno(error, "cannot list", directory_);
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      return fail_errno(error, "cannot list", directory_);
    }
    std::uint64_t highest = 0;
    bool ok = true;
    SPANPROF_TRY {
      for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(dir);
        if (entry == nullptr) {
          if (errno != 0) ok = fail_errno(error, "cannot list", directory_);
          break;
        }
        const std::string_view name = entry->d_name;
        spool_format::ParsedName parsed;
        if (spool_format::parse_file_name(name, parsed)) {
          struct stat st {};
          // Only regular files are ours; a directory or symlink with a matching
          // name is left alone (and never followed).
          if (::fstatat(dir_fd_, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
          const auto size = static_cast<std::uint64_t>(st.st_size);
          highest = std::max(highest, parsed.sequence);
          // Only a shrunken bound (or tampering) leaves a file bigger than the whole
          // spool; trimming oldest-first around it would delete everything else.
          if (size > max_bytes_) {
            if (::unlinkat(dir_fd_, entry->d_name, 0) == 0) ++counters_.evicted;
            continue;
          }
          entries_.emplace(Key{parsed.sequence, std::string(name)},
                           Entry{std::string(parsed.component), parsed.stored_unix_ns, size});
          bytes_ += size;
        } else if (spool_format::is_temp_name(name)) {
          // The lock proves no live store owns it: it is a crash's leftover.
          if (::unlinkat(dir_fd_, entry->d_name, 0) == 0) ++counters_.temp_removed;
        }
      }
    } SPANPROF_CATCH_ALL {
      ::closedir(dir);
      SPANPROF_RETHROW;
    }
    ::closedir(dir);
    next_sequence_ = highest + 1;
    return ok;
  }

  // ---- files --------------------------------------------------------------------------

  static std::int64_t now_unix_ns() noexcept {
    timespec ts{};
    if (::clock_gettime(CLOCK_REALTIME, &ts) != 0 || ts.tv_sec < 0) return 0;
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  bool write_file(const std::string& name, std::string_view bytes, std::string& error) {
    const std::string temp = spool_format::temp_name(name);
    // O_EXCL: sequence numbers are never reused, so an existing file is not ours
    // to overwrite. O_NOFOLLOW: never write through a planted symlink.
    const int fd = ::openat(dir_fd_, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return fail_errno(error, "cannot create", path_of(temp));
    const char* data = bytes.data();
    std::size_t left = bytes.size();
    const char* failed = nullptr;
    int saved = 0;
    while (left > 0) {
      const ssize_t n = ::write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        saved = (n == 0) ? EIO : errno;
        failed = "cannot write";
        break;
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    if (failed == nullptr && sync_to_disk_ && ::fsync(fd) != 0) {
      saved = errno;
      failed = "cannot sync";
    }
    // close() reports late write errors on some file systems (NFS, quotas).
    if (::close(fd) != 0 && failed == nullptr) {
      saved = errno;
      failed = "cannot write";
    }
    if (failed == nullptr && ::renameat(dir_fd_, temp.c_str(), dir_fd_, name.c_str()) != 0) {
      saved = errno;
      failed = "cannot rename into place";
    }
    if (failed != nullptr) {
      ::unlinkat(dir_fd_, temp.c_str(), 0);
      errno = saved;
      return fail_errno(error, failed, path_of(temp));
    }
    // The file is complete either way; a failed directory sync only weakens the
    // power-loss guarantee, so it is not worth failing the store over.
    if (sync_to_disk_) (void)::fsync(dir_fd_);
    return true;
  }

  // Reads a whole file. `corrupt` tells a file that can never load (gone bad or
  // replaced) from a failure worth retrying.
  bool read_file(Entries::iterator it, std::string& bytes, bool& corrupt, std::string& error) {
    const std::string& name = it->first.second;
    // O_NONBLOCK: a FIFO planted under a spool name must not hang the worker.
    const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) {
        fail_errno(error, "cannot open", path_of(name));
        erase(it);  // someone deleted it: nothing to retry
        return false;
      }
      corrupt = (errno == ELOOP);  // a symlink was planted under the name
      return fail_errno(error, "cannot open", path_of(name));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      fail_errno(error, "cannot stat", path_of(name));
      ::close(fd);
      return false;
    }
    // Stored files never exceed the bound (open() trims, store() refuses), so a
    // bigger one was changed behind our back; not reading it caps the memory.
    if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > max_bytes_) {
      ::close(fd);
      corrupt = true;
      return fail(error, S_ISREG(st.st_mode) ? "larger than the spool's bound" : "not a regular file");
    }
    bytes.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, &bytes[done], bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        fail_errno(error, "cannot read", path_of(name));
        ::close(fd);
        return false;
      }
      if (n == 0) break;  // shrank since fstat: decode reports it as truncated
      done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    ::close(fd);
    return true;
  }

  Entries::iterator find(const SpoolItem& item, std::string& error) {
    const auto it = entries_.find(Key{item.sequence, item.file_name});
    if (it == entries_.end()) {
      fail(error, "spool: " + item.file_name + " is not pending (removed or evicted)");
      return it;
    }
    if (it->second.component != spool_format::uploader_component(item.uploader)) {
      fail(error, "spool: " + item.file_name + " does not belong to uploader " + item.uploader);
      return entries_.end();
    }
    return it;
  }

  bool erase(Entries::iterator it) noexcept {
    const int rc = ::unlinkat(dir_fd_, it->first.second.c_str(), 0);
    const bool gone = rc == 0 || errno == ENOENT;
    bytes_ -= std::min(bytes_, it->second.size);
    entries_.erase(it);
    return gone;
  }

  void remove_corrupt(Entries::iterator it, std::string& error) noexcept {
    SPANPROF_TRY {
      constexpr std::string_view prefix = "spool: ";
      const std::string_view why =
          std::string_view(error).substr(error.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0);
      error = "spool: removed corrupt " + path_of(it->first.second) + ": " + std::string(why);
    } SPANPROF_CATCH_ALL {
    }
    erase(it);
    ++counters_.corrupt_removed;
  }

  // Oldest first, whichever uploader it belongs to: under a long outage the
  // newest profiles are the ones still worth sending.
  void enforce_bound() noexcept {
    while (bytes_ > max_bytes_ && !entries_.empty()) {
      const auto oldest = entries_.begin();
      if (erase(oldest)) {
        ++counters_.evicted;
      } else {
        report_error(ErrorCode::upload_failed, "spool: cannot delete the oldest profile to stay within the bound");
      }
    }
  }

  std::string directory_;
  std::uint64_t max_bytes_;
  bool sync_to_disk_;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  Entries entries_;
  std::uint64_t bytes_ = 0;
  std::uint64_t next_sequence_ = 1;
  SpoolCounters counters_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_SPOOL_HPP_
