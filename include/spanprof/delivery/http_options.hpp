// How spanprof's HTTP uploaders (Pyroscope, OTLP) reach their backend: timeouts,
// authentication, extra headers, TLS and proxy. A plain struct so it can be filled
// from code or from environment variables; nothing here needs libcurl.
#ifndef SPANPROF_DELIVERY_HTTP_OPTIONS_HPP_
#define SPANPROF_DELIVERY_HTTP_OPTIONS_HPP_

#include <spanprof/config.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

struct HttpOptions {
  // Uploads run on spanprof's background thread: a backend that does not answer
  // delays later profiles (and shutdown), so both limits are short by default.
  // Zero or less takes libcurl's meaning of 0: 300 s to connect, no overall limit.
  std::chrono::milliseconds connect_timeout{2000};  // TCP and TLS handshake
  std::chrono::milliseconds timeout{10000};         // the whole request, connect included

  // Authorization. When both are set the bearer token is sent and the basic
  // credentials are ignored: a token is the more specific choice (Grafana Cloud
  // takes either). An "Authorization" entry in `headers` replaces both.
  std::string basic_auth_user, basic_auth_password;  // "Basic base64(user:password)" when user is set
  std::string bearer_token;                          // "Bearer <token>" when set

  // Extra headers on every request, e.g. {"X-Scope-OrgID", "tenant"}. Each name is
  // sent once, with its last value: a name given here replaces a header spanprof
  // would send itself (Content-Type, Authorization, ...), and an uploader's
  // per-request headers replace these in turn. A name must be an HTTP token and a
  // value must not hold CR, LF or NUL: such a request is refused, never sent.
  std::vector<std::pair<std::string, std::string>> headers;

  // TLS. Turning verification off is for test setups only: it accepts any server.
  bool verify_tls = true;
  std::string ca_file;           // CA bundle (PEM) instead of the system's
  std::string client_cert_file;  // mTLS: client certificate (PEM)
  std::string client_key_file;   // mTLS: its private key (PEM); empty: inside client_cert_file

  // e.g. "http://proxy:3128". Empty: libcurl's default, which honours the
  // http_proxy / https_proxy / all_proxy environment variables.
  std::string proxy;
  // Hosts reached without the proxy, comma-separated ("*": all of them). Empty:
  // libcurl's default, the no_proxy environment variable.
  std::string no_proxy;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_HTTP_OPTIONS_HPP_
