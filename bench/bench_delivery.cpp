// Delivery, side by side in one run:
//   pyroscope_upload / otlp_upload   profiles delivered per second to a loopback
//                                    server (keep-alive), one uploader call each
//   guard_close_backend_up / _down   request-thread cost of closing a guard that
//                                    hands over a profile, while the backend answers
//                                    and while it is unreachable (manual timing of
//                                    the close only)
// The loopback server is the tests' (tests/support/http_server.hpp).
#include <spanprof/spanprof.hpp>

#if SPANPROF_WITH_CURL

#include "../tests/support/http_server.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <optional>

namespace {

const spanprof::SpanContext delivery_span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b9-01").context;

// A real, symbolized profile as the worker would hand it to uploaders.
struct SampleProfile {
  spanprof::Profile profile;
  spanprof::EncodedProfile encoded;
};

const SampleProfile& sample_profile() {
  static const SampleProfile sample = [] {
    SampleProfile s;
    auto& p = s.profile;
    p.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
    p.period_type = {"cpu", "nanoseconds"};
    p.period = 10'000'000;
    for (std::uint64_t id = 1; id <= 20; ++id) {
      p.functions.push_back({id, "service::handler_step_" + std::to_string(id), "", ""});
      p.locations.push_back({id, 0, 0x400000 + id * 16, id});
    }
    for (int i = 0; i < 50; ++i) {
      spanprof::Sample sample;
      for (std::uint64_t d = 0; d < 15; ++d) sample.location_ids.push_back(1 + (i + d) % 20);
      sample.values = {1, 10'000'000};
      sample.labels = {{"span_id", delivery_span.span_id.to_hex(), 0, "", false}};
      p.samples.push_back(sample);
    }
    std::string error;
    spanprof::encode_pprof_gzip(p, s.encoded.pprof_gzip, error);
    s.encoded.span = delivery_span;
    s.encoded.span_name = "GET /bench";
    s.encoded.period_ns = 10'000'000;
    s.encoded.start_unix_ns = 1'700'000'000'000'000'000;
    s.encoded.duration_ns = 500'000'000;
    s.encoded.sample_count = p.samples.size();
    return s;
  }();
  return sample;
}

spanprof::HttpOptions local_http() {
  spanprof::HttpOptions http;
  http.no_proxy = "*";
  http.timeout = std::chrono::milliseconds(2000);
  return http;
}

void pyroscope_upload(benchmark::State& state) {
  spanprof_test::HttpServer server;
  spanprof::PyroscopeOptions options;
  options.server_address = server.url();
  options.http = local_http();
  spanprof::PyroscopeUploader uploader(options);
  const auto& encoded = sample_profile().encoded;
  for (auto _ : state) {
    if (!uploader.upload(encoded).succeeded()) state.SkipWithError("upload failed");
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_profile"] = static_cast<double>(encoded.pprof_gzip.size());
}
BENCHMARK(pyroscope_upload)->Unit(benchmark::kMicrosecond);

void otlp_upload(benchmark::State& state) {
  spanprof_test::HttpServer server;
  spanprof::OtlpOptions options;
  options.endpoint = server.url();
  options.resource.attributes = {{"service.name", "bench"}};
  options.http = local_http();
  spanprof::OtlpUploader uploader(options);
  auto encoded = sample_profile().encoded;
  encoded.profile = &sample_profile().profile;
  for (auto _ : state) {
    if (!uploader.upload(encoded).succeeded()) state.SkipWithError("upload failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(otlp_upload)->Unit(benchmark::kMicrosecond);

double burn_thread_cpu(double seconds) {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  const double end = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9 + seconds;
  volatile double x = 1;
  for (;;) {
    for (int i = 0; i < 2000; ++i) x = x * 1.0000001;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    if (static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9 >= end) return x;
  }
}

void guard_close(benchmark::State& state, bool backend_up) {
  std::optional<spanprof_test::HttpServer> server;
  std::string url = "http://127.0.0.1:" + std::to_string(spanprof_test::HttpServer::unused_port());
  if (backend_up) {
    server.emplace();
    url = server->url();
  }
  spanprof::Options options;
  options.frequency_hz = 4000;
  options.retry.initial_backoff = std::chrono::milliseconds(50);
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = url;
  pyroscope.http = local_http();
  options.uploaders = {std::make_shared<spanprof::PyroscopeUploader>(pyroscope)};
  spanprof::set_error_handler({});  // the outage's failures are expected
  spanprof::start(options);
  std::uint64_t handed_over = 0;
  for (auto _ : state) {
    auto guard = std::make_unique<spanprof::ScopedProfile>(spanprof::NamedSpan{delivery_span, "GET /bench"});
    burn_thread_cpu(0.002);  // ~8 samples at 4000 Hz
    const auto start = std::chrono::steady_clock::now();
    guard.reset();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ++handed_over;
  }
  spanprof::shutdown(std::chrono::seconds(1));
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
  state.counters["spans"] = static_cast<double>(handed_over);
}

void guard_close_backend_up(benchmark::State& state) { guard_close(state, true); }
void guard_close_backend_down(benchmark::State& state) { guard_close(state, false); }
BENCHMARK(guard_close_backend_up)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(300);
BENCHMARK(guard_close_backend_down)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(300);

}  // namespace

#endif  // SPANPROF_WITH_CURL
