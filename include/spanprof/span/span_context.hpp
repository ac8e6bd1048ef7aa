// Span identity: W3C trace and span ids as value types, and strict traceparent
// parsing. Nothing here allocates or throws.
#ifndef SPANPROF_SPAN_SPAN_CONTEXT_HPP_
#define SPANPROF_SPAN_SPAN_CONTEXT_HPP_

#include <spanprof/base/error_code.hpp>
#include <spanprof/config.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

constexpr char lower_hex_digits[] = "0123456789abcdef";

// Strict lowercase hex, as W3C trace context requires: 'A'..'F' are rejected.
constexpr int lower_hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The same by a table, without a branch per digit: a server reads a header of
// random ids per request, and the branches above mispredict on about every
// other digit (docs/cost.md, "A gRPC server, every RPC profiled").
struct LowerHexTable {
  std::int8_t value[256] = {};
  constexpr LowerHexTable() noexcept {
    for (int c = 0; c < 256; ++c) value[c] = static_cast<std::int8_t>(lower_hex_value(static_cast<char>(c)));
  }
};
inline constexpr LowerHexTable lower_hex_table{};

// A digit's value, or -1.
constexpr int lower_hex_digit(char c) noexcept { return lower_hex_table.value[static_cast<unsigned char>(c)]; }

template <std::size_t N>
class HexId {
 public:
  static constexpr std::size_t size = N;
  static constexpr std::size_t hex_size = 2 * N;

  constexpr HexId() noexcept = default;
  explicit constexpr HexId(const std::array<std::uint8_t, N>& bytes) noexcept : bytes_(bytes) {}
  explicit HexId(const std::uint8_t* bytes) noexcept { std::memcpy(bytes_.data(), bytes, N); }

  // Parses exactly 2*N lowercase hex digits; anything else gives the invalid id.
  static constexpr HexId from_hex(std::string_view hex) noexcept {
    HexId id;
    if (hex.size() != hex_size) return HexId{};
    int invalid = 0;  // negative once any digit was not one
    for (std::size_t i = 0; i < N; ++i) {
      const int hi = lower_hex_digit(hex[2 * i]);
      const int lo = lower_hex_digit(hex[2 * i + 1]);
      invalid |= hi | lo;
      id.bytes_[i] = static_cast<std::uint8_t>(static_cast<unsigned>(hi) << 4 | static_cast<unsigned>(lo));
    }
    return invalid < 0 ? HexId{} : id;
  }

  // All-zero ids are invalid by the W3C spec.
  constexpr bool valid() const noexcept {
    // No early exit, and byte loads: a span copied just before the guard is read
    // back from the stores that wrote it, without a store-forwarding stall.
    std::uint8_t any = 0;
    for (auto b : bytes_) any |= b;
    return any != 0;
  }

  // Writes exactly 2*N characters, no terminator (as opentelemetry-cpp's ToLowerBase16).
  constexpr void to_lower_hex(char* out) const noexcept {
    for (std::size_t i = 0; i < N; ++i) {
      out[2 * i] = lower_hex_digits[bytes_[i] >> 4];
      out[2 * i + 1] = lower_hex_digits[bytes_[i] & 0xf];
    }
  }

  std::string to_hex() const {
    std::string s(hex_size, '0');
    to_lower_hex(s.data());
    return s;
  }

  constexpr const std::array<std::uint8_t, N>& bytes() const noexcept { return bytes_; }

  friend constexpr bool operator==(const HexId& a, const HexId& b) noexcept {
    for (std::size_t i = 0; i < N; ++i)
      if (a.bytes_[i] != b.bytes_[i]) return false;
    return true;
  }
  friend constexpr bool operator!=(const HexId& a, const HexId& b) noexcept { return !(a == b); }

 private:
  std::array<std::uint8_t, N> bytes_{};
};

}  // namespace detail

using TraceId = detail::HexId<16>;  // 32 hex digits
using SpanId = detail::HexId<8>;    // 16 hex digits

struct TraceFlags {
  static constexpr std::uint8_t sampled_bit = 0x01;
  std::uint8_t value = 0;
  constexpr bool sampled() const noexcept { return (value & sampled_bit) != 0; }
};

struct SpanContext {
  TraceId trace_id;
  SpanId span_id;
  TraceFlags flags;

  constexpr bool valid() const noexcept { return trace_id.valid() && span_id.valid(); }
};

