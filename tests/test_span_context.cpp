#include "support/catch.hpp"

#include <spanprof/spanprof.hpp>

#include <string>

using spanprof::parse_traceparent;
using spanprof::TraceparentError;

namespace {
constexpr const char* valid_header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
}

TEST_CASE("a valid traceparent yields its ids and flags") {
  const auto parsed = parse_traceparent(valid_header);
  REQUIRE(parsed);
  CHECK(parsed.context.trace_id.to_hex() == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(parsed.context.span_id.to_hex() == "00f067aa0ba902b7");
  CHECK(parsed.context.flags.sampled());
  CHECK(parsed.context.valid());
  CHECK(spanprof::format_traceparent(parsed.context) == valid_header);
}

TEST_CASE("traceparent parsing is strict W3C") {
  struct Case {
    std::string header;
    TraceparentError expected;
  };
  const Case cases[] = {
      {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", TraceparentError::bad_trace_id},  // uppercase
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", TraceparentError::bad_span_id},
      // Bytes over 0x7f (a signed char's negative values) are no digits either.
      {"00-4bf92f3577b34da6a3ce929d0e0e47\xe9" "6-00f067aa0ba902b7-01", TraceparentError::bad_trace_id},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902\xff" "7-01", TraceparentError::bad_span_id},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A", TraceparentError::bad_flags},
      {"0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceparentError::bad_version},
      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", TraceparentError::zero_trace_id},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", TraceparentError::zero_span_id},
      {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceparentError::bad_version},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", TraceparentError::wrong_length},
      {"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", TraceparentError::wrong_length},
      {"00-4bf92f3577b34da6a3ce929d0e0e47360-0f067aa0ba902b7-01", TraceparentError::bad_delimiter},
      {"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceparentError::bad_delimiter},
      {"", TraceparentError::wrong_length},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", TraceparentError::wrong_length},
  };
  for (const auto& c : cases) {
    INFO("header: " << c.header);
    const auto parsed = parse_traceparent(c.header);
    CHECK_FALSE(parsed);
    CHECK(parsed.error == c.expected);
    CHECK(parsed.code() == spanprof::ErrorCode::invalid_traceparent);  // read as a Status reads
    CHECK(parsed.message() == spanprof::to_string(c.expected));
    CHECK_FALSE(parsed.context.valid());
  }
}

TEST_CASE("a future traceparent version may carry extra fields") {
  const auto parsed = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra");
  REQUIRE(parsed);
  CHECK(parsed.context.span_id.to_hex() == "00f067aa0ba902b7");
  CHECK_FALSE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

TEST_CASE("ids are value types that round-trip through hex") {
  const auto trace = spanprof::TraceId::from_hex("0123456789abcdef0123456789abcdef");
  CHECK(trace.valid());
  char out[32];
  trace.to_lower_hex(out);
  CHECK(std::string(out, 32) == "0123456789abcdef0123456789abcdef");
  CHECK_FALSE(spanprof::SpanId::from_hex("0123456789abcdeg").valid());
  CHECK_FALSE(spanprof::SpanId::from_hex("0123").valid());
  CHECK_FALSE(spanprof::SpanId{}.valid());
  static_assert(spanprof::parse_traceparent(valid_header), "parsing is constexpr");
}

namespace custom {
struct MySpan {
  std::string traceparent;
  std::string name;
};
}  // namespace custom

template <>
struct spanprof::span_adapter<custom::MySpan> {
  static SpanContext context(const custom::MySpan& s) noexcept { return parse_traceparent(s.traceparent).context; }
  static std::string_view name(const custom::MySpan& s) noexcept { return s.name; }
};

TEST_CASE("any span type plugs in through span_adapter") {
  static_assert(spanprof::is_span_v<custom::MySpan>);
  static_assert(spanprof::is_span_v<spanprof::SpanContext>);
  static_assert(!spanprof::is_span_v<int>);
  const custom::MySpan span{valid_header, "GET /"};
  CHECK(spanprof::span_adapter<custom::MySpan>::context(span).span_id.to_hex() == "00f067aa0ba902b7");
}
