// The zero-code-change OpenTelemetry mode's cost per span, next to the bare SDK's:
// a span the head sampler turns down must cost next to nothing on top of the
// tracer's own StartSpan + End.
#include <spanprof/opentelemetry.hpp>

#include <benchmark/benchmark.h>

#include <opentelemetry/sdk/trace/processor.h>
#include <opentelemetry/sdk/trace/span_data.h>
#include <opentelemetry/sdk/trace/tracer_provider.h>
#include <opentelemetry/sdk/trace/tracer_provider_factory.h>

#include <memory>

namespace {

namespace trace_api = opentelemetry::trace;
namespace nostd = opentelemetry::nostd;
namespace sdktrace = opentelemetry::sdk::trace;

// Keeps no span: what is measured is the SDK's span, not an exporter.
class DropEverything final : public sdktrace::SpanProcessor {
 public:
  std::unique_ptr<sdktrace::Recordable> MakeRecordable() noexcept override {
    return std::unique_ptr<sdktrace::Recordable>(new sdktrace::SpanData());
  }
  void OnStart(sdktrace::Recordable&, const trace_api::SpanContext&) noexcept override {}
  void OnEnd(std::unique_ptr<sdktrace::Recordable>&&) noexcept override {}
  bool ForceFlush(std::chrono::microseconds) noexcept override { return true; }
  bool Shutdown(std::chrono::microseconds) noexcept override { return true; }
};

nostd::shared_ptr<trace_api::TracerProvider> sdk_provider() {
  std::shared_ptr<sdktrace::TracerProvider> sdk =
      sdktrace::TracerProviderFactory::Create(std::unique_ptr<sdktrace::SpanProcessor>(new DropEverything()));
  return nostd::shared_ptr<trace_api::TracerProvider>(sdk);
}

void start_spanprof(std::shared_ptr<spanprof::HeadSampler> sampler) {
  spanprof::Options options(spanprof::ignore_environment);
  options.head_sampler = std::move(sampler);
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [](const spanprof::EncodedProfile&, std::string_view) { return spanprof::UploadResult::ok(); }));
  spanprof::start(options);
}

void run_spans(benchmark::State& state, nostd::shared_ptr<trace_api::TracerProvider> provider) {
  auto tracer = provider->GetTracer("bench");
  for (auto _ : state) {
    auto span = tracer->StartSpan("GET /items");
    span->End();
  }
}

void otel_sdk_span_bare(benchmark::State& state) { run_spans(state, sdk_provider()); }

void otel_sdk_span_profiling_turned_down(benchmark::State& state) {
  start_spanprof(std::make_shared<spanprof::NeverSampler>());
  run_spans(state, spanprof::otel::ProfilingTracerProvider::wrap(sdk_provider()));
  spanprof::shutdown();
}

// Every span selected, so no parent lookup: what the selection costs, by difference.
void otel_sdk_span_profiling_turned_down_all_spans(benchmark::State& state) {
  start_spanprof(std::make_shared<spanprof::NeverSampler>());
  spanprof::otel::ProfilingTracerOptions all;
  all.spans = spanprof::otel::ProfilingTracerOptions::Spans::all;
  run_spans(state, spanprof::otel::ProfilingTracerProvider::wrap(sdk_provider(), all));
  spanprof::shutdown();
}

void otel_sdk_span_profiled(benchmark::State& state) {
  start_spanprof(nullptr);
  run_spans(state, spanprof::otel::ProfilingTracerProvider::wrap(sdk_provider()));
  spanprof::shutdown();
}

}  // namespace

BENCHMARK(otel_sdk_span_bare);
BENCHMARK(otel_sdk_span_profiling_turned_down);
BENCHMARK(otel_sdk_span_profiling_turned_down_all_spans);
BENCHMARK(otel_sdk_span_profiled);
BENCHMARK_MAIN();
