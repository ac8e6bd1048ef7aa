// The Pyroscope and OTLP uploaders against a real HTTP server on loopback, started
// and stopped by the tests: what arrives is checked the way the backends read it
// (go tool pprof for Pyroscope's body, protoc for OTLP's), plus configuration from
// the environment and the example binary pointed at the server.
#include "support/catch.hpp"
#include "support/environment.hpp"
#include "support/collector.hpp"
#include "support/command.hpp"
#include "support/http_server.hpp"
#include "support/pyroscope_push.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>

#if SPANPROF_WITH_CURL

#include <spanprof/detail/runtime/environment.hpp>
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

using spanprof_test::upload_outcome;
using spanprof_test::Collector;
using spanprof_test::HttpServer;
using spanprof_test::span_number;
using spanprof_test::thread_cpu_seconds;

namespace {

SPANPROF_TEST_HOT_FUNCTION(deliver_hot_loop)

// Its body differs from every other test's waiting function (the volatile store):
// identical functions may be folded into one symbol (GCC's identical code folding
// in a unity build), and the profile would name the other one.
__attribute__((noinline)) void deliver_waiting_on_backend(std::chrono::milliseconds how_long) {
  static volatile int calls = 0;
  calls = calls + 1;
  std::this_thread::sleep_for(how_long);
  asm volatile("");  // not a tail call: this frame stays on the stack while it sleeps
}

using spanprof_test::ScopedEnvironment;


std::string base64(std::string_view in) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += table[(v >> 18) & 63], out += table[(v >> 12) & 63], out += table[(v >> 6) & 63], out += table[v & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += table[(v >> 18) & 63], out += table[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += table[(v >> 18) & 63], out += table[(v >> 12) & 63], out += table[(v >> 6) & 63], out += '=';
  }
  return out;
}

// What the profiles of some requests hold: span ids, and total samples by span.
struct Received {
  std::map<std::string, std::int64_t> samples_by_span;
  std::size_t profiles = 0;
  std::size_t duplicate_samples = 0;  // (stack, labels) seen twice in one profile
};

void add_profile(Received& received, const std::string& pprof_gzip) {
  pprof_test::DecodedPprof decoded;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(pprof_gzip, decoded, error));
  ++received.profiles;
  std::set<std::pair<std::vector<std::uint64_t>, std::map<std::string, std::string>>> seen;
  for (const auto& sample : decoded.profile.samples) {
    const auto labels = pprof_test::labels_of(sample);
    if (!seen.emplace(sample.location_ids, labels).second) ++received.duplicate_samples;
    received.samples_by_span[labels.at("span_id")] += sample.values.at(0);
  }
}

Received received_by(const HttpServer& server) {
  Received received;
  for (const auto& request : server.requests())
    for (const std::string& body : pyroscope_test::pprof_bodies(request)) add_profile(received, body);
  return received;
}

}  // namespace

