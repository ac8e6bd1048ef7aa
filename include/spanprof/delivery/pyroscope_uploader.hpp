// Sends profiles to Grafana Pyroscope, where Grafana's "Traces to profiles" finds a
// span's samples by their span_id label:
//
//   POST {server}/push.v1.PusherService/Push          (default; Connect, application/proto)
//   body: PushRequest{series: [{labels: __name__=process_cpu|memory, service_name,
//         tags; samples: [{raw_profile: the gzip'd pprof, ID: a UUID}]}]}
//
// or, with PyroscopeOptions::api = ingest, the legacy
//
//   POST {server}/ingest?name=<app>.<cpu|memory>{<tags>}&from&until&format=pprof&...
//
// By default the spans of a 10 s window arrive as one profile per kind
// (PyroscopeOptions::delivery). Needs libcurl (CMake spanprof::curl, Meson's curl
// feature, pkg-config spanprof-curl). Runs on spanprof's background thread only.
#ifndef SPANPROF_DELIVERY_PYROSCOPE_UPLOADER_HPP_
#define SPANPROF_DELIVERY_PYROSCOPE_UPLOADER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/delivery/backend_options.hpp>
#include <spanprof/detail/delivery/http_client.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED && SPANPROF_WITH_CURL

namespace detail {

// push.v1.PushRequest and types.v1.LabelPair (grafana/pyroscope api/push/v1,
// api/types/v1): the field numbers, named.
namespace pyroscope_field {
inline constexpr std::uint32_t push_request_series = 1;
inline constexpr std::uint32_t series_labels = 1, series_samples = 2;
inline constexpr std::uint32_t label_name = 1, label_value = 2;
inline constexpr std::uint32_t sample_raw_profile = 1, sample_id = 2;
}  // namespace pyroscope_field

// Pyroscope's series label names follow Prometheus': [A-Za-z_][A-Za-z0-9_]*.
inline std::string pyroscope_label_name(std::string_view name) {
  std::string out(name);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) out[i] = '_';
  }
  return out.empty() ? std::string("_") : out;
}

inline constexpr std::size_t pyroscope_max_label_value = 2048;

// How Pyroscope names each kind: the Push API's __name__ (profile types
// process_cpu:cpu:nanoseconds:cpu:nanoseconds, memory:alloc_space:bytes:space:bytes,
// wall:wall:nanoseconds:wall:nanoseconds, mutex:delay:nanoseconds:contentions:count),
// or /ingest's name suffix.
constexpr std::string_view pyroscope_profile_name(ProfileKind kind, bool push) noexcept {
  switch (kind) {
    case ProfileKind::cpu: return push ? "process_cpu" : "cpu";
    case ProfileKind::heap: return "memory";
    case ProfileKind::wall: return "wall";
    case ProfileKind::lock: return "mutex";
  }
  return "unknown";
}
inline constexpr std::size_t pyroscope_max_tags = 20;

// A random version-4 UUID, the profile's ID in a push.
inline std::string random_uuid(std::mt19937_64& rng) {
  std::uint64_t high = rng(), low = rng();
  high = (high & ~0xF000ull) | 0x4000ull;                   // version 4
  low = (low & ~(0xC000000000000000ull)) | 0x8000000000000000ull;  // variant 10
  char text[37];
  std::snprintf(text, sizeof text, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(high >> 32),
                static_cast<unsigned>((high >> 16) & 0xFFFF), static_cast<unsigned>(high & 0xFFFF),
                static_cast<unsigned>(low >> 48), static_cast<unsigned long long>(low & 0xFFFFFFFFFFFFull));
  return text;
}

}  // namespace detail

class PyroscopeUploader final : public Uploader {
 public:
  explicit PyroscopeUploader(PyroscopeOptions options) noexcept
      : Uploader("pyroscope", options.delivery), options_(std::move(options)), client_(with_tenant(options_)) {
    while (!options_.server_address.empty() && options_.server_address.back() == '/')
      options_.server_address.pop_back();
    if (options_.application_name.empty()) options_.application_name = "spanprof";
    if (options_.tags.size() > detail::pyroscope_max_tags) {
      report_error(ErrorCode::invalid_configuration, "pyroscope: more than 20 tags; the rest are not sent");
      options_.tags.resize(detail::pyroscope_max_tags);
    }
    for (auto& [name, value] : options_.tags) {
      name = detail::pyroscope_label_name(name);
      if (value.size() > detail::pyroscope_max_label_value) value.resize(detail::pyroscope_max_label_value);
    }
    std::random_device seed;
    rng_.seed((static_cast<std::uint64_t>(seed()) << 32) ^ seed());
  }

  const PyroscopeOptions& options() const noexcept { return options_; }

  // Where a profile is sent; public so operators (and tests) can see it.
  std::string url(const EncodedProfile& profile) const {
    if (options_.api == PyroscopeOptions::Api::push) return options_.server_address + "/push.v1.PusherService/Push";
    return ingest_url(profile);
  }

