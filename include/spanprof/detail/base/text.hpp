// Small ASCII text helpers and number parsers shared by the parsers of environment
// variables and HTTP headers, and the copy of a span's name on a request thread.
// Locale-independent on purpose: these are protocol strings.
#ifndef SPANPROF_DETAIL_BASE_TEXT_HPP_
#define SPANPROF_DETAIL_BASE_TEXT_HPP_

#include <spanprof/config.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <locale.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Span names are a few bytes: copied in overlapping words. std::memcpy of a size
// only known to be small compiles to `rep movs`, whose start-up was
// most of the opening guard's own time in a busy server (perf).
inline void copy_span_name(char* to, const char* from, std::size_t n) noexcept {
  if (n >= 16) {
    for (std::size_t at = 0; at + 16 <= n; at += 16) std::memcpy(to + at, from + at, 16);
    std::memcpy(to + n - 16, from + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(to, from, 8);
    std::memcpy(to + n - 8, from + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(to, from, 4);
    std::memcpy(to + n - 4, from + n - 4, 4);
  } else {
    for (std::size_t at = 0; at < n; ++at) to[at] = from[at];
  }
}

constexpr bool is_ascii_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

constexpr std::string_view trim_ascii_space(std::string_view text) noexcept {
  while (!text.empty() && is_ascii_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_ascii_space(text.back())) text.remove_suffix(1);
  return text;
}

constexpr char ascii_lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr bool equals_ignoring_ascii_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

// A plain decimal integer, the whole text and nothing else (an optional sign, then
// digits). No strtol: it skips leading blanks, accepts "0x" and depends on errno.
inline bool parse_integer(std::string_view text, std::int64_t& out) noexcept {
  bool negative = false;
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.size() > 18) return false;  // 18 digits always fit an int64
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  out = negative ? -value : value;
  return true;
}

// errno's text, untranslated. strerror translates it through gettext, which
// read-locks glibc's locale lock: a fork() while a spanprof thread holds it (the
// symbolizer probing for a debug file that is not there) leaves the child's next
// newlocale or freelocale (p11-kit's destructor, at exit) waiting for good.
inline const char* error_text(int error) noexcept {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  const char* text = ::strerrordesc_np(error);
  return text != nullptr ? text : "unknown error";
#else
  return std::strerror(error);
#endif
}

// A plain decimal number ("0.25", "1e-3", "10"), the whole text and nothing else:
// NaN, infinities and hex floats are refused before strtod sees them, and strtod
// runs in the "C" locale so a host that set a comma decimal locale still reads
// "0.5" as a half.
inline bool parse_decimal(std::string_view text, double& out) noexcept {
  char buffer[128];
  if (text.empty() || text.size() >= sizeof buffer) return false;
  for (char c : text) {
    const bool allowed = (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    if (!allowed) return false;
  }
  std::copy(text.begin(), text.end(), buffer);
  buffer[text.size()] = '\0';
  const locale_t c_locale = ::newlocale(LC_NUMERIC_MASK, "C", static_cast<locale_t>(nullptr));
  const locale_t previous = c_locale ? ::uselocale(c_locale) : static_cast<locale_t>(nullptr);
  char* end = nullptr;
  const double value = std::strtod(buffer, &end);
  if (c_locale) {
    ::uselocale(previous);
    ::freelocale(c_locale);
  }
  if (end != buffer + text.size() || !std::isfinite(value)) return false;
  out = value;
  return true;
}

// Outside text echoed in a message: at most `max` bytes, "..." when cut, and
// anything but printable ASCII as '?', so a message stays one short line that
// cannot forge another or drive a terminal.
inline std::string printable_excerpt(std::string_view text, std::size_t max) {
  std::string out(text.substr(0, max));
  for (char& c : out) c = c >= 0x20 && c < 0x7f ? c : '?';
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_TEXT_HPP_