TEST_CASE("Pyroscope receives a Push: series labels, auth, and a profile go tool pprof reads", "[delivery]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url();
  pyroscope.application_name = "checkout-service";
  pyroscope.tags = {{"env", "test"}, {"region", "local"}};
  pyroscope.tenant_id = "tenant-7";
  pyroscope.http.basic_auth_user = "alice";
  pyroscope.http.basic_auth_password = "s3cret:pw";
  spanprof::Options options;
  options.frequency_hz = 200;
  options.uploaders.push_back(std::make_shared<spanprof::PyroscopeUploader>(pyroscope));
  Collector collector(options);
  const auto span = span_number(900);
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /checkout"});
    deliver_hot_loop(0.1);
  }
  REQUIRE(collector.profile_for(span.span_id) != nullptr);  // flushed: the window is cut
  REQUIRE(server.wait_for_requests(1, std::chrono::seconds(10)));
  const auto request = server.requests().at(0);
  CHECK(request.method == "POST");
  CHECK(request.path == "/push.v1.PusherService/Push");
  CHECK(request.header("Content-Type") == "application/proto");
  CHECK(request.header("Authorization") == "Basic " + base64("alice:s3cret:pw"));
  CHECK(request.header("X-Scope-OrgID") == "tenant-7");
  CHECK(request.header("Expect").empty());

  const auto pushed = pyroscope_test::parse_push(request.body);
  REQUIRE(pushed.size() == 1);
  CHECK(pushed[0].label("__name__") == "process_cpu");
  CHECK(pushed[0].label("service_name") == "checkout-service");
  CHECK(pushed[0].label("env") == "test");
  CHECK(pushed[0].label("region") == "local");
  CHECK(pushed[0].id.size() == 36);  // a UUID
  CHECK(pushed[0].id[14] == '4');

  const std::string path = pprof_test::write_temp_file(pushed[0].pprof_gzip, ".pb.gz");
  std::string out;
  REQUIRE(pprof_test::run_command("go tool pprof -tags " + path, out));
  CHECK(out.find(span.span_id.to_hex()) != std::string::npos);
  CHECK(out.find(span.trace_id.to_hex()) != std::string::npos);
  REQUIRE(pprof_test::run_command("go tool pprof -top -symbolize=none " + path, out));
  CHECK(out.find("deliver_hot_loop") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("Pyroscope's legacy /ingest: the query, a bearer token, heap profiles as .memory", "[delivery]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.api = spanprof::PyroscopeOptions::Api::ingest;
  pyroscope.server_address = server.url() + "/";
  pyroscope.application_name = "checkout-service";
  pyroscope.tags = {{"env", "test"}, {"region", "local"}};
  pyroscope.http.bearer_token = "glc_token";
  spanprof::PyroscopeUploader uploader(pyroscope);
  spanprof::EncodedProfile profile;
  profile.record.kind = spanprof::ProfileKind::heap;
  profile.record.span = span_number(901);
  profile.record.start_unix_ns = 1'700'000'000'500'000'000;
  profile.record.duration_ns = 200'000'000;
  const spanprof::EncodeInput bytes{nullptr, "not really a profile"};
  CHECK(uploader.upload(profile, bytes).is_ok());
  profile.record.kind = spanprof::ProfileKind::cpu;
  profile.record.period_ns = 5'000'000;
  CHECK(uploader.upload(profile, bytes).is_ok());
  REQUIRE(server.wait_for_requests(2, std::chrono::seconds(5)));
  const auto heap = server.requests().at(0);
  CHECK(heap.path == "/ingest");
  CHECK(heap.query_params().at("name") == "checkout-service.memory{env=test,region=local}");
  CHECK(heap.query_params().count("sampleRate") == 0);
  CHECK(heap.query_params().at("from") == "1700000000");
  CHECK(heap.query_params().at("until") == "1700000001");
  CHECK(heap.query_params().at("format") == "pprof");
  CHECK(heap.query_params().at("spyName") == "spanprof");
  CHECK(heap.header("Authorization") == "Bearer glc_token");
  CHECK(heap.body == "not really a profile");
  const auto cpu = server.requests().at(1);
  CHECK(cpu.query_params().at("name") == "checkout-service.cpu{env=test,region=local}");
  CHECK(cpu.query_params().at("sampleRate") == "200");
}

TEST_CASE("Pyroscope: labels dropped and renamed, tags made valid label names", "[delivery]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url();
  pyroscope.tags = {{"k8s.namespace", "prod"}};
  pyroscope.drop_labels = {"profile_reason"};
  pyroscope.rename_labels = {{"span_name", "endpoint"}};
  spanprof::Options options;
  options.frequency_hz = 200;
  options.uploaders.push_back(std::make_shared<spanprof::PyroscopeUploader>(pyroscope));
  Collector collector(options);
  const auto span = span_number(903);
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /items"});
    deliver_hot_loop(0.05);
  }
  REQUIRE(collector.profile_for(span.span_id) != nullptr);
  REQUIRE(server.wait_for_requests(1, std::chrono::seconds(10)));
  const auto pushed = pyroscope_test::parse_push(server.requests().at(0).body);
  REQUIRE(pushed.size() == 1);
  CHECK(pushed[0].label("k8s_namespace") == "prod");
  pprof_test::DecodedPprof decoded;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(pushed[0].pprof_gzip, decoded, error));
  REQUIRE_FALSE(decoded.profile.samples.empty());
  for (const auto& sample : decoded.profile.samples) {
    const auto labels = pprof_test::labels_of(sample);
    CHECK(labels.count("profile_reason") == 0);
    CHECK(labels.at("endpoint") == "GET /items");
    CHECK(labels.at("span_id") == span.span_id.to_hex());  // kept per sample
  }
}

