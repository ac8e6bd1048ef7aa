// Sends each profile to an OpenTelemetry collector as OTLP/HTTP:
//
//   POST {endpoint}/v1development/profiles
//   Content-Type: application/x-protobuf, Content-Encoding: gzip
//   body: ExportProfilesServiceRequest (otlp_encoder.hpp), its dictionary's link
//         table holding every span's trace and span ids, each sample linked to its
//         span; by default the spans of a 10 s window in one request per kind
//
// OTLP profiles are a Development signal: the collector needs the feature gate
// `service.profilesSupport`. Needs libcurl (spanprof::curl / `spanprof-curl`).
#ifndef SPANPROF_DELIVERY_OTLP_UPLOADER_HPP_
#define SPANPROF_DELIVERY_OTLP_UPLOADER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/delivery/backend_options.hpp>
#include <spanprof/detail/delivery/http_client.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/otlp_encoder.hpp>

#include <string>
#include <utility>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED && SPANPROF_WITH_CURL

class OtlpUploader final : public Uploader {
 public:
  explicit OtlpUploader(OtlpOptions options) noexcept
      : Uploader("otlp", options.delivery), options_(std::move(options)), client_(options_.http) {
    if (!options_.profiles_endpoint.empty()) {
      url_ = options_.profiles_endpoint;
    } else if (!options_.endpoint.empty()) {
      url_ = options_.endpoint;
      while (!url_.empty() && url_.back() == '/') url_.pop_back();
      url_ += otlp_profiles_http_path;
    }
  }

  const OtlpOptions& options() const noexcept { return options_; }
  const std::string& url() const noexcept { return url_; }

 protected:
  // The ExportProfilesServiceRequest, gzip'd unless configured otherwise: what is
  // posted, and what the spool keeps during an outage (no re-encoding after).
  Status do_encode(const EncodedProfile& profile, const EncodeInput& input, std::string& payload) override {
    if (input.profile == nullptr) return Status(ErrorCode::encoding_failed, "otlp: the profile's symbolized model is missing");
    std::string message;
    if (Status encoded = encode_otlp_profiles_request(*input.profile, profile.record, options_.resource, message); !encoded)
      return encoded;
    if (!options_.gzip) {
      payload = std::move(message);
      return Status::ok();
    }
    if (Status compressed = detail::gzip_compress(message, payload); !compressed)
      return Status(compressed.code(), "otlp: " + compressed.message());
    return Status::ok();
  }

  UploadResult do_send(const EncodedProfile&, std::string_view payload, const UploadContext& context) override {
    if (url_.empty()) return UploadResult::permanent("otlp: no endpoint configured");
    detail::HttpRequest request;
    request.url = url_;
    request.content_type = std::string(otlp_profiles_content_type);
    if (options_.gzip) request.content_encoding = "gzip";
    request.body.assign(payload.data(), payload.size());
    return detail::classify(client_.post(request, context.cancelled), "otlp");
  }

 private:
  OtlpOptions options_;
  detail::HttpClient client_;
  std::string url_;
};

#elif !SPANPROF_ENABLED

// Compiled out with the SDK: the type exists so one source builds both ways, and
// needs no libcurl.
class OtlpUploader final : public Uploader {
 public:
  explicit OtlpUploader(OtlpOptions options) noexcept
      : Uploader("otlp", options.delivery), options_(std::move(options)) {}
  const OtlpOptions& options() const noexcept { return options_; }

 protected:
  UploadResult do_send(const EncodedProfile&, std::string_view, const UploadContext&) override { return UploadResult::ok(); }

 private:
  OtlpOptions options_;
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_OTLP_UPLOADER_HPP_
