// What the HTTP client sends and what it makes of the answer: the request and the
// response as data, the text rules of a request's head (valid header names and
// values, Basic credentials, URL escapes), the response head's lines
// (Retry-After), and classify(), which turns a response into an UploadResult the
// worker knows how to retry. Only in builds with libcurl (its date parser reads
// Retry-After).
#ifndef SPANPROF_DETAIL_DELIVERY_HTTP_MESSAGE_HPP_
#define SPANPROF_DETAIL_DELIVERY_HTTP_MESSAGE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/delivery/uploader.hpp>

#if SPANPROF_WITH_CURL

#include <curl/curl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct HttpRequest {
  std::string url;  // absolute, query included; http:// or https:// only
  std::vector<std::pair<std::string, std::string>> headers;  // per request, on top of HttpOptions::headers
  std::string body;              // sent as is; not copied by libcurl
  std::string content_type;      // e.g. application/x-protobuf; empty: no Content-Type
  std::string content_encoding;  // e.g. gzip; empty: none
};

// Three outcomes: a response arrived (status != 0, transport_error false); the
// network failed (transport_error true: worth retrying); or the request could not
// be made at all — a malformed URL, an unsupported scheme, an invalid header —
// (status 0, transport_error false: retrying cannot help).
struct HttpResponse {
  long status = 0;               // 0 when no HTTP response arrived
  bool transport_error = false;  // connect refused, reset, timeout, DNS, TLS, aborted...
  std::string error;             // curl's error text, or "HTTP 503: <first 200 bytes of body>"; empty on 2xx
  std::string body;              // the first 64 KiB at most
  std::chrono::milliseconds retry_after{-1};  // from a Retry-After header (seconds or HTTP-date), else -1
  bool reused_connection = false;  // sent over a kept-alive connection (no new connect)
};

inline constexpr std::size_t http_response_body_limit = std::size_t{64} << 10;
inline constexpr std::size_t http_error_excerpt_limit = 200;
// How long the transfer loop sleeps before looking at the abort flag again.
inline constexpr int http_abort_poll_ms = 50;

// An error path must not throw; assigning a message can run out of memory.
inline void http_set_text(std::string& out, std::string_view text) noexcept {
  SPANPROF_TRY {
    out.assign(text.data(), text.size());
  } SPANPROF_CATCH_ALL {
    out.clear();
  }
}

// RFC 9110 token: what a header name may be. Anything else could smuggle a second
// header or end the head early.
inline bool http_header_name_valid(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (const char c : name) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && (c == '\0' || std::strchr("!#$%&'*+-.^_`|~", c) == nullptr)) return false;
  }
  return true;
}

inline bool http_header_value_valid(std::string_view value) noexcept {
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

inline void http_append_base64(std::string_view in, std::string& out) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const std::uint32_t n = (std::uint32_t{static_cast<unsigned char>(in[i])} << 16) |
                            (std::uint32_t{static_cast<unsigned char>(in[i + 1])} << 8) |
                            std::uint32_t{static_cast<unsigned char>(in[i + 2])};
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += alphabet[(n >> 6) & 63];
    out += alphabet[n & 63];
  }
  const std::size_t left = in.size() - i;
  if (left == 0) return;
  std::uint32_t n = std::uint32_t{static_cast<unsigned char>(in[i])} << 16;
  if (left == 2) n |= std::uint32_t{static_cast<unsigned char>(in[i + 1])} << 8;
  out += alphabet[(n >> 18) & 63];
  out += alphabet[(n >> 12) & 63];
  out += left == 2 ? alphabet[(n >> 6) & 63] : '=';
  out += '=';
}