TEST_CASE("Pyroscope's answers map to retry or give up", "[delivery]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url();
  spanprof::PyroscopeUploader uploader(pyroscope);
  spanprof::EncodedProfile profile;
  profile.record.span = span_number(902);
  const spanprof::EncodeInput bytes{nullptr, "x"};
  using spanprof_test::Response;
  server.push(Response::status(429));
  server.push(Response::status(503));
  server.push(Response::status(400));
  server.push(Response::status(200));
  CHECK(upload_outcome(uploader.upload(profile, bytes)) == "retryable");
  CHECK(upload_outcome(uploader.upload(profile, bytes)) == "retryable");
  const auto rejected = uploader.upload(profile, bytes);
  CHECK(upload_outcome(rejected) == "permanent");
  CHECK(rejected.message().find("400") != std::string::npos);
  CHECK(uploader.upload(profile, bytes).is_ok());

  spanprof::PyroscopeOptions down;
  down.server_address = "http://127.0.0.1:" + std::to_string(HttpServer::unused_port());
  spanprof::PyroscopeUploader unreachable(down);
  const auto refused = unreachable.upload(profile, bytes);
  CHECK(upload_outcome(refused) == "retryable");
  CHECK_FALSE(refused.message().empty());
}

TEST_CASE("OTLP receives an ExportProfilesServiceRequest linked to the span", "[delivery]") {
  HttpServer server;
  spanprof::OtlpOptions otlp;
  otlp.endpoint = server.url();
  otlp.resource.attributes = {{"service.name", "checkout-service"}};
  otlp.http.headers = {{"api-key", "k123"}};
  spanprof::Options options;
  options.frequency_hz = 200;
  options.uploaders.push_back(std::make_shared<spanprof::OtlpUploader>(otlp));
  Collector collector(options);
  const auto span = span_number(910);
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /otlp"});
    deliver_hot_loop(0.1);
  }
  REQUIRE(collector.profile_for(span.span_id) != nullptr);
  REQUIRE(server.wait_for_requests(1, std::chrono::seconds(10)));
  const auto request = server.requests().at(0);
  CHECK(request.path == "/v1development/profiles");
  CHECK(request.header("Content-Type") == "application/x-protobuf");
  CHECK(request.header("Content-Encoding") == "gzip");
  CHECK(request.header("api-key") == "k123");
  std::string body;
  REQUIRE(spanprof::detail::gzip_decompress(request.body, body, 64u << 20));

  // A real protobuf parser accepts it...
  const std::string path = pprof_test::write_temp_file(body, ".bin");
  const auto decoded = spanprof_test::capture_command("protoc --decode_raw < " + path);
  std::remove(path.c_str());
  INFO(decoded.output.substr(0, 2000));
  REQUIRE(decoded.exit_code == 0);
  CHECK(decoded.output.find("checkout-service") != std::string::npos);
  CHECK(decoded.output.find("deliver_hot_loop") != std::string::npos);

  // ...and field by field: request.dictionary(2).link_table(4) holds the zero link
  // and this span's {trace_id(1): 16 bytes, span_id(2): 8 bytes}.
  const proto_test::Msg message(body);
  const auto links = message.message(2).messages(4);
  REQUIRE(links.size() == 2);
  const auto& expected_trace = span.trace_id.bytes();
  const auto& expected_span = span.span_id.bytes();
  CHECK(links[1].bytes(1) == std::string(expected_trace.begin(), expected_trace.end()));
  CHECK(links[1].bytes(2) == std::string(expected_span.begin(), expected_span.end()));
}

