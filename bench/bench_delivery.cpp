// Delivery, side by side in one run:
//   pyroscope_upload / otlp_upload   profiles delivered per second to a loopback
//                                    server (keep-alive), one uploader call each
//   guard_close_backend_up / _down   request-thread cost of closing a guard that
//                                    hands over a profile, while the backend answers
//                                    and while it is unreachable (manual timing of
//                                    the close only; p50 and p99 as counters), over
//                                    $SPANPROF_BENCH_CLOSE_SPANS (default 2000) spans
//   guard_close_without_samples      the same close when the span took no sample
//   backend_requests_at_5000_spans_per_second
//                                    2 threads x 2,500 paced spans/s for
//                                    $SPANPROF_BENCH_LOAD_SECONDS (default 30): requests
//                                    the backend got per second, and per window
//   resident_memory_64_threads_slow_backend
//                                    64 threads x 1,000 spans/s for
//                                    $SPANPROF_BENCH_MEMORY_SECONDS (default 60) with a
//                                    backend that answers in 2 s: the process's added
//                                    resident memory (peak), and what was dropped
// The loopback server is the tests' (tests/support/http_server.hpp).
#include <spanprof/spanprof.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/profile/pprof_encoder.hpp>

#if SPANPROF_WITH_CURL

#include "../tests/support/http_server.hpp"
#include "bench_support.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

const spanprof::SpanContext delivery_span =
    spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b9-01").context;

// A real, symbolized profile as the worker would hand it to uploaders.
struct SampleProfile {
  spanprof::Profile profile;
  spanprof::EncodedProfile encoded;
  std::string pprof_gzip;
  spanprof::EncodeInput input() const { return {&profile, pprof_gzip}; }
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
    if (!spanprof::encode_pprof_gzip(p, s.pprof_gzip)) std::abort();
    s.encoded.record.span = delivery_span;
    s.encoded.record.span_name = "GET /bench";
    s.encoded.record.period_ns = 10'000'000;
    s.encoded.record.start_unix_ns = 1'700'000'000'000'000'000;
    s.encoded.record.duration_ns = 500'000'000;
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
  const SampleProfile& sample = sample_profile();
  for (auto _ : state) {
    if (!uploader.upload(sample.encoded, sample.input()).is_ok()) state.SkipWithError("upload failed");
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_profile"] = static_cast<double>(sample.pprof_gzip.size());
}
BENCHMARK(pyroscope_upload)->Unit(benchmark::kMicrosecond);

void otlp_upload(benchmark::State& state) {
  spanprof_test::HttpServer server;
  spanprof::OtlpOptions options;
  options.endpoint = server.url();
  options.resource.attributes = {{"service.name", "bench"}};
  options.http = local_http();
  spanprof::OtlpUploader uploader(options);
  const SampleProfile& sample = sample_profile();
  for (auto _ : state) {
    if (!uploader.upload(sample.encoded, sample.input()).is_ok()) state.SkipWithError("upload failed");
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

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1))];
}

void guard_close(benchmark::State& state, bool backend_up, bool with_samples) {
  std::optional<spanprof_test::HttpServer> server;
  std::string url = "http://127.0.0.1:" + std::to_string(spanprof_test::HttpServer::unused_port());
  if (backend_up) {
    server.emplace();
    url = server->url();
  }
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = with_samples ? 4000 : 1;
  options.retry.initial_backoff = std::chrono::milliseconds(50);
  options.queue_capacity = 4096;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = url;
  pyroscope.http = local_http();
  options.uploaders = {std::make_shared<spanprof::PyroscopeUploader>(pyroscope)};
  spanprof::set_error_handler({});  // the outage's failures are expected
  spanprof::start(options);
  // Steady state: the first hand-offs allocate the records the worker then
  // recycles (and grow the heap); a service pays that once, not per request.
  for (int i = 0; i < 200; ++i) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{delivery_span, "GET /bench"});
    burn_thread_cpu(with_samples ? 0.002 : 0.0001);
  }
  spanprof::flush(std::chrono::seconds(5));
  const auto before = spanprof::stats();
  std::vector<double> closes;
  closes.reserve(static_cast<std::size_t>(state.max_iterations));
  for (auto _ : state) {
    auto guard = std::make_unique<spanprof::ScopedProfile>(spanprof::NamedSpan{delivery_span, "GET /bench"});
    burn_thread_cpu(with_samples ? 0.002 : 0.0001);  // ~8 samples at 4000 Hz; none at 1 Hz
    const auto start = std::chrono::steady_clock::now();
    guard.reset();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(took);
    closes.push_back(took * 1e6);
  }
  const auto after = spanprof::stats();
  spanprof::shutdown(std::chrono::seconds(1));
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
  state.counters["p50_us"] = percentile(closes, 0.50);
  state.counters["p99_us"] = percentile(closes, 0.99);
  state.counters["handed_over"] = static_cast<double>(after.profiles_enqueued - before.profiles_enqueued);
}

const long close_iterations = bench::count_from_environment("SPANPROF_BENCH_CLOSE_SPANS", 2000);