// Percent-encodes everything but RFC 3986's unreserved characters, so the result
// is safe in any URL component (a query value, a path segment).
inline std::string url_encode(std::string_view in) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size() + in.size() / 2);
  for (const char c : in) {
    const auto u = static_cast<unsigned char>(c);
    const bool unreserved = (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
                            u == '-' || u == '.' || u == '_' || u == '~';
    if (unreserved) {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

// Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, relative to
// `now`. A date in the past means "now" (0); anything unparsable gives -1.
inline std::chrono::milliseconds http_parse_retry_after(std::string_view value, std::time_t now) noexcept {
  // Capped only so the arithmetic cannot overflow; the uploader applies its own limit.
  constexpr std::int64_t max_seconds = 999'999'999;
  value = trim_ascii_space(value);
  if (value.empty()) return std::chrono::milliseconds(-1);
  if (value.find_first_not_of("0123456789") == std::string_view::npos) {
    std::int64_t seconds = 0;
    for (const char c : value) {
      seconds = seconds * 10 + (c - '0');
      if (seconds > max_seconds) {
        seconds = max_seconds;
        break;
      }
    }
    return std::chrono::milliseconds(seconds * 1000);
  }
  char date[64];  // the longest HTTP-date form (RFC 850) is 41 characters
  if (value.size() >= sizeof date) return std::chrono::milliseconds(-1);
  std::memcpy(date, value.data(), value.size());
  date[value.size()] = '\0';
  const std::time_t when = curl_getdate(date, nullptr);
  if (when == static_cast<std::time_t>(-1)) return std::chrono::milliseconds(-1);
  if (when <= now) return std::chrono::milliseconds(0);
  // curl accepts any year from 1583 on: "Sun, 06 Nov 2147483647 08:49:37 GMT" is
  // 6.8e16 s away, which would overflow as milliseconds.
  const auto seconds = static_cast<std::int64_t>(std::min<std::time_t>(when - now, max_seconds));
  return std::chrono::milliseconds(seconds * 1000);
}

// One line of a response head as libcurl hands it to the header callback (CR LF
// included, the status line too), into `response`. Apart from the callback so the
// parsing of what a server sends can be tested without a server.
inline void http_read_header_line(std::string_view line, std::time_t now, HttpResponse& response) noexcept {
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response head (after a 100 Continue, say): forget the previous one's.
    response.retry_after = std::chrono::milliseconds(-1);
    return;
  }
  const std::size_t colon = line.find(':');
  if (colon != std::string_view::npos && equals_ignoring_ascii_case(trim_ascii_space(line.substr(0, colon)), "Retry-After"))
    response.retry_after = http_parse_retry_after(line.substr(colon + 1), now);
}

// Up to http_error_excerpt_limit bytes of a response body for an error message:
// a body can be anything, and the message may end up on one line of a log.
inline void http_append_excerpt(std::string_view body, std::string& out) {
  const std::size_t start = out.size();
  for (const char c : body.substr(0, http_error_excerpt_limit)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  while (out.size() > start && out.back() == ' ') out.pop_back();
}

// 2xx: ok. Transport errors, 408, 429 and 5xx: retryable. Anything else — another
// 4xx, a redirect (not followed), a request that could not be made — permanent.
// `what` prefixes the message, e.g. "pyroscope".
inline UploadResult classify(const HttpResponse& response, std::string_view what) noexcept {
  const long code = response.status;
  const bool may_retry = response.transport_error || code == 408 || code == 429 || (code >= 500 && code <= 599);
  if (!may_retry && code >= 200 && code <= 299) return UploadResult::ok();
  std::string message;
  SPANPROF_TRY {
    if (!what.empty()) {
      message.assign(what.data(), what.size());
      message += ": ";
    }
    if (!response.error.empty()) {
      message += response.error;
    } else {
      message += code != 0 ? "HTTP " + std::to_string(code) : std::string("request failed");
    }
    if (response.retry_after.count() >= 0)
      message += " (Retry-After " + std::to_string(response.retry_after.count() / 1000) + " s)";
  } SPANPROF_CATCH_ALL {
  }
  return may_retry ? UploadResult::retryable(message, response.retry_after) : UploadResult::permanent(message);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_CURL

#endif  // SPANPROF_DETAIL_DELIVERY_HTTP_MESSAGE_HPP_