// Wall profiles reach both backends named as their own peers name them: Pyroscope's
// "wall" series (sample type wall/nanoseconds, as its Java and .NET agents send),
// OTLP's wall/nanoseconds sample type; the waiting function is on the stacks.
TEST_CASE("wall profiles arrive as Pyroscope's wall series and OTLP's wall sample type", "[delivery][wall]") {
  HttpServer pyroscope_server, otlp_server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = pyroscope_server.url();
  pyroscope.application_name = "checkout-service";
  spanprof::OtlpOptions otlp;
  otlp.endpoint = otlp_server.url();
  spanprof::Options options;
  options.wall_frequency_hz = 500;
  options.uploaders.push_back(std::make_shared<spanprof::PyroscopeUploader>(pyroscope));
  options.uploaders.push_back(std::make_shared<spanprof::OtlpUploader>(otlp));
  Collector collector(options);
  const auto span = span_number(920);
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /waits"}, spanprof::wall);
    deliver_waiting_on_backend(std::chrono::milliseconds(100));
  }
  REQUIRE(collector.profile_for(span.span_id, spanprof::ProfileKind::wall) != nullptr);
  REQUIRE(pyroscope_server.wait_for_requests(1, std::chrono::seconds(10)));
  REQUIRE(otlp_server.wait_for_requests(1, std::chrono::seconds(10)));

  const auto pushed = pyroscope_test::parse_push(pyroscope_server.requests().at(0).body);
  REQUIRE(pushed.size() == 1);
  CHECK(pushed[0].label("__name__") == "wall");
  pprof_test::DecodedPprof decoded;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(pushed[0].pprof_gzip, decoded, error));
  REQUIRE(decoded.profile.sample_types.size() == 2);
  CHECK(decoded.profile.sample_types[1].type == "wall");
  CHECK(decoded.profile.sample_types[1].unit == "nanoseconds");
  const std::string path = pprof_test::write_temp_file(pushed[0].pprof_gzip, ".pb.gz");
  std::string out;
  REQUIRE(pprof_test::run_command("go tool pprof -top -symbolize=none " + path, out));
  INFO(out);
  CHECK(out.find("deliver_waiting_on_backend") != std::string::npos);
  std::remove(path.c_str());

  std::string body;
  REQUIRE(spanprof::detail::gzip_decompress(otlp_server.requests().at(0).body, body, 64u << 20));
  const std::string raw_path = pprof_test::write_temp_file(body, ".bin");
  const auto raw = spanprof_test::capture_command("protoc --decode_raw < " + raw_path);
  std::remove(raw_path.c_str());
  REQUIRE(raw.exit_code == 0);
  CHECK(raw.output.find("\"wall\"") != std::string::npos);
  CHECK(raw.output.find("deliver_waiting_on_backend") != std::string::npos);
}

TEST_CASE("backends configured from the environment; a malformed value turns only that one off", "[delivery]") {
  HttpServer server;
  SECTION("both configured") {
    ScopedEnvironment env{{"PYROSCOPE_SERVER_ADDRESS", server.url().c_str()},
                          {"PYROSCOPE_APPLICATION_NAME", "env-app"},
                          {"PYROSCOPE_AUTH_TOKEN", "tok"},
                          {"PYROSCOPE_TENANT_ID", "t1"},
                          {"OTEL_EXPORTER_OTLP_ENDPOINT", server.url().c_str()},
                          {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", nullptr},
                          {"OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%20def,x-team=core"},
                          {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,service.name=ignored"},
                          {"OTEL_SERVICE_NAME", "env-service"}};
    const auto uploaders = spanprof::uploaders_from_environment();
    REQUIRE(uploaders.size() == 2);
    CHECK(uploaders[0]->name() == "pyroscope");
    CHECK(uploaders[1]->name() == "otlp");
    auto* pyroscope = static_cast<spanprof::PyroscopeUploader*>(uploaders[0].get());
    CHECK(pyroscope->options().application_name == "env-app");
    CHECK(pyroscope->options().tenant_id == "t1");
    CHECK(static_cast<spanprof::OtlpUploader*>(uploaders[1].get())->url() == server.url() + "/v1development/profiles");
  }
  SECTION("a bad Pyroscope address: reported, Pyroscope off, OTLP on") {
    std::vector<std::string> errors;
    spanprof::set_error_handler([&](const spanprof::Error& e) { errors.emplace_back(e.message); });
    ScopedEnvironment env{{"PYROSCOPE_SERVER_ADDRESS", "pyroscope:4040"},
                          {"OTEL_EXPORTER_OTLP_ENDPOINT", server.url().c_str()},
                          {"OTEL_EXPORTER_OTLP_HEADERS", nullptr},
                          {"OTEL_RESOURCE_ATTRIBUTES", nullptr}};
    const auto uploaders = spanprof::uploaders_from_environment();
    spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
    REQUIRE(uploaders.size() == 1);
    CHECK(uploaders[0]->name() == "otlp");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("PYROSCOPE_SERVER_ADDRESS") != std::string::npos);
  }
  SECTION("malformed OTLP headers: reported, OTLP off, Pyroscope on") {
    std::vector<std::string> errors;
    spanprof::set_error_handler([&](const spanprof::Error& e) { errors.emplace_back(e.message); });
    ScopedEnvironment env{{"PYROSCOPE_SERVER_ADDRESS", server.url().c_str()},
                          {"OTEL_EXPORTER_OTLP_ENDPOINT", server.url().c_str()},
                          {"OTEL_EXPORTER_OTLP_HEADERS", "api-key"},
                          {"OTEL_RESOURCE_ATTRIBUTES", nullptr}};
    const auto uploaders = spanprof::uploaders_from_environment();
    spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
    REQUIRE(uploaders.size() == 1);
    CHECK(uploaders[0]->name() == "pyroscope");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("OTEL_EXPORTER_OTLP_HEADERS") != std::string::npos);
  }
}

