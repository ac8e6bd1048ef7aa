// Small ASCII text helpers shared by the parsers of environment variables and
// HTTP headers. Locale-independent on purpose: these are protocol strings.
#ifndef SPANPROF_DETAIL_TEXT_HPP_
#define SPANPROF_DETAIL_TEXT_HPP_

#include <spanprof/config.hpp>

#include <cstddef>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

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

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_TEXT_HPP_
