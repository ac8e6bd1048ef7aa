// Uploaders an operator configures with the environment variables the ecosystem
// already uses, so a binary can be pointed at a backend without a rebuild:
//
//   Pyroscope  PYROSCOPE_SERVER_ADDRESS (turns it on), PYROSCOPE_APPLICATION_NAME,
//              PYROSCOPE_AUTH_TOKEN, PYROSCOPE_BASIC_AUTH_USER,
//              PYROSCOPE_BASIC_AUTH_PASSWORD, PYROSCOPE_TENANT_ID
//   OTLP       OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
//              (either turns it on), OTEL_EXPORTER_OTLP_HEADERS,
//              OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
//
// A malformed value is reported (invalid_configuration) and turns that uploader
// off; the others still run. options_from_environment() calls this when spanprof
// is built with libcurl (SPANPROF_WITH_CURL).
#ifndef SPANPROF_ENVIRONMENT_UPLOADERS_HPP_
#define SPANPROF_ENVIRONMENT_UPLOADERS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/text.hpp>
#include <spanprof/error.hpp>
#include <spanprof/otlp_uploader.hpp>
#include <spanprof/pyroscope_uploader.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

inline bool is_http_url(std::string_view url) {
  return (url.rfind("http://", 0) == 0 && url.size() > 7) || (url.rfind("https://", 0) == 0 && url.size() > 8);
}

inline int hex_digit(char c) {
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
inline bool parse_key_value_list(std::string_view text, std::vector<std::pair<std::string, std::string>>& out,
                                 std::string& error) {
  out.clear();
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim_ascii_space(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos || trim_ascii_space(item.substr(0, equals)).empty()) {
      error = "'" + std::string(item.substr(0, 64)) + "' is not key=value";
      return false;
    }
    std::string value;
    if (!percent_decode(trim_ascii_space(item.substr(equals + 1)), value)) {
      error = "bad percent-encoding in the value of '" + std::string(trim_ascii_space(item.substr(0, equals))) + "'";
      return false;
    }
    out.emplace_back(std::string(trim_ascii_space(item.substr(0, equals))), std::move(value));
  }
  return true;
}

inline void refuse_uploader(const char* what, const std::string& why) {
  report_error(ErrorCode::invalid_configuration, std::string(what) + ": " + why + "; that uploader is off");
}

inline std::shared_ptr<Uploader> pyroscope_from_environment() {
  const std::string server = environment("PYROSCOPE_SERVER_ADDRESS");
  if (server.empty()) return nullptr;
  if (!is_http_url(server)) {
    refuse_uploader("PYROSCOPE_SERVER_ADDRESS", "'" + server.substr(0, 64) + "' is not an http:// or https:// URL");
    return nullptr;
  }
  PyroscopeOptions options;
  options.server_address = server;
  options.application_name = environment("PYROSCOPE_APPLICATION_NAME");
  if (options.application_name.empty()) options.application_name = environment("OTEL_SERVICE_NAME");
  options.tenant_id = environment("PYROSCOPE_TENANT_ID");
  options.http.bearer_token = environment("PYROSCOPE_AUTH_TOKEN");
  options.http.basic_auth_user = environment("PYROSCOPE_BASIC_AUTH_USER");
  options.http.basic_auth_password = environment("PYROSCOPE_BASIC_AUTH_PASSWORD");
  if (!options.http.basic_auth_password.empty() && options.http.basic_auth_user.empty()) {
    refuse_uploader("PYROSCOPE_BASIC_AUTH_PASSWORD", "set without PYROSCOPE_BASIC_AUTH_USER");
    return nullptr;
  }
  return std::make_shared<PyroscopeUploader>(std::move(options));
}

inline std::shared_ptr<Uploader> otlp_from_environment() {
  OtlpOptions options;
  options.profiles_endpoint = environment("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT");
  options.endpoint = environment("OTEL_EXPORTER_OTLP_ENDPOINT");
  if (options.profiles_endpoint.empty() && options.endpoint.empty()) return nullptr;
  const char* variable =
      options.profiles_endpoint.empty() ? "OTEL_EXPORTER_OTLP_ENDPOINT" : "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT";
  const std::string& url = options.profiles_endpoint.empty() ? options.endpoint : options.profiles_endpoint;
  if (!is_http_url(url)) {
    refuse_uploader(variable, "'" + url.substr(0, 64) + "' is not an http:// or https:// URL");
    return nullptr;
  }
  std::string error;
  if (!parse_key_value_list(environment("OTEL_EXPORTER_OTLP_HEADERS"), options.http.headers, error)) {
    refuse_uploader("OTEL_EXPORTER_OTLP_HEADERS", error);
    return nullptr;
  }
  std::vector<std::pair<std::string, std::string>> attributes;
  if (!parse_key_value_list(environment("OTEL_RESOURCE_ATTRIBUTES"), attributes, error)) {
    refuse_uploader("OTEL_RESOURCE_ATTRIBUTES", error);
    return nullptr;
  }
  // OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES.
  std::string service = environment("OTEL_SERVICE_NAME");
  for (auto& [key, value] : attributes) {
    if (key == "service.name") {
      if (service.empty()) service = value;
      continue;
    }
    bool duplicate = false;
    for (const auto& kept : options.resource.attributes) duplicate = duplicate || kept.first == key;
    if (!duplicate) options.resource.attributes.emplace_back(key, value);
  }
  options.resource.attributes.emplace_back("service.name", service.empty() ? "unknown_service" : service);
  return std::make_shared<OtlpUploader>(std::move(options));
}

}  // namespace detail

inline std::vector<std::shared_ptr<Uploader>> uploaders_from_environment() noexcept {
  std::vector<std::shared_ptr<Uploader>> uploaders;
  try {
    if (auto pyroscope = detail::pyroscope_from_environment()) uploaders.push_back(std::move(pyroscope));
    if (auto otlp = detail::otlp_from_environment()) uploaders.push_back(std::move(otlp));
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory reading the uploaders' environment variables");
  }
  return uploaders;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENVIRONMENT_UPLOADERS_HPP_
