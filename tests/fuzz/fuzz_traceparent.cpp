// The traceparent header a request arrives with, and the bare hex ids.
//
// Invariants: a header parses exactly when it is W3C-valid, and then re-encodes to
// the same lowercase text (a later version keeps its ids and flags, not its extra
// fields); a refusal leaves an invalid context; an id parses exactly when it is
// 2*N lowercase hex digits, and re-encodes to itself.
#include "fuzz_support.hpp"

#include <spanprof/span/span_context.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using spanprof::SpanId;
using spanprof::TraceId;

bool is_lower_hex(std::string_view text) {
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

template <class Id>
void check_id(std::string_view text) {
  const Id id = Id::from_hex(text);
  const bool well_formed = text.size() == Id::hex_size && is_lower_hex(text);
  if (!well_formed) {
    SPANPROF_FUZZ_CHECK(!id.valid());
    return;
  }
  SPANPROF_FUZZ_CHECK(id.to_hex() == text);
  SPANPROF_FUZZ_CHECK(id.valid() == (text.find_first_not_of('0') != std::string_view::npos));
}

// An independent reading of W3C trace context level 1, section 3.2.
bool w3c_valid(std::string_view h) {
  if (h.size() < 55 || !is_lower_hex(h.substr(0, 2)) || h.substr(0, 2) == "ff") return false;
  if (h.substr(0, 2) == "00" ? h.size() != 55 : (h.size() > 55 && h[55] != '-')) return false;
  if (h[2] != '-' || h[35] != '-' || h[52] != '-') return false;
  const std::string_view trace = h.substr(3, 32), span = h.substr(36, 16), flags = h.substr(53, 2);
  return is_lower_hex(trace) && is_lower_hex(span) && is_lower_hex(flags) && trace != std::string(32, '0') &&
         span != std::string(16, '0');
}

void fuzz_one(std::string_view header) {
  const spanprof::TraceparentParse parsed = spanprof::parse_traceparent(header);
  SPANPROF_FUZZ_CHECK(static_cast<bool>(parsed) == w3c_valid(header));
  if (parsed) {
    SPANPROF_FUZZ_CHECK(parsed.context.valid());
    const std::string again = spanprof::format_traceparent(parsed.context);
    SPANPROF_FUZZ_CHECK(again.substr(2) == header.substr(2, 53));
    if (header.substr(0, 2) == "00") SPANPROF_FUZZ_CHECK(again == header);
    SPANPROF_FUZZ_CHECK(spanprof::parse_traceparent(again).context.trace_id == parsed.context.trace_id);
  } else {
    SPANPROF_FUZZ_CHECK(!parsed.context.valid() && parsed.context.flags.value == 0);
    SPANPROF_FUZZ_CHECK(!spanprof::to_string(parsed.error).empty());
  }

  check_id<TraceId>(header);
  check_id<SpanId>(header);
  // The ids where a header keeps them, so header-shaped inputs reach both paths.
  if (header.size() >= 52) {
    check_id<TraceId>(header.substr(3, 32));
    check_id<SpanId>(header.substr(36, 16));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
