// The Pyroscope and OTLP uploaders against a real HTTP server on loopback, started
// and stopped by the tests: what arrives is checked the way the backends read it
// (go tool pprof for Pyroscope's body, protoc for OTLP's), plus configuration from
// the environment and the example binary pointed at the server.
#include "support/catch.hpp"
#include "support/environment.hpp"
#include "support/collector.hpp"
#include "support/command.hpp"
#include "support/http_server.hpp"

#include <spanprof/spanprof.hpp>

#if SPANPROF_WITH_CURL

#include <spanprof/runtime/environment.hpp>
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>

using spanprof_test::Collector;
using spanprof_test::HttpServer;
using spanprof_test::span_number;
using spanprof_test::thread_cpu_seconds;

namespace {

SPANPROF_TEST_HOT_FUNCTION(deliver_hot_loop)

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

std::string write_temp(const std::string& bytes, const char* suffix) {
  static int counter = 0;
  const std::string path = "/tmp/spanprof-delivery-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + suffix;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Reads the fields of one protobuf message: (field number, wire type, payload).
struct Field {
  std::uint32_t number;
  std::uint32_t wire;
  std::uint64_t varint;
  std::string_view bytes;
};

bool read_fields(std::string_view message, std::vector<Field>& out) {
  out.clear();
  std::size_t i = 0;
  auto varint = [&](std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && i < message.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(message[i++]);
      v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;
  };
  while (i < message.size()) {
    std::uint64_t key = 0;
    if (!varint(key)) return false;
    Field f{static_cast<std::uint32_t>(key >> 3), static_cast<std::uint32_t>(key & 7), 0, {}};
    if (f.wire == 0) {
      if (!varint(f.varint)) return false;
    } else if (f.wire == 2) {
      std::uint64_t length = 0;
      if (!varint(length) || length > message.size() - i) return false;
      f.bytes = message.substr(i, length);
      i += length;
    } else if (f.wire == 1) {
      if (message.size() - i < 8) return false;
      i += 8;
    } else if (f.wire == 5) {
      if (message.size() - i < 4) return false;
      i += 4;
    } else {
      return false;
    }
    out.push_back(f);
  }
  return true;
}

}  // namespace

TEST_CASE("Pyroscope receives the span's profile: path, query, auth, and a body go tool pprof reads", "[delivery]") {
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
  REQUIRE(collector.profile_for(span.span_id) != nullptr);  // flushed
  REQUIRE(server.wait_for_requests(1, std::chrono::seconds(10)));
  const auto request = server.requests().at(0);
  CHECK(request.method == "POST");
  CHECK(request.path == "/ingest");
  const auto query = request.query_params();
  CHECK(query.at("name") == "checkout-service.cpu{env=test,region=local}");
  CHECK(query.at("format") == "pprof");
  CHECK(query.at("spyName") == "spanprof");
  CHECK(query.at("sampleRate") == "200");
  const long long from = std::stoll(query.at("from")), until = std::stoll(query.at("until"));
  CHECK(until > from);
  CHECK(from > 1'600'000'000);
  CHECK(request.header("Authorization") == "Basic " + base64("alice:s3cret:pw"));
  CHECK(request.header("X-Scope-OrgID") == "tenant-7");
  CHECK(request.header("Expect").empty());

  const std::string path = write_temp(request.body, ".pb.gz");
  std::string out;
  REQUIRE(pprof_test::run_command("go tool pprof -tags " + path, out));
  CHECK(out.find(span.span_id.to_hex()) != std::string::npos);
  CHECK(out.find(span.trace_id.to_hex()) != std::string::npos);
  REQUIRE(pprof_test::run_command("go tool pprof -top -symbolize=none " + path, out));
  CHECK(out.find("deliver_hot_loop") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("Pyroscope: a bearer token, and heap profiles as .memory", "[delivery]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url() + "/";
  pyroscope.http.bearer_token = "glc_token";
  spanprof::PyroscopeUploader uploader(pyroscope);
  spanprof::EncodedProfile profile;
  profile.kind = spanprof::ProfileKind::heap;
  profile.span = span_number(901);
  profile.start_unix_ns = 1'700'000'000'500'000'000;
  profile.duration_ns = 200'000'000;
  profile.pprof_gzip = "not really a profile";
  CHECK(uploader.upload(profile).succeeded());
  REQUIRE(server.wait_for_requests(1, std::chrono::seconds(5)));
  const auto request = server.requests().at(0);
  CHECK(request.path == "/ingest");
  CHECK(request.query_params().at("name") == "spanprof.memory{}");
  CHECK(request.query_params().count("sampleRate") == 0);
  CHECK(request.query_params().at("from") == "1700000000");
  CHECK(request.query_params().at("until") == "1700000001");
  CHECK(request.header("Authorization") == "Bearer glc_token");
  CHECK(request.body == "not really a profile");
}

TEST_CASE("Pyroscope's answers map to retry or give up", "[delivery]") {
  HttpServer server;
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = server.url();
  spanprof::PyroscopeUploader uploader(pyroscope);
  spanprof::EncodedProfile profile;
  profile.span = span_number(902);
  profile.pprof_gzip = "x";
  using spanprof_test::Response;
  server.push(Response::status(429));
  server.push(Response::status(503));
  server.push(Response::status(400));
  server.push(Response::status(200));
  CHECK(uploader.upload(profile).status == spanprof::UploadResult::Status::retryable_failure);
  CHECK(uploader.upload(profile).status == spanprof::UploadResult::Status::retryable_failure);
  const auto rejected = uploader.upload(profile);
  CHECK(rejected.status == spanprof::UploadResult::Status::permanent_failure);
  CHECK(rejected.message.find("400") != std::string::npos);
  CHECK(uploader.upload(profile).succeeded());

  spanprof::PyroscopeOptions down;
  down.server_address = "http://127.0.0.1:" + std::to_string(HttpServer::unused_port());
  spanprof::PyroscopeUploader unreachable(down);
  const auto refused = unreachable.upload(profile);
  CHECK(refused.status == spanprof::UploadResult::Status::retryable_failure);
  CHECK_FALSE(refused.message.empty());
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
  std::string body, error;
  REQUIRE(spanprof::detail::gzip_decompress(request.body, body, error, 64u << 20));

  // A real protobuf parser accepts it...
  const std::string path = write_temp(body, ".bin");
  const auto decoded = spanprof_test::capture_command("protoc --decode_raw < " + path);
  std::remove(path.c_str());
  INFO(decoded.output.substr(0, 2000));
  REQUIRE(decoded.exit_code == 0);
  CHECK(decoded.output.find("checkout-service") != std::string::npos);
  CHECK(decoded.output.find("deliver_hot_loop") != std::string::npos);

  // ...and field by field: request.dictionary(2).link_table(4) holds the zero link
  // and this span's {trace_id(1): 16 bytes, span_id(2): 8 bytes}.
  std::vector<Field> request_fields, dictionary_fields, link_fields;
  REQUIRE(read_fields(body, request_fields));
  std::string_view dictionary;
  for (const auto& f : request_fields)
    if (f.number == 2 && f.wire == 2) dictionary = f.bytes;
  REQUIRE_FALSE(dictionary.empty());
  REQUIRE(read_fields(dictionary, dictionary_fields));
  std::vector<std::string_view> links;
  for (const auto& f : dictionary_fields)
    if (f.number == 4 && f.wire == 2) links.push_back(f.bytes);
  REQUIRE(links.size() == 2);
  REQUIRE(read_fields(links[1], link_fields));
  std::string trace_id, span_id;
  for (const auto& f : link_fields) {
    if (f.number == 1) trace_id = std::string(f.bytes);
    if (f.number == 2) span_id = std::string(f.bytes);
  }
  const auto& expected_trace = span.trace_id.bytes();
  const auto& expected_span = span.span_id.bytes();
  CHECK(trace_id == std::string(expected_trace.begin(), expected_trace.end()));
  CHECK(span_id == std::string(expected_span.begin(), expected_span.end()));
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

// Run by CTest with SPANPROF_HOT_HANDLER set (hidden otherwise): the unmodified
// example, pointed at a loopback Pyroscope by one environment variable.
TEST_CASE("examples/hot_handler delivers its spans to PYROSCOPE_SERVER_ADDRESS", "[.example_pyroscope]") {
  const char* binary = std::getenv("SPANPROF_HOT_HANDLER");
  REQUIRE(binary != nullptr);
  HttpServer server;
  const std::string files = "/tmp/spanprof-example-" + std::to_string(::getpid());
  const std::string command =
      "PYROSCOPE_SERVER_ADDRESS=" + server.url() + " SPANPROF_OUTPUT_DIR=" + files + " " + binary;
  const auto run = spanprof_test::capture_command(command);
  spanprof_test::capture_command("rm -rf " + files);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  // 12 requests, each a span with ~37 samples at 250 Hz: every one arrives.
  REQUIRE(server.wait_for_requests(12, std::chrono::seconds(10)));
  std::size_t with_span_labels = 0;
  for (const auto& request : server.requests()) {
    CHECK(request.path == "/ingest");
    CHECK(request.query_params().at("name").rfind("spanprof.cpu", 0) == 0);
    const std::string path = write_temp(request.body, ".pb.gz");
    std::string out;
    if (pprof_test::run_command("go tool pprof -tags " + path, out) && out.find("span_id:") != std::string::npos)
      ++with_span_labels;
    std::remove(path.c_str());
  }
  CHECK(with_span_labels == server.request_count());
}

#endif  // SPANPROF_WITH_CURL