  // The legacy ingest URL: /ingest?name=<app>.<cpu|memory|wall>{tags}&from&until&...
  std::string ingest_url(const EncodedProfile& profile) const {
    std::string series = label_part(options_.application_name) + "." + std::string(detail::pyroscope_profile_name(profile.record.kind, false));
    series += '{';
    for (std::size_t i = 0; i < options_.tags.size(); ++i) {
      if (i) series += ',';
      series += label_part(options_.tags[i].first) + '=' + label_part(options_.tags[i].second);
    }
    series += '}';
    const SpanRecord& record = profile.record;
    const std::int64_t from_s = record.start_unix_ns / 1'000'000'000;
    // Rounded up, so a span shorter than a second still has until > from.
    const std::int64_t until_s = (record.start_unix_ns + record.duration_ns + 999'999'999) / 1'000'000'000;
    std::string url = options_.server_address + "/ingest?name=" + detail::url_encode(series) +
                      "&from=" + std::to_string(from_s) +
                      "&until=" + std::to_string(until_s > from_s ? until_s : from_s + 1) +
                      "&format=pprof&spyName=spanprof";
    if (record.kind != ProfileKind::heap && record.period_ns > 0)
      url += "&sampleRate=" + std::to_string(1'000'000'000 / record.period_ns);
    return url;
  }

 protected:
  // push: a serialized PushRequest with one series; ingest: the pprof itself.
  Status do_encode(const EncodedProfile& profile, const EncodeInput& input, std::string& payload) override {
    std::string pprof;
    if (Status relabelled = relabelled_pprof(input, pprof); !relabelled) return relabelled;
    if (options_.api == PyroscopeOptions::Api::ingest) {
      payload = std::move(pprof);
      return Status::ok();
    }
    namespace f = detail::pyroscope_field;
    payload.clear();
    detail::ProtobufWriter out(payload);
    out.message_field(f::push_request_series, [&](detail::ProtobufWriter& series) {
      auto label = [&](std::string_view name, std::string_view value) {
        series.message_field(f::series_labels, [&](detail::ProtobufWriter& pair) {
          pair.bytes_field(f::label_name, name);
          pair.bytes_field(f::label_value, value);
        });
      };
      // Pyroscope names the profile type from __name__ and the pprof's sample types.
      label("__name__", detail::pyroscope_profile_name(profile.record.kind, true));
      label("service_name", options_.application_name);
      for (const auto& [name, value] : options_.tags) label(name, value);
      series.message_field(f::series_samples, [&](detail::ProtobufWriter& sample) {
        sample.bytes_field(f::sample_raw_profile, pprof);
        sample.bytes_field(f::sample_id, detail::random_uuid(rng_));
      });
    });
    return Status::ok();
  }

  UploadResult do_send(const EncodedProfile& profile, std::string_view payload, const UploadContext& context) override {
    if (options_.server_address.empty()) return UploadResult::permanent("pyroscope: no server address configured");
    detail::HttpRequest request;
    request.url = url(profile);
    request.body.assign(payload.data(), payload.size());
    if (options_.api == PyroscopeOptions::Api::push) {
      request.content_type = "application/proto";
      request.headers.emplace_back("Connect-Protocol-Version", "1");
    } else {
      request.content_type = "application/octet-stream";
    }
    return detail::classify(client_.post(request, context.cancelled), "pyroscope");
  }

 private:
  // The pprof with drop_labels and rename_labels applied (and label values cut to
  // Pyroscope's limit): re-encoded from the model when there is anything to change.
  Status relabelled_pprof(const EncodeInput& input, std::string& pprof) {
    if (options_.drop_labels.empty() && options_.rename_labels.empty()) {
      pprof.assign(input.pprof_gzip.data(), input.pprof_gzip.size());
      return Status::ok();
    }
    if (input.profile == nullptr) return Status(ErrorCode::encoding_failed, "pyroscope: relabelling needs the profile's model");
    Profile copy = *input.profile;
    materialize_span_labels(copy);  // the records' labels become each sample's own, to relabel
    auto relabel = [&](std::vector<Label>& labels) {
      std::vector<Label> kept;
      for (Label& label : labels) {
        if (std::find(options_.drop_labels.begin(), options_.drop_labels.end(), label.key) != options_.drop_labels.end())
          continue;
        for (const auto& [from, to] : options_.rename_labels)
          if (label.key == from) label.key = detail::pyroscope_label_name(to);
        if (label.str.size() > detail::pyroscope_max_label_value) label.str.resize(detail::pyroscope_max_label_value);
        kept.push_back(std::move(label));
      }
      labels = std::move(kept);
    };
    for (Sample& sample : copy.samples) relabel(sample.labels);
    return encode_pprof_gzip(copy, pprof);
  }

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

  PyroscopeOptions options_;
  detail::HttpClient client_;
  std::mt19937_64 rng_;
};

#elif !SPANPROF_ENABLED

// Compiled out with the SDK: the type exists so one source builds both ways, and
// needs no libcurl.
class PyroscopeUploader final : public Uploader {
 public:
  explicit PyroscopeUploader(PyroscopeOptions options) noexcept
      : Uploader("pyroscope", options.delivery), options_(std::move(options)) {}
  const PyroscopeOptions& options() const noexcept { return options_; }

 protected:
  UploadResult do_send(const EncodedProfile&, std::string_view, const UploadContext&) override { return UploadResult::ok(); }

 private:
  PyroscopeOptions options_;
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_PYROSCOPE_UPLOADER_HPP_