TEST_CASE("batched: a window's spans arrive merged, one request per kind, each sample under its span",
          "[delivery][batch]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url();
  pyroscope.delivery = spanprof::Delivery::batched(std::chrono::seconds(60));
  spanprof::Options options;
  options.frequency_hz = 1000;
  options.queue_capacity = 1024;
  options.uploaders.push_back(std::make_shared<spanprof::PyroscopeUploader>(pyroscope));
  Collector collector(options);  // per span, for comparison
  const auto before = spanprof::stats();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (unsigned i = 0; i < 10; ++i) {
        spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(3000 + t * 100 + i), "GET /batch"});
        deliver_hot_loop(0.02);
      }
    });
  for (auto& thread : threads) thread.join();
  const auto per_span = collector.profiles();  // flushes: the window is cut now
  CHECK(server.request_count() == 1);
  const Received batched = received_by(server);
  CHECK(batched.profiles == 1);
  CHECK(batched.duplicate_samples == 0);

  Received files;
  for (const auto& p : per_span) add_profile(files, p.pprof_gzip);
  CHECK(files.duplicate_samples == 0);  // one span's repeated stacks are merged too
  CHECK(files.samples_by_span.size() == per_span.size());
  CHECK(batched.samples_by_span == files.samples_by_span);  // every span, every sample
  std::int64_t total = 0;
  for (const auto& [span, samples] : batched.samples_by_span) total += samples;
  CHECK(static_cast<std::uint64_t>(total) == spanprof::stats().samples_captured - before.samples_captured);
}

TEST_CASE("batched OTLP: one request, every span in link_table, no two samples alike", "[delivery][batch]") {
  HttpServer server;
  spanprof::OtlpOptions otlp;
  otlp.endpoint = server.url();
  otlp.delivery = spanprof::Delivery::batched(std::chrono::seconds(60));
  spanprof::Options options;
  options.frequency_hz = 1000;
  options.uploaders.push_back(std::make_shared<spanprof::OtlpUploader>(otlp));
  Collector collector(options);
  std::set<std::string> spans;
  for (unsigned i = 0; i < 12; ++i) {
    const auto span = span_number(3500 + i);
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /otlp-batch"});
    deliver_hot_loop(0.02);
  }
  for (const auto& p : collector.profiles()) spans.insert(p.meta.record.span.span_id.to_hex());
  REQUIRE(server.request_count() == 1);
  std::string body;
  REQUIRE(spanprof::detail::gzip_decompress(server.requests().at(0).body, body, 64u << 20));
  const std::string path = pprof_test::write_temp_file(body, ".bin");
  CHECK(spanprof_test::capture_command("protoc --decode_raw < " + path).exit_code == 0);
  std::remove(path.c_str());

  const proto_test::Msg request(body);
  const auto links = request.message(2).messages(4);
  std::set<std::string> linked;
  for (std::size_t i = 1; i < links.size(); ++i) {
    std::string hex;
    for (const char c : links[i].bytes(2)) {
      char two[3];
      std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(c));
      hex += two;
    }
    linked.insert(hex);
  }
  CHECK(linked == spans);
  // resource_profiles(1) -> scope_profiles(2) -> profiles(2) -> samples(2):
  // stack_index(1), attribute_indices(2), link_index(3).
  for (const auto& profile : request.message(1).message(2).messages(2)) {
    std::set<std::tuple<std::uint64_t, std::vector<std::uint64_t>, std::uint64_t>> seen;
    for (const auto& sample : profile.messages(2))
      CHECK(seen.emplace(sample.scalar(1), sample.varints(2), sample.scalar(3)).second);
    CHECK_FALSE(seen.empty());
  }
}

