// How spanprof reads environment variables: the readers of one value (a bounded
// integer, a choice, a URL, a key=value list...) and EnvironmentSettings, what the
// environment said once parsed. Which variables exist, and which reader and range
// each one gets, is the table of detail/runtime/settings.hpp; apply_environment()
// (options-inl.hpp) turns the parsed environment into Options.
//
// Precedence, the same for every setting: code > environment > built-in default.
// spanprof::Options() starts from the built-in defaults and overlays what the
// environment sets; whatever the program then assigns wins (runtime/options.hpp).
//
// A bad value never stops the program: it is recorded as a ConfigurationProblem
// (start() reports each through the error channel and returns them all) and the
// default is used instead; a bad value for a backend turns that uploader off.
#ifndef SPANPROF_DETAIL_RUNTIME_ENVIRONMENT_HPP_
#define SPANPROF_DETAIL_RUNTIME_ENVIRONMENT_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/runtime/options.hpp>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

struct Setting;  // detail/runtime/setting.hpp

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// The environment, parsed. A variable that sets a member of Options is parsed into
// `options`, a copy of the built-in defaults, and apply_environment() copies only
// the members whose variable was accepted: the program's own values are kept for
// the others. The other variables feed objects spanprof builds (the head sampler,
// the tail policy, the trigger, the uploaders); what each of them is when its
// variable is unset is stated here, where docs/configuration.md reads it from.
struct EnvironmentSettings {
  Options options{ignore_environment};
  std::vector<const Setting*> accepted;  // the rows of the table whose variable was read and accepted

  std::string head_sampler;  // a name of head_sampler_names; empty: every span
  double head_sampler_argument = 1.0;
  std::optional<double> max_profiles_per_second;
  std::string keep = "all";  // a rule of keep_rules
  std::int64_t slow_threshold_ms = 100;
  std::optional<double> trigger_factor;
  std::uint32_t trigger_spans = AdaptiveTriggerOptions{}.spans_to_profile;
  std::int64_t upload_window_ms = Delivery::batched().window.count();
  std::string pyroscope_server_address, pyroscope_application_name, pyroscope_auth_token;
  std::string pyroscope_basic_auth_user, pyroscope_basic_auth_password, pyroscope_tenant_id;
  std::string otlp_profiles_endpoint, otlp_endpoint;
  KeyValues otlp_headers, resource_attributes;
  bool pyroscope_refused = false;  // a Pyroscope variable was bad: that uploader is off
  bool otlp_refused = false;
  std::vector<ConfigurationProblem> problems;
};

// ---- the readers of one value ----------------------------------------------------

inline bool parse_bounded_integer(std::string_view text, std::int64_t low, std::int64_t high, std::int64_t& out,
                                  std::string& why) {
  std::int64_t value = 0;
  if (!parse_integer(trim_ascii_space(text), value) || value < low || value > high) {
    why = "is not an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
    return false;
  }
  out = value;
  return true;
}

// Matches `text` (ASCII case and surrounding blanks ignored) against `choices`;
// returns the index or -1 and explains.
inline int parse_choice(std::string_view text, const char* const* choices, std::size_t count, std::string& why) {
  const std::string_view wanted = trim_ascii_space(text);
  for (std::size_t index = 0; index < count; ++index)
    if (equals_ignoring_ascii_case(wanted, choices[index])) return static_cast<int>(index);
  why = "is not one of";
  for (std::size_t index = 0; index < count; ++index) why += std::string(" ") + choices[index];
  return -1;
}

inline bool is_http_url(std::string_view url) {
  return (url.rfind("http://", 0) == 0 && url.size() > 7) || (url.rfind("https://", 0) == 0 && url.size() > 8);
}

inline bool parse_http_url(std::string_view text, std::string& out, std::string& why) {
  const std::string_view url = trim_ascii_space(text);
  if (!is_http_url(url)) {
    why = "is not an http:// or https:// URL";
    return false;
  }
  // Refused here, not at the first upload: a blank or a terminal escape is never
  // part of a URL, and the uploader would otherwise turn on for nothing.
  for (const char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      why = "contains a blank or a control character";
      return false;
    }
  }
  out = std::string(url);
  return true;
}

inline int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int high = hex_digit(in[i + 1]), low = hex_digit(in[i + 2]);
    if (high < 0 || low < 0) return false;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return true;
}

// The W3C-baggage-like list OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS
// use: key=value pairs separated by commas, values percent-encoded.
inline bool parse_key_value_list(std::string_view text, KeyValues& out,
                                 std::string& why) {
  out.clear();
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim_ascii_space(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos || trim_ascii_space(item.substr(0, equals)).empty()) {
      why = "has '" + std::string(item.substr(0, 64)) + "', which is not key=value";
      return false;
    }
    std::string value;
    if (!percent_decode(trim_ascii_space(item.substr(equals + 1)), value)) {
      why = "has bad percent-encoding in the value of '" +
            printable_excerpt(trim_ascii_space(item.substr(0, equals)), 64) + "'";
      return false;
    }
    out.emplace_back(std::string(trim_ascii_space(item.substr(0, equals))), std::move(value));
  }
  return true;
}

// Free text: anything printable. A control character (a newline in a token, say)
// would end up in an HTTP header, a URL or a log line, so it is refused.
inline bool parse_text(std::string_view text, std::string& out, std::string& why) {
  const std::string_view value = trim_ascii_space(text);
  for (char c : value) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      why = "contains a control character";
      return false;
    }
  }
  out = std::string(value);
  return true;
}

// A directory spanprof may have to create: refused only when something that is
// not a directory is already in its place.
inline bool parse_directory(std::string_view text, std::string& out, std::string& why) {
  std::string path;
  if (!parse_text(text, path, why)) return false;
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && !S_ISDIR(status.st_mode)) {
    why = "names something that is not a directory";
    return false;
  }
  out = std::move(path);
  return true;
}

inline bool is_set(const char* name) noexcept {
  const char* value = std::getenv(name);
  return value != nullptr && !trim_ascii_space(value).empty();
}

inline bool environment_is_one_of(const char* name, std::initializer_list<const char*> values) noexcept {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  for (const char* candidate : values)
    if (equals_ignoring_ascii_case(trim_ascii_space(value), candidate)) return true;
  return false;
}

// Echoes at most 64 bytes of the value (printable_excerpt): an environment
// variable can be anything, and a problem must stay one short line.
inline ConfigurationProblem environment_problem(const char* name, std::string_view value, const std::string& why,
                                                const char* consequence) {
  std::string message = std::string(name) + "=\"" + printable_excerpt(value, 64) + "\" " +
                        printable_excerpt(why, why.size()) + "; " + consequence;
  return {name, std::move(message)};
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_RUNTIME_ENVIRONMENT_HPP_