void guard_close_backend_up(benchmark::State& state) { guard_close(state, true, true); }
void guard_close_backend_down(benchmark::State& state) { guard_close(state, false, true); }
void guard_close_without_samples(benchmark::State& state) { guard_close(state, true, false); }
BENCHMARK(guard_close_backend_up)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(close_iterations);
BENCHMARK(guard_close_backend_down)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(close_iterations);
BENCHMARK(guard_close_without_samples)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(close_iterations);

using bench::seconds_from_environment;

// Paced spans: each of `threads` opens `per_second` spans a second, each doing
// `cpu_seconds` of work, until `seconds` have passed or `stop` is set.
void paced_spans(int threads, int per_second, double seconds, double cpu_seconds, const std::atomic<bool>* profile,
                 const std::atomic<bool>* stop) {
  std::vector<std::thread> workers;
  const auto started = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([=] {
      char header[64];
      for (long i = 0;; ++i) {
        const auto slot = started + std::chrono::microseconds(static_cast<long long>(1e6 * static_cast<double>(i) / per_second));
        if (std::chrono::duration<double>(slot - started).count() >= seconds || (stop && stop->load())) return;
        std::this_thread::sleep_until(slot);
        std::snprintf(header, sizeof header, "00-%016x%016lx-%016lx-01", 0xbe0000u + static_cast<unsigned>(t),
                      static_cast<unsigned long>(i + 1), static_cast<unsigned long>(i + 1));
        const auto span = spanprof::parse_traceparent(header).context;
        if (profile == nullptr || profile->load()) {
          spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /load"});
          burn_thread_cpu(cpu_seconds);
        } else {
          burn_thread_cpu(cpu_seconds);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
}

void backend_requests_at_5000_spans_per_second(benchmark::State& state) {
  const double seconds = seconds_from_environment("SPANPROF_BENCH_LOAD_SECONDS", 30);
  for (auto _ : state) {
    spanprof_test::HttpServer server;
    spanprof::Options options(spanprof::ignore_environment);
    options.frequency_hz = 1000;
    options.queue_capacity = 4096;
    spanprof::PyroscopeOptions pyroscope;
    pyroscope.server_address = server.url();
    pyroscope.http = local_http();
    options.uploaders = {std::make_shared<spanprof::PyroscopeUploader>(pyroscope)};
    spanprof::start(options);
    const auto before = spanprof::stats();
    paced_spans(2, 2500, seconds, 0.00008, nullptr, nullptr);
    spanprof::flush(std::chrono::seconds(30));
    const auto after = spanprof::stats();
    spanprof::shutdown();
    state.counters["spans_per_second"] =
        static_cast<double>(after.profiles_started - before.profiles_started) / seconds;
    state.counters["profiles_handed_over"] = static_cast<double>(after.profiles_enqueued - before.profiles_enqueued);
    state.counters["backend_requests"] = static_cast<double>(server.request_count());
    state.counters["requests_per_second"] = static_cast<double>(server.request_count()) / seconds;
    state.counters["dropped"] = static_cast<double>(after.profiles_dropped - before.profiles_dropped);
  }
}
BENCHMARK(backend_requests_at_5000_spans_per_second)->Unit(benchmark::kSecond)->Iterations(1);

std::uint64_t resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  return 0;
}

void resident_memory_64_threads_slow_backend(benchmark::State& state) {
  const double seconds = seconds_from_environment("SPANPROF_BENCH_MEMORY_SECONDS", 60);
  for (auto _ : state) {
    spanprof_test::HttpServer server;
    server.set_default(spanprof_test::Response::delay(std::chrono::milliseconds(2000), 200));
    server.keep_bodies(false);
    spanprof::Options options(spanprof::ignore_environment);
    options.frequency_hz = 1000;
    spanprof::PyroscopeOptions pyroscope;
    pyroscope.server_address = server.url();
    pyroscope.http = local_http();
    pyroscope.http.timeout = std::chrono::milliseconds(5000);
    options.uploaders = {std::make_shared<spanprof::PyroscopeUploader>(pyroscope)};
    spanprof::set_error_handler({});
    spanprof::start(options);
    // The threads run their loop unprofiled first: what they cost is not spanprof's.
    std::atomic<bool> profile{false}, stop{false};
    std::thread load([&] { paced_spans(64, 1000, seconds + 2, 0.00002, &profile, &stop); });
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const std::uint64_t baseline = resident_kib();
    const auto before = spanprof::stats();
    profile = true;
    std::uint64_t peak = baseline;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      peak = std::max(peak, resident_kib());
    }
    stop = true;
    load.join();
    const auto after = spanprof::stats();
    spanprof::shutdown(std::chrono::seconds(1));
    spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
    state.counters["added_rss_mib"] = static_cast<double>(peak - baseline) / 1024.0;
    state.counters["spans_profiled"] = static_cast<double>(after.profiles_started - before.profiles_started);
    state.counters["handed_over"] = static_cast<double>(after.profiles_enqueued - before.profiles_enqueued);
    state.counters["dropped"] = static_cast<double>(after.profiles_dropped - before.profiles_dropped);
  }
}
BENCHMARK(resident_memory_64_threads_slow_backend)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

#endif  // SPANPROF_WITH_CURL