TEST_CASE("5,000 profiled spans a second for 5 s: a request or two per window, nothing lost",
          "[delivery][batch][load]" SPANPROF_TEST_LONG_LOAD) {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url();  // the default window: 10 s
  spanprof::Options options;
  options.frequency_hz = 1000;
  options.queue_capacity = 4096;
  options.uploaders.push_back(std::make_shared<spanprof::PyroscopeUploader>(pyroscope));
  // Per span too, to know exactly which spans took samples. Shared, not on this
  // stack: the worker may outlive the test (a REQUIRE failing before shutdown(), a
  // shutdown past its deadline).
  struct PerSpan {
    std::mutex mutex;
    std::map<std::string, std::int64_t> samples;
  };
  const auto collected = std::make_shared<PerSpan>();
  options.uploaders.push_back(
      std::make_shared<spanprof::CallbackUploader>([collected](const spanprof::EncodedProfile& p, std::string_view, const spanprof::UploadContext& context) {
        std::int64_t samples = 0;
        for (const auto& sample : context.profile->samples) samples += sample.values.at(0);
        std::lock_guard<std::mutex> lock(collected->mutex);
        collected->samples[p.record.span.span_id.to_hex()] += samples;
        return spanprof::UploadResult::ok();
      }));
  spanprof::start(options);
  const auto before = spanprof::stats();
  const auto started = std::chrono::steady_clock::now();
  constexpr int threads = 2, spans_per_thread_per_second = 2500, seconds = 5;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([t, started] {
      for (int i = 0; i < spans_per_thread_per_second * seconds; ++i) {
        {
          spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(100000 + t * 100000 + i), "GET /load"});
          deliver_hot_loop(0.00008);
        }
        // Paced: span i starts no earlier than its slot.
        std::this_thread::sleep_until(started + std::chrono::microseconds(1'000'000LL * (i + 1) /
                                                                           spans_per_thread_per_second));
      }
    });
  for (auto& w : workers) w.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(30)));
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto after = spanprof::stats();
  spanprof::shutdown();
  const auto per_span = [&] {
    std::lock_guard<std::mutex> lock(collected->mutex);
    return collected->samples;
  }();

  const auto profiled = after.profiles_started - before.profiles_started;
  CHECK(profiled == threads * spans_per_thread_per_second * seconds);
  CHECK(after.profiles_dropped - before.profiles_dropped == 0);
  const auto windows = static_cast<std::size_t>(std::ceil(elapsed / 10.0));
  INFO("elapsed " << elapsed << " s, requests " << server.request_count() << ", spans with samples "
                  << per_span.size());
  CHECK(server.request_count() <= 2 * windows);
  const Received received = received_by(server);
  CHECK(received.samples_by_span == per_span);  // every span that took a sample, every sample
  CHECK_FALSE(per_span.empty());
}

// Run by CTest with SPANPROF_HOT_HANDLER set (hidden otherwise): the unmodified
// example, pointed at a loopback Pyroscope by one environment variable.
TEST_CASE("examples/hot_handler delivers its spans to PYROSCOPE_SERVER_ADDRESS", "[.example_pyroscope]") {
  const char* binary = std::getenv("SPANPROF_HOT_HANDLER");
  REQUIRE(binary != nullptr);
  HttpServer server;
  const std::string files_dir = "/tmp/spanprof-example-" + std::to_string(::getpid());
  const std::string command =
      "PYROSCOPE_SERVER_ADDRESS=" + server.url() + " SPANPROF_OUTPUT_DIR=" + files_dir + " " + binary;
  const auto run = spanprof_test::capture_command(command);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { spanprof_test::capture_command("rm -rf " + dir); }
  } cleanup{files_dir};
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  // 12 spans in a run of a few seconds: one window, so one request (the demo
  // profiles CPU only), holding every span of the per-span files with the same totals.
  REQUIRE(server.wait_for_requests(1, std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(server.request_count() == 1);
  const Received batched = received_by(server);
  for (const auto& request : server.requests()) {
    CHECK(request.path == "/push.v1.PusherService/Push");
    for (const auto& pushed : pyroscope_test::parse_push(request.body)) {
      CHECK(pushed.label("__name__") == "process_cpu");
      const std::string path = pprof_test::write_temp_file(pushed.pprof_gzip, ".pb.gz");
      std::string out;
      CHECK(pprof_test::run_command("go tool pprof -tags " + path, out));
      for (const auto& [span, samples] : batched.samples_by_span) CHECK(out.find(span) != std::string::npos);
      std::remove(path.c_str());
    }
  }
  Received files;
  for (const auto& name : spanprof_test::files_in(files_dir))
    add_profile(files, spanprof_test::read_file(files_dir + "/" + name));
  CHECK(files.samples_by_span.size() == 12);
  CHECK(batched.samples_by_span == files.samples_by_span);
}

#endif  // SPANPROF_WITH_CURL
