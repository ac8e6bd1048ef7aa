// Where the HTTP uploaders send profiles: plain structs, filled from code or from
// the environment (runtime/environment.hpp). Nothing here needs libcurl, so a
// build without it can still read and report these settings.
#ifndef SPANPROF_DELIVERY_BACKEND_OPTIONS_HPP_
#define SPANPROF_DELIVERY_BACKEND_OPTIONS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/delivery/http_options.hpp>
#include <spanprof/profile/otlp_encoder.hpp>

#include <string>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

struct PyroscopeOptions {
  std::string server_address;    // e.g. http://pyroscope:4040 (a path prefix is kept)
  std::string application_name;  // the series name; empty: "spanprof"
  // Static series labels, e.g. {"env", "prod"}. Keep them low-cardinality: span ids
  // belong in the samples' labels (where spanprof puts them), not here.
  std::vector<std::pair<std::string, std::string>> tags;
  std::string tenant_id;  // X-Scope-OrgID, for multi-tenant Pyroscope
  HttpOptions http;       // auth, TLS, timeouts, extra headers
};

struct OtlpOptions {
  // Base URL (OTEL_EXPORTER_OTLP_ENDPOINT), e.g. http://collector:4318; the
  // signal path /v1development/profiles is appended.
  std::string endpoint;
  // Full URL used as is (OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT); wins over endpoint.
  std::string profiles_endpoint;
  OtlpResource resource;  // service.name and friends
  HttpOptions http;       // headers (OTEL_EXPORTER_OTLP_HEADERS), TLS, timeouts
  bool gzip = true;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_BACKEND_OPTIONS_HPP_
