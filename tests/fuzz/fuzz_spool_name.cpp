// The names Spool::open() finds in its directory (parse_file_name, is_temp_name),
// and the names it makes from an uploader's name (uploader_component).
//
// Invariants: an accepted name is exactly the name file_name() makes from what was
// parsed, so two parses can never disagree about one file; a temporary name is
// one of those behind a dot, as temp_name() makes it; a component made from any
// uploader name fits max_component, survives a round trip through a file name,
// and, when not hashed, unescapes to the uploader's name (distinct names never
// share files).
#include "fuzz_support.hpp"

#include <spanprof/detail/delivery/spool_names.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

namespace format = spanprof::detail::spool_format;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The inverse of uploader_component() for names it did not hash.
bool unescape(std::string_view component, std::string& out) {
  for (std::size_t i = 0; i < component.size(); ++i) {
    if (component[i] != '%') {
      out += component[i];
      continue;
    }
    if (component.size() - i < 3 || hex_value(component[i + 1]) < 0 || hex_value(component[i + 2]) < 0) return false;
    out += static_cast<char>(hex_value(component[i + 1]) * 16 + hex_value(component[i + 2]));
    i += 2;
  }
  return true;
}

void fuzz_one(std::string_view text) {
  format::ParsedName parsed;
  if (format::parse_file_name(text, parsed)) {
    SPANPROF_FUZZ_CHECK(parsed.sequence != UINT64_MAX && parsed.stored_unix_ns >= 0);
    SPANPROF_FUZZ_CHECK(format::file_name(parsed.sequence, parsed.stored_unix_ns, parsed.component) == text);
    SPANPROF_FUZZ_CHECK(format::is_temp_name(format::temp_name(text)));
    SPANPROF_FUZZ_CHECK(!format::is_temp_name(text));
  }
  if (format::is_temp_name(text)) {
    SPANPROF_FUZZ_CHECK(format::parse_file_name(text.substr(1, text.size() - 1 - format::temp_suffix.size()), parsed));
  }

  const std::string component = format::uploader_component(text);
  SPANPROF_FUZZ_CHECK(!component.empty() || text.empty());
  SPANPROF_FUZZ_CHECK(component.size() <= format::max_component);
  const std::size_t size = text.size();
  const std::uint64_t sequence = size * 0x9E3779B97F4A7C15ull % UINT64_MAX;
  const std::string name = format::file_name(sequence, static_cast<std::int64_t>(size), component);
  format::ParsedName back;
  SPANPROF_FUZZ_CHECK(format::parse_file_name(name, back));
  SPANPROF_FUZZ_CHECK(back.sequence == sequence && back.stored_unix_ns == static_cast<std::int64_t>(size) &&
                      back.component == component);
  const bool hashed = component.find('~') != std::string::npos;
  if (!hashed) {
    std::string original;
    SPANPROF_FUZZ_CHECK(unescape(component, original) && original == text);
  } else {
    // The prefix, cut back by at most two to keep an escape whole, '~' and 16 hex digits.
    SPANPROF_FUZZ_CHECK(component.size() >= format::hashed_prefix - 2 + 17 &&
                        component.size() <= format::hashed_prefix + 17);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
