// A service traced with opentelemetry-cpp, profiled by spanprof both ways:
//  * zero-code-change: the TracerProvider is wrapped, so every root span
//    ("POST /checkout") is profiled from StartSpan to End with no guard in the code;
//  * a guard: one handler profiles its own child span ("price cart") explicitly.
// Spans whose profile was kept carry pyroscope.profile.id (their span id), which is
// what Grafana's "Traces to profiles" follows. The in-memory exporter stands in
// for your OTLP exporter; the program prints each exported span, its link and the
// hottest function of its profile.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/opentelemetry.hpp>

#include "example_support.hpp"

#include <opentelemetry/exporters/memory/in_memory_span_data.h>
#include <opentelemetry/exporters/memory/in_memory_span_exporter_factory.h>
#include <opentelemetry/sdk/trace/simple_processor_factory.h>
#include <opentelemetry/sdk/trace/tracer_provider.h>
#include <opentelemetry/sdk/trace/tracer_provider_factory.h>
#include <opentelemetry/trace/provider.h>
#include <opentelemetry/trace/scope.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trace_api = opentelemetry::trace;
namespace nostd = opentelemetry::nostd;

namespace {

__attribute__((noinline)) double validate_cart(std::int64_t cpu_ns) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  double x = 1.0;
  while (example::thread_cpu_ns() < end)
    for (int i = 1; i < 5000; ++i) x += 1.0 / i;
  return x;
}

__attribute__((noinline)) double compute_prices(std::int64_t cpu_ns) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  double x = 1.0;
  while (example::thread_cpu_ns() < end)
    for (int i = 1; i < 5000; ++i) x *= 1.000001;
  return x;
}

double checkout(trace_api::Tracer& tracer, int request) {
  // The root span: profiled by the wrapped provider, no guard here.
  auto span = tracer.StartSpan("POST /checkout");
  auto scope = trace_api::Tracer::WithActiveSpan(span);
  double result = validate_cart(60'000'000);
  {
    auto child = tracer.StartSpan("price cart");
    {
      // A guard for this child span: its own profile, its own link.
      spanprof::ScopedProfile guard(child, "price cart");
      result += compute_prices(40'000'000);
    }
    child->End();
  }
  if (request == 2) spanprof::otel::record_error(*span, "card declined");
  span->End();
  return result;
}

std::string top_function(const spanprof::Profile& profile) {
  std::map<std::string, std::int64_t> self;
  for (const auto& sample : profile.samples) {
    if (sample.location_ids.empty()) continue;
    const auto& location = profile.locations[sample.location_ids.front() - 1];
    const std::string name = location.function_id ? profile.functions[location.function_id - 1].name : "?";
    self[name] += sample.values[0];
  }
  std::string best = "-";
  std::int64_t most = 0;
  for (const auto& [name, count] : self)
    if (count > most) most = count, best = name;
  return best;
}

}  // namespace

int main() {
  // spanprof: profiles to files (and a summary per span id for the printout).
  std::mutex mutex;
  std::map<std::string, std::string> hottest;  // span id -> hottest function
  spanprof::Options options;
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 250;
  auto files = example::file_uploader(options);
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [&](const spanprof::EncodedProfile& p, std::string_view, const spanprof::UploadContext& context) {
        std::lock_guard<std::mutex> lock(mutex);
        hottest[p.record.span.span_id.to_hex()] = top_function(*context.profile);
        return spanprof::UploadResult::ok();
      },
      "summary"));
  spanprof::start(options);

  // OpenTelemetry: the SDK provider, wrapped so root spans are profiled.
  std::shared_ptr<opentelemetry::exporter::memory::InMemorySpanData> exported;
  auto exporter = opentelemetry::exporter::memory::InMemorySpanExporterFactory::Create(exported, 1000);
  std::shared_ptr<opentelemetry::sdk::trace::TracerProvider> sdk = opentelemetry::sdk::trace::TracerProviderFactory::Create(
      opentelemetry::sdk::trace::SimpleSpanProcessorFactory::Create(std::move(exporter)));
  trace_api::Provider::SetTracerProvider(
      spanprof::otel::ProfilingTracerProvider::wrap(nostd::shared_ptr<trace_api::TracerProvider>(sdk)));
  auto tracer = trace_api::Provider::GetTracerProvider()->GetTracer("checkout-service");

  std::vector<std::thread> workers;
  double sink = 0;
  for (int w = 0; w < 2; ++w)
    workers.emplace_back([&, w] {
      double local = 0;
      for (int request = 0; request < 3; ++request) local += checkout(*tracer, w * 3 + request);
      std::lock_guard<std::mutex> lock(mutex);
      sink += local;
    });
  for (auto& worker : workers) worker.join();
  spanprof::flush();

  std::printf("%-16s %-18s %-6s %-22s %s\n", "span", "span id", "status", "pyroscope.profile.id", "hottest function");
  for (const auto& span : exported->GetSpans()) {
    char id[16];
    span->GetSpanId().ToLowerBase16(nostd::span<char, 16>(id, 16));
    const std::string span_id(id, 16);
    std::string link = "-";
    const auto& attributes = span->GetAttributes();
    if (auto it = attributes.find("pyroscope.profile.id"); it != attributes.end())
      if (const auto* text = nostd::get_if<std::string>(&it->second)) link = *text;
    std::lock_guard<std::mutex> lock(mutex);
    const auto hot = hottest.find(span_id);
    std::printf("%-16s %-18s %-6s %-22s %s\n", std::string(span->GetName()).c_str(), span_id.c_str(),
                span->GetStatus() == trace_api::StatusCode::kError ? "error" : "ok", link.c_str(),
                hot == hottest.end() ? "-" : hot->second.c_str());
  }
  const auto stats = spanprof::stats();
  std::printf("\nprofiles written to %s; spans profiled: %llu, kept: %llu\n", files->directory().c_str(),
              static_cast<unsigned long long>(stats.profiles_started),
              static_cast<unsigned long long>(stats.kept_sampled + stats.kept_error));
  spanprof::shutdown();
  trace_api::Provider::SetTracerProvider(nostd::shared_ptr<trace_api::TracerProvider>());
  return sink == 42 ? 2 : 0;
}
