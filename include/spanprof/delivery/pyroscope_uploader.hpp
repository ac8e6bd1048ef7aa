// Sends each profile to Grafana Pyroscope's ingest API, where Grafana's "Traces to
// profiles" finds it by the span_id label on its samples:
//
//   POST {server}/ingest?name=<app>.<cpu|memory>{<tags>}&from=<unix s>&until=<unix s>
//        &format=pprof&spyName=spanprof&sampleRate=<hz>
//   body: the gzip'd pprof as written
//
// Needs libcurl (link spanprof::curl in CMake, the `spanprof-curl` Meson
// dependency). Runs on spanprof's background thread only; a request thread never
// waits for it.
#ifndef SPANPROF_DELIVERY_PYROSCOPE_UPLOADER_HPP_
#define SPANPROF_DELIVERY_PYROSCOPE_UPLOADER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/delivery/backend_options.hpp>
#include <spanprof/delivery/http_client.hpp>
#include <spanprof/delivery/uploader.hpp>

#include <string>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED && SPANPROF_WITH_CURL

class PyroscopeUploader final : public BasicUploader<std::mutex> {
 public:
  explicit PyroscopeUploader(PyroscopeOptions options) noexcept
      : options_(std::move(options)), client_(with_tenant(options_)) {
    while (!options_.server_address.empty() && options_.server_address.back() == '/')
      options_.server_address.pop_back();
    if (options_.application_name.empty()) options_.application_name = "spanprof";
  }

  std::string_view name() const noexcept override { return "pyroscope"; }
  const PyroscopeOptions& options() const noexcept { return options_; }

  // The ingest URL for a profile; public so operators (and tests) can see it.
  std::string ingest_url(const EncodedProfile& profile) const {
    std::string series = series_name(options_.application_name) + (profile.kind == ProfileKind::cpu ? ".cpu" : ".memory");
    series += '{';
    for (std::size_t i = 0; i < options_.tags.size(); ++i) {
      if (i) series += ',';
      series += label_part(options_.tags[i].first) + '=' + label_part(options_.tags[i].second);
    }
    series += '}';
    const std::int64_t from_s = profile.start_unix_ns / 1'000'000'000;
    // Rounded up, so a span shorter than a second still has until > from.
    const std::int64_t until_s = (profile.start_unix_ns + profile.duration_ns + 999'999'999) / 1'000'000'000;
    std::string url = options_.server_address + "/ingest?name=" + detail::url_encode(series) +
                      "&from=" + std::to_string(from_s) +
                      "&until=" + std::to_string(until_s > from_s ? until_s : from_s + 1) +
                      "&format=pprof&spyName=spanprof";
    if (profile.kind == ProfileKind::cpu && profile.period_ns > 0)
      url += "&sampleRate=" + std::to_string(1'000'000'000 / profile.period_ns);
    return url;
  }

 protected:
  UploadResult upload_(const EncodedProfile& profile) override {
    if (options_.server_address.empty()) return UploadResult::permanent("pyroscope: no server address configured");
    detail::HttpRequest request;
    request.url = ingest_url(profile);
    request.body = profile.pprof_gzip;
    request.content_type = "application/octet-stream";
    return detail::classify(client_.post(request, profile.cancelled), "pyroscope");
  }

 private:
  static HttpOptions with_tenant(const PyroscopeOptions& options) {
    HttpOptions http = options.http;
    if (!options.tenant_id.empty()) http.headers.emplace_back("X-Scope-OrgID", options.tenant_id);
    return http;
  }

  // Pyroscope parses `app{k=v,...}`: these characters would change its meaning.
  static std::string label_part(const std::string& text) {
    std::string out = text;
    for (char& c : out)
      if (c == ',' || c == '{' || c == '}' || c == '=' || c == '"' || static_cast<unsigned char>(c) < 0x20) c = '_';
    return out;
  }
  static std::string series_name(const std::string& text) { return label_part(text); }

  PyroscopeOptions options_;
  detail::HttpClient client_;
};

#elif !SPANPROF_ENABLED

// Compiled out with the SDK: the type exists so one source builds both ways, and
// needs no libcurl.
class PyroscopeUploader final : public BasicUploader<NullMutex> {
 public:
  explicit PyroscopeUploader(PyroscopeOptions options) noexcept : options_(std::move(options)) {}
  std::string_view name() const noexcept override { return "pyroscope"; }
  const PyroscopeOptions& options() const noexcept { return options_; }

 protected:
  UploadResult upload_(const EncodedProfile&) override { return UploadResult::ok(); }

 private:
  PyroscopeOptions options_;
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_PYROSCOPE_UPLOADER_HPP_
