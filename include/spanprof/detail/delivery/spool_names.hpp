// The names of a spool's files: which files in the directory are the spool's,
// which uploader each belongs to and in what order they were stored. Kept apart
// from the content (detail/delivery/spool_format.hpp) and from the spool that keeps the
// directory (detail/delivery/spool.hpp): the names found in a directory are untrusted
// input, so their parser is fuzzed alone (fuzz_spool_name).
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
// Besides these the directory holds a file's hidden temporary name while it is
// written (".<name>.tmp") and the spool's lock file; every other name in it is
// somebody else's.
#ifndef SPANPROF_DETAIL_DELIVERY_SPOOL_NAMES_HPP_
#define SPANPROF_DETAIL_DELIVERY_SPOOL_NAMES_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span/span_context.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {
// One namespace with the content's (spool_format.hpp): a file's name and its bytes
// are two halves of one format on disk.
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

}  // namespace spool_format
}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_SPOOL_NAMES_HPP_
