// Where the HTTP uploaders send profiles: plain structs, filled from code or from
// the environment (detail/runtime/environment.hpp). Nothing here needs libcurl, so a
// build without it can still read and report these settings.
#ifndef SPANPROF_DELIVERY_BACKEND_OPTIONS_HPP_
#define SPANPROF_DELIVERY_BACKEND_OPTIONS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/delivery/http_options.hpp>
#include <spanprof/profile/otlp_encoder.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

struct PyroscopeOptions {
  // Grafana Pyroscope's ingestion endpoint. push: POST /push.v1.PusherService/Push
  // (the Connect API, stable and public in Pyroscope's docs, which call /ingest its
  // legacy path): explicit series labels, CPU and heap of a window in one request.
  // ingest: POST /ingest, for servers older than Pyroscope 1.0 and proxies that
  // only know it.
  enum class Api : std::uint8_t { push, ingest };
  Api api = Api::push;
  std::string server_address;    // e.g. http://pyroscope:4040 (a path prefix is kept)
  std::string application_name;  // the service_name series label; empty: "spanprof"
  // Static series labels, e.g. {"env", "prod"}. Keep them low-cardinality: span ids
  // belong in the samples' labels (where spanprof puts them), not here. Names must
  // be [A-Za-z_][A-Za-z0-9_]*; at most 20 are sent (a series has at most 30 label
  // names, and the samples' span_name and profile_reason count too).
  std::vector<std::pair<std::string, std::string>> tags;
  // Pyroscope keeps span_id and trace_id per sample, but makes every other sample
  // label a series label: each distinct span_name or profile_reason value is a
  // series (default limit: 5,000 active series per tenant). Drop labels you do not
  // query on, or rename them to what your dashboards expect.
  std::vector<std::string> drop_labels;                            // e.g. {"profile_reason"}
  std::vector<std::pair<std::string, std::string>> rename_labels;  // e.g. {{"span_name", "endpoint"}}
  std::string tenant_id;  // X-Scope-OrgID, for multi-tenant Pyroscope
  HttpOptions http;       // auth, TLS, timeouts, extra headers
  // Default: the spans of 10 s merged into one profile per kind, as pyroscope-go
  // sends, cut early at 16,000 samples (Pyroscope's limit) or ~1 MiB of pprof.
  Delivery delivery = Delivery::batched();
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
  // Default: the spans of 10 s in one ExportProfilesServiceRequest per kind.
  Delivery delivery = Delivery::batched();
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_BACKEND_OPTIONS_HPP_
