// Sends each profile to an OpenTelemetry collector as OTLP/HTTP:
//
//   POST {endpoint}/v1development/profiles
//   Content-Type: application/x-protobuf, Content-Encoding: gzip
//   body: ExportProfilesServiceRequest (otlp_encoder.hpp), its dictionary's link
//         table holding the span's trace and span ids, every sample linked to it
//
// OTLP profiles are a Development signal: the collector needs the feature gate
// `service.profilesSupport`. Needs libcurl (spanprof::curl / `spanprof-curl`).
#ifndef SPANPROF_DELIVERY_OTLP_UPLOADER_HPP_
#define SPANPROF_DELIVERY_OTLP_UPLOADER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/gzip.hpp>
#include <spanprof/delivery/backend_options.hpp>
#include <spanprof/delivery/http_client.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/otlp_encoder.hpp>

#include <string>
#include <utility>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED && SPANPROF_WITH_CURL

class OtlpUploader final : public BasicUploader<std::mutex> {
 public:
  explicit OtlpUploader(OtlpOptions options) noexcept : options_(std::move(options)), client_(options_.http) {
    if (!options_.profiles_endpoint.empty()) {
      url_ = options_.profiles_endpoint;
    } else if (!options_.endpoint.empty()) {
      url_ = options_.endpoint;
      while (!url_.empty() && url_.back() == '/') url_.pop_back();
      url_ += otlp_profiles_http_path;
    }
  }

  std::string_view name() const noexcept override { return "otlp"; }
  const OtlpOptions& options() const noexcept { return options_; }
  const std::string& url() const noexcept { return url_; }

 protected:
  UploadResult upload_(const EncodedProfile& profile) override {
    if (url_.empty()) return UploadResult::permanent("otlp: no endpoint configured");
    if (profile.profile == nullptr) return UploadResult::permanent("otlp: the profile's symbolized model is missing");
    const std::string_view reason = to_string(profile.reason);
    const OtlpSpanIdentity identity{profile.span,          profile.span_name,  profile.kind,
                                    profile.start_unix_ns, profile.duration_ns, reason};
    std::string message, error;
    if (!encode_otlp_profiles_request(*profile.profile, identity, options_.resource, message, error))
      return UploadResult::permanent(error);
    detail::HttpRequest request;
    request.url = url_;
    request.content_type = std::string(otlp_profiles_content_type);
    if (options_.gzip) {
      if (!detail::gzip_compress(message, request.body, error)) return UploadResult::permanent("otlp: " + error);
      request.content_encoding = "gzip";
    } else {
      request.body = std::move(message);
    }
    return detail::classify(client_.post(request, profile.cancelled), "otlp");
  }

 private:
  OtlpOptions options_;
  detail::HttpClient client_;
  std::string url_;
};

#elif !SPANPROF_ENABLED

// Compiled out with the SDK: the type exists so one source builds both ways, and
// needs no libcurl.
class OtlpUploader final : public BasicUploader<NullMutex> {
 public:
  explicit OtlpUploader(OtlpOptions options) noexcept : options_(std::move(options)) {}
  std::string_view name() const noexcept override { return "otlp"; }
  const OtlpOptions& options() const noexcept { return options_; }

 protected:
  UploadResult upload_(const EncodedProfile&) override { return UploadResult::ok(); }

 private:
  OtlpOptions options_;
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_OTLP_UPLOADER_HPP_
