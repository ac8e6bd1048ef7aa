// The span a request's headers carry, read by OpenTelemetry's propagator: W3C
// trace context, B3, Jaeger — whichever the service set as OpenTelemetry's global
// text map propagator, so a profile is found under the span the rest of the
// service's telemetry names. Needs only the OpenTelemetry API headers.
//
//   #include <spanprof/opentelemetry_propagation.hpp>
//
//   spanprof::SpanContext span = spanprof::otel::extract_span(request_headers);
//
//   // a gRPC server (grpc.hpp): each RPC under the span its client's propagator sent
//   spanprof::grpc::ServerOptions options;
//   options.span_from = [](const spanprof::grpc::Metadata& metadata) {
//     return spanprof::otel::extract_span(metadata);
//   };
//
// A companion header, as opentelemetry.hpp is (not part of the single header).
#ifndef SPANPROF_OPENTELEMETRY_PROPAGATION_HPP_
#define SPANPROF_OPENTELEMETRY_PROPAGATION_HPP_

#include <spanprof/opentelemetry.hpp>

#include <opentelemetry/context/context.h>
#include <opentelemetry/context/propagation/global_propagator.h>
#include <opentelemetry/context/propagation/text_map_propagator.h>
#include <opentelemetry/nostd/string_view.h>
#include <opentelemetry/trace/context.h>

#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace otel {

namespace detail {

// Read-only: any map from header name to value whose key type is made from
// (pointer, length) and whose values have data() and size() — std::map and
// std::multimap of std::string, gRPC's metadata of grpc::string_ref.
template <class Headers>
class HeadersCarrier final : public ::opentelemetry::context::propagation::TextMapCarrier {
 public:
  explicit HeadersCarrier(const Headers& headers) noexcept : headers_(headers) {}

  nostd::string_view Get(nostd::string_view key) const noexcept override {
    SPANPROF_TRY {
      const auto found = headers_.find(typename Headers::key_type(key.data(), key.size()));
      if (found == headers_.end()) return {};
      return nostd::string_view(found->second.data(), found->second.size());
    } SPANPROF_CATCH_ALL {
      return {};
    }
  }
  void Set(nostd::string_view, nostd::string_view) noexcept override {}

 private:
  const Headers& headers_;
};

}  // namespace detail

// The span `headers` carry, as OpenTelemetry's global propagator extracts it; when
// it finds none (OpenTelemetry's default propagator is a no-op until the service
// sets one), the W3C `traceparent` header. Invalid when neither is there.
template <class Headers>
SpanContext extract_span(const Headers& headers) noexcept {
  const detail::HeadersCarrier<Headers> carrier(headers);
  // An empty context, not the thread's current one: a span active on this thread
  // (another request's) is not what these headers carry.
  ::opentelemetry::context::Context empty;
  const auto propagator = ::opentelemetry::context::propagation::GlobalTextMapPropagator::GetGlobalPropagator();
  if (propagator) {
    const ::opentelemetry::context::Context extracted = propagator->Extract(carrier, empty);
    const api::SpanContext context = api::GetSpan(extracted)->GetContext();
    if (context.IsValid()) return to_span_context(context);
  }
  const nostd::string_view traceparent = carrier.Get("traceparent");
  if (traceparent.empty()) return {};
  return parse_traceparent(std::string_view(traceparent.data(), traceparent.size())).context;
}

}  // namespace otel
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_OPENTELEMETRY_PROPAGATION_HPP_