enum class TraceparentError : std::uint8_t {
  none,
  wrong_length,      // not 55 characters (version 00 allows nothing after)
  bad_delimiter,     // a '-' missing where the format puts one
  bad_version,       // not two lowercase hex digits, or the forbidden version ff
  bad_trace_id,      // not 32 lowercase hex digits
  zero_trace_id,     // all zeros
  bad_span_id,       // not 16 lowercase hex digits
  zero_span_id,      // all zeros
  bad_flags,         // not two lowercase hex digits
};

constexpr std::string_view to_string(TraceparentError e) noexcept {
  switch (e) {
    case TraceparentError::none: return "ok";
    case TraceparentError::wrong_length: return "wrong length";
    case TraceparentError::bad_delimiter: return "missing '-' delimiter";
    case TraceparentError::bad_version: return "bad version";
    case TraceparentError::bad_trace_id: return "trace id is not 32 lowercase hex digits";
    case TraceparentError::zero_trace_id: return "trace id is all zeros";
    case TraceparentError::bad_span_id: return "span id is not 16 lowercase hex digits";
    case TraceparentError::zero_span_id: return "span id is all zeros";
    case TraceparentError::bad_flags: return "flags are not 2 lowercase hex digits";
  }
  return "unknown";
}

// Read as a Status reads (status.hpp): `if (!parsed)`, code(), message(). Not a
// Status itself, so that parsing stays constexpr and never allocates.
struct TraceparentParse {
  SpanContext context;  // invalid unless error == none
  TraceparentError error = TraceparentError::none;
  constexpr explicit operator bool() const noexcept { return error == TraceparentError::none; }
  constexpr bool is_ok() const noexcept { return error == TraceparentError::none; }
  constexpr ErrorCode code() const noexcept { return ErrorCode::invalid_traceparent; }  // for a failure
  constexpr std::string_view message() const noexcept { return is_ok() ? std::string_view() : to_string(error); }
};

// Strict W3C trace-context parsing: "vv-<32 hex>-<16 hex>-ff". A future version
// (> 00) may append "-..." fields, which are ignored as the spec says.
constexpr TraceparentParse parse_traceparent(std::string_view header) noexcept {
  constexpr std::size_t base_length = 55;
  TraceparentParse result;
  auto fail = [&](TraceparentError e) {
    result.context = SpanContext{};
    result.error = e;
    return result;
  };
  if (header.size() < base_length) return fail(TraceparentError::wrong_length);
  const int v_hi = detail::lower_hex_value(header[0]);
  const int v_lo = detail::lower_hex_value(header[1]);
  if (v_hi < 0 || v_lo < 0) return fail(TraceparentError::bad_version);
  const int version = v_hi << 4 | v_lo;
  if (version == 0xff) return fail(TraceparentError::bad_version);
  if (version == 0 && header.size() != base_length) return fail(TraceparentError::wrong_length);
  if (version != 0 && header.size() > base_length && header[base_length] != '-')
    return fail(TraceparentError::wrong_length);
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return fail(TraceparentError::bad_delimiter);

  const auto trace_id = TraceId::from_hex(header.substr(3, 32));
  if (!trace_id.valid()) {
    for (char c : header.substr(3, 32))
      if (detail::lower_hex_value(c) < 0) return fail(TraceparentError::bad_trace_id);
    return fail(TraceparentError::zero_trace_id);
  }
  const auto span_id = SpanId::from_hex(header.substr(36, 16));
  if (!span_id.valid()) {
    for (char c : header.substr(36, 16))
      if (detail::lower_hex_value(c) < 0) return fail(TraceparentError::bad_span_id);
    return fail(TraceparentError::zero_span_id);
  }
  const int f_hi = detail::lower_hex_value(header[53]);
  const int f_lo = detail::lower_hex_value(header[54]);
  if (f_hi < 0 || f_lo < 0) return fail(TraceparentError::bad_flags);

  result.context.trace_id = trace_id;
  result.context.span_id = span_id;
  result.context.flags.value = static_cast<std::uint8_t>(f_hi << 4 | f_lo);
  return result;
}

// Writes the 55-character version-00 header, no terminator.
constexpr void format_traceparent(const SpanContext& context, char* out) noexcept {
  out[0] = '0';
  out[1] = '0';
  out[2] = '-';
  context.trace_id.to_lower_hex(out + 3);
  out[35] = '-';
  context.span_id.to_lower_hex(out + 36);
  out[52] = '-';
  out[53] = detail::lower_hex_digits[context.flags.value >> 4];
  out[54] = detail::lower_hex_digits[context.flags.value & 0xf];
}

inline std::string format_traceparent(const SpanContext& context) {
  std::string s(55, '0');
  format_traceparent(context, s.data());
  return s;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SPAN_SPAN_CONTEXT_HPP_
