// What an HTTP backend sends back to the Pyroscope and OTLP uploaders: the lines of
// a response head (http_read_header_line, which reads Retry-After as seconds or an
// HTTP-date), the body excerpt that goes into an error message, and classify();
// plus the encoders whose output goes into a request (headers, URLs, base64).
//
// Input: 4 bytes of "now" (seconds since the epoch), 2 bytes of status, then a
// response head; the head is also the body, the Retry-After value, a header name
// and value, and the text to encode.
//
// Invariants: Retry-After is -1 (absent or unreadable) or a whole number of seconds
// from 0 (a date already past) to 999999999 (either form: a date may lie in the
// year 2147483647), delay-seconds read exactly; a status line forgets an earlier
// Retry-After; an excerpt is at most 200 printable bytes; a valid header name or
// value cannot end a header line; url_encode() and base64 decode back to their
// input.
#include "fuzz_support.hpp"

#include <spanprof/detail/delivery/http_client.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

namespace {

using std::chrono::milliseconds;
namespace sd = spanprof::detail;

milliseconds expected_delay_seconds(std::string_view digits) {
  std::int64_t seconds = 0;
  for (const char c : digits) {
    seconds = seconds * 10 + (c - '0');
    if (seconds > 999'999'999) return milliseconds(999'999'999'000);
  }
  return milliseconds(seconds * 1000);
}

void check_retry_after(std::string_view value, std::time_t now) {
  const milliseconds parsed = sd::http_parse_retry_after(value, now);
  const std::string_view trimmed = sd::trim_ascii_space(value);
  if (!trimmed.empty() && trimmed.find_first_not_of("0123456789") == std::string_view::npos) {
    SPANPROF_FUZZ_CHECK(parsed == expected_delay_seconds(trimmed));
    return;
  }
  SPANPROF_FUZZ_CHECK(parsed.count() == -1 ||
                      (parsed.count() >= 0 && parsed.count() <= 999'999'999'000 && parsed.count() % 1000 == 0));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void check_url_encode(std::string_view text) {
  const std::string encoded = sd::url_encode(text);
  std::string decoded;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    const char c = encoded[i];
    if (c != '%') {
      SPANPROF_FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
                          c == '.' || c == '_' || c == '~');
      decoded += c;
      continue;
    }
    SPANPROF_FUZZ_CHECK(encoded.size() - i >= 3 && hex_value(encoded[i + 1]) >= 0 && hex_value(encoded[i + 2]) >= 0);
    decoded += static_cast<char>(hex_value(encoded[i + 1]) * 16 + hex_value(encoded[i + 2]));
    i += 2;
  }
  SPANPROF_FUZZ_CHECK(decoded == text);
}

void check_base64(std::string_view text) {
  std::string encoded;
  sd::http_append_base64(text, encoded);
  SPANPROF_FUZZ_CHECK(encoded.size() == (text.size() + 2) / 3 * 4);
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string decoded;
  std::uint32_t bits = 0;
  int held = 0;
  for (const char c : encoded) {
    if (c == '=') break;
    const std::size_t v = alphabet.find(c);
    SPANPROF_FUZZ_CHECK(v != std::string_view::npos);
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    held += 6;
    if (held >= 8) {
      held -= 8;
      decoded += static_cast<char>((bits >> held) & 0xff);
    }
  }
  SPANPROF_FUZZ_CHECK(decoded == text);
}

void fuzz_one(std::string_view bytes) {
  spanprof_fuzz::Input input(bytes);
  std::uint32_t now32 = 0;
  for (int i = 0; i < 4; ++i) now32 = now32 << 8 | input.byte();
  const auto now = static_cast<std::time_t>(now32);
  const long status = static_cast<long>(input.byte()) << 8 | input.byte();
  const std::string_view head = input.rest();

  sd::HttpResponse response;
  response.status = status;
  std::string_view lines = head;
  while (!lines.empty()) {
    const std::size_t end = lines.find('\n');
    const std::string_view line = lines.substr(0, end == std::string_view::npos ? lines.size() : end + 1);
    lines.remove_prefix(line.size());
    const milliseconds before = response.retry_after;
    sd::http_read_header_line(line, now, response);
    const std::size_t colon = line.find(':');
    if (line.rfind("HTTP/", 0) == 0) {
      SPANPROF_FUZZ_CHECK(response.retry_after.count() == -1);
    } else if (colon != std::string_view::npos &&
               sd::equals_ignoring_ascii_case(sd::trim_ascii_space(line.substr(0, colon)), "retry-after")) {
      SPANPROF_FUZZ_CHECK(response.retry_after == sd::http_parse_retry_after(line.substr(colon + 1), now));
      check_retry_after(line.substr(colon + 1), now);
    } else {
      SPANPROF_FUZZ_CHECK(response.retry_after == before);
    }
  }
  check_retry_after(head, now);

  std::string excerpt = "HTTP 500: ";
  sd::http_append_excerpt(head, excerpt);
  SPANPROF_FUZZ_CHECK(excerpt.size() <= 10 + sd::http_error_excerpt_limit);
  for (std::size_t i = 10; i < excerpt.size(); ++i)
    SPANPROF_FUZZ_CHECK(static_cast<unsigned char>(excerpt[i]) >= 0x20 && excerpt[i] != 0x7f);
  SPANPROF_FUZZ_CHECK(excerpt.size() == 10 || excerpt.back() != ' ');

  response.body = std::string(head.substr(0, sd::http_response_body_limit));
  response.transport_error = (status & 1) != 0 && status < 0x100;
  const spanprof::UploadResult result = sd::classify(response, "fuzz");
  const bool success = !response.transport_error && status >= 200 && status <= 299;
  SPANPROF_FUZZ_CHECK(result.is_ok() == success);
  if (!success)
    SPANPROF_FUZZ_CHECK(result.message().rfind("fuzz: ", 0) == 0 && result.code() == spanprof::ErrorCode::upload_failed &&
                        (!result.may_retry() || result.retry_after() == response.retry_after));

  if (sd::http_header_name_valid(head))
    SPANPROF_FUZZ_CHECK(head.find_first_of(std::string_view(":\r\n \t\0", 6)) == std::string_view::npos);
  SPANPROF_FUZZ_CHECK(sd::http_header_value_valid(head) ==
                      (head.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos));
  check_url_encode(head);
  check_base64(head);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
