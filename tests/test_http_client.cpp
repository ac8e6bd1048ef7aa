// The libcurl transport under the HTTP uploaders (detail/http_client.hpp), against
// the loopback test server: what goes over the wire, how every kind of failure
// comes back, and how classify() maps it to retryable or permanent.
#include "support/catch.hpp"
#include "support/test_helpers.hpp"
#include "support/http_server.hpp"

#include <spanprof/detail/delivery/http_client.hpp>
#include <spanprof/delivery/http_options.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id  // older glibc headers leave the field unnamed
#define sigev_notify_thread_id _sigev_un._tid
#endif

using spanprof::HttpOptions;
using spanprof::UploadResult;
using spanprof::detail::classify;
using spanprof::detail::HttpClient;
using spanprof::detail::HttpRequest;
using spanprof::detail::HttpResponse;
using spanprof_test::HttpServer;
using spanprof_test::Response;
using namespace std::chrono_literals;

namespace {

using spanprof_test::binary_body;
using spanprof_test::contains;
using spanprof_test::upload_outcome;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}


// Short timeouts so a broken client fails the test instead of stalling it, and no
// proxy from the environment between the client and the loopback server.
HttpOptions test_options() {
  HttpOptions options;
  options.connect_timeout = 5s;
  options.timeout = 15s;
  options.no_proxy = "*";
  return options;
}

HttpRequest post_to(const std::string& url, std::string body = "payload") {
  HttpRequest request;
  request.url = url;
  request.body = std::move(body);
  request.content_type = "application/octet-stream";
  return request;
}


std::string http_date(std::time_t when) {
  std::tm tm{};
  ::gmtime_r(&when, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return text;
}

}  // namespace

TEST_CASE("HttpClient sends the body and headers exactly", "[http_client]") {
  HttpServer server;
  REQUIRE(server.running());
  HttpOptions options = test_options();
  options.headers = {{"X-Scope-OrgID", "tenant-1"}, {"X-Shared", "from-options"}};
  HttpClient client(options);

  HttpRequest request = post_to(server.url("/ingest?name=app.cpu%7Benv%3Dprod%7D&from=1"), binary_body(100'000));
  request.content_type = "application/x-protobuf";
  request.content_encoding = "gzip";
  request.headers = {{"X-Request", "yes"}, {"X-Shared", "from-request"}};
  const HttpResponse response = client.post(request);

  CHECK(response.status == 200);
  CHECK_FALSE(response.transport_error);
  CHECK(response.error.empty());
  CHECK(classify(response, "test").is_ok());
  REQUIRE(server.request_count() == 1);
  const auto received = server.requests().front();
  CHECK(received.method == "POST");
  CHECK(received.path == "/ingest");
  CHECK(received.query == "name=app.cpu%7Benv%3Dprod%7D&from=1");
  CHECK(received.body.size() == request.body.size());
  CHECK(received.body == request.body);
  CHECK(received.header("Content-Length") == std::to_string(request.body.size()));
  CHECK(received.header("Content-Type") == "application/x-protobuf");
  CHECK(received.header("Content-Encoding") == "gzip");
  CHECK(received.header("X-Scope-OrgID") == "tenant-1");
  CHECK(received.header("X-Request") == "yes");
  CHECK(received.header("X-Shared") == "from-request");  // the request's header replaces the option's
  int shared = 0;
  for (const auto& h : received.headers) shared += h.first == "X-Shared";
  CHECK(shared == 1);
  CHECK(received.header("User-Agent").rfind("spanprof/", 0) == 0);
  CHECK_FALSE(received.has_header("Authorization"));
  CHECK_FALSE(received.has_header("Expect"));
}

TEST_CASE("HttpClient sends no Content-Type when none is given, and empty headers as empty", "[http_client]") {
  HttpServer server;
  HttpOptions options = test_options();
  options.headers = {{"X-Empty", ""}};
  HttpClient client(options);
  HttpRequest request = post_to(server.url("/"));
  request.content_type.clear();
  REQUIRE(client.post(request).status == 200);
  REQUIRE(server.request_count() == 1);
  const auto received = server.requests().front();
  // libcurl would otherwise call the body application/x-www-form-urlencoded.
  CHECK_FALSE(received.has_header("Content-Type"));
  CHECK_FALSE(received.has_header("Content-Encoding"));
  CHECK(received.has_header("X-Empty"));
  CHECK(received.header("X-Empty").empty());
}

TEST_CASE("HttpClient sends an empty body", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  REQUIRE(client.post(post_to(server.url("/"), "")).status == 200);
  REQUIRE(server.request_count() == 1);
  CHECK(server.requests().front().body.empty());
  CHECK(server.requests().front().header("Content-Length") == "0");
}

TEST_CASE("HttpClient authorization: basic, bearer, and which wins", "[http_client]") {
  HttpServer server;
  const auto authorization_sent = [&](const HttpOptions& options) {
    server.clear_requests();
    HttpClient client(options);
    const HttpResponse response = client.post(post_to(server.url("/")));
    REQUIRE(response.status == 200);
    REQUIRE(server.request_count() == 1);
    return server.requests().front().header("Authorization");
  };

  HttpOptions options = test_options();
  options.basic_auth_user = "Aladdin";
  options.basic_auth_password = "open sesame";
  CHECK(authorization_sent(options) == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");  // RFC 7617's example

  options.basic_auth_user = "user";
  options.basic_auth_password = "";
  CHECK(authorization_sent(options) == "Basic dXNlcjo=");

  options.basic_auth_user = "12345";
  options.basic_auth_password = "p:w\xc3\xa9";  // a colon in the password is fine; bytes sent as given
  CHECK(authorization_sent(options) == "Basic MTIzNDU6cDp3w6k=");

  options.bearer_token = "glc_token";
  CHECK(authorization_sent(options) == "Bearer glc_token");  // the token wins over basic credentials

  options.headers = {{"authorization", "Custom xyz"}};
  CHECK(authorization_sent(options) == "Custom xyz");  // an explicit header wins over both

  options = test_options();
  CHECK(authorization_sent(options).empty());
}

TEST_CASE("HttpClient base64 matches RFC 4648's test vectors", "[http_client]") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& v : vectors) {
    std::string out;
    spanprof::detail::http_append_base64(v.first, out);
    CHECK(out == v.second);
  }
  std::string out;
  spanprof::detail::http_append_base64(std::string("\0\xff\xfe", 3), out);
  CHECK(out == "AP/+");
}

TEST_CASE("HttpClient refuses headers that could inject others, without sending", "[http_client]") {
  HttpServer server;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"X-Bad", "a\r\nX-Injected: 1"}, {"X-Bad", "a\nb"}, {"X-Bad", std::string("a\0b", 3)},
      {"X Bad", "v"},                   {"X-Bad:", "v"},   {"", "v"}};
  for (const auto& header : bad) {
    CAPTURE(header.first, header.second);
    SECTION("in HttpOptions::headers") {
      HttpOptions options = test_options();
      options.headers = {header};
      HttpClient client(options);
      const HttpResponse response = client.post(post_to(server.url("/")));
      CHECK(response.status == 0);
      CHECK_FALSE(response.transport_error);
      CHECK(contains(response.error, "invalid HTTP header"));
      CHECK(upload_outcome(classify(response, "otlp")) == "permanent");
    }
    SECTION("in the request") {
      HttpClient client(test_options());
      HttpRequest request = post_to(server.url("/"));
      request.headers = {header};
      const HttpResponse response = client.post(request);
      CHECK(response.status == 0);
      CHECK_FALSE(response.transport_error);
    }
  }
  HttpOptions options = test_options();
  options.bearer_token = "token\r\nX-Injected: 1";
  HttpClient client(options);
  CHECK_FALSE(client.post(post_to(server.url("/"))).error.empty());
  CHECK(server.request_count() == 0);
}

TEST_CASE("HttpClient sends a large body at once, without Expect: 100-continue", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  const HttpRequest request = post_to(server.url("/ingest"), binary_body(2 << 20));
  const HttpResponse response = client.post(request);
  CHECK(response.status == 200);
  REQUIRE(server.request_count() == 1);
  const auto received = server.requests().front();
  CHECK_FALSE(received.has_header("Expect"));
  CHECK(received.body == request.body);
}

TEST_CASE("HttpClient status codes through classify", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  const std::pair<int, std::string> cases[] = {
      {200, "ok"},
      {202, "ok"},
      {204, "ok"},
      {301, "permanent"},  // redirects are not followed
      {400, "permanent"},
      {401, "permanent"},
      {403, "permanent"},
      {404, "permanent"},
      {413, "permanent"},
      {422, "permanent"},
      {408, "retryable"},
      {429, "retryable"},
      {500, "retryable"},
      {502, "retryable"},
      {503, "retryable"},
      {504, "retryable"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.first);
    server.push(Response::status(c.first, "why " + std::to_string(c.first)));
    const HttpResponse response = client.post(post_to(server.url("/")));
    CHECK(response.status == c.first);
    CHECK_FALSE(response.transport_error);
    const UploadResult result = classify(response, "pyroscope");
    CHECK(upload_outcome(result) == c.second);
    if (c.second == "ok") {
      CHECK(response.error.empty());
      CHECK(result.message().empty());
    } else {
      CHECK(response.error == "HTTP " + std::to_string(c.first) + ": why " + std::to_string(c.first));
      CHECK(result.message() == "pyroscope: " + response.error);
    }
  }
  // Every connection was kept alive, whatever the status.
  CHECK(server.request_count() == std::size(cases));
}

TEST_CASE("HttpClient keeps the first 64 KiB of a response and 200 bytes in the message", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  std::string big(100'000, 'x');
  big[10] = '\n';
  big[11] = '\0';
  server.push(Response::status(500, big));
  server.push(Response::status(200, "ok"));
  HttpResponse response = client.post(post_to(server.url("/")));
  CHECK(response.status == 500);
  CHECK(response.body == big.substr(0, 64 << 10));
  CHECK(response.error.rfind("HTTP 500: xxxxxxxxxx  xxx", 0) == 0);
  CHECK(response.error.size() == std::string("HTTP 500: ").size() + 200);
  // The rest was read, not refused: the connection stays usable.
  response = client.post(post_to(server.url("/")));
  CHECK(response.status == 200);
  CHECK(response.body == "ok");
  CHECK(response.reused_connection);

  server.push(Response::status(503));
  response = client.post(post_to(server.url("/")));
  CHECK(response.error == "HTTP 503");
}

TEST_CASE("HttpClient reads Retry-After", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());

  server.push(Response::retry_after(429, 7));
  HttpResponse response = client.post(post_to(server.url("/")));
  CHECK(response.status == 429);
  CHECK(response.retry_after == 7s);
  const UploadResult result = classify(response, "pyroscope");
  CHECK(upload_outcome(result) == "retryable");
  CHECK(contains(result.message(), "Retry-After 7 s"));

  server.push(Response::status(503).with_header("Retry-After", http_date(std::time(nullptr) + 3600)));
  response = client.post(post_to(server.url("/")));
  CHECK(response.status == 503);
  CHECK(response.retry_after >= 3500s);
  CHECK(response.retry_after <= 3600s);

  server.push(Response::status(503));
  response = client.post(post_to(server.url("/")));
  CHECK(response.retry_after.count() == -1);

  server.push(Response::status(200).with_header("retry-after", "0"));
  CHECK(client.post(post_to(server.url("/"))).retry_after.count() == 0);
}

TEST_CASE("HttpClient Retry-After parsing", "[http_client]") {
  using spanprof::detail::http_parse_retry_after;
  const std::time_t rfc_example = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
  CHECK(http_parse_retry_after("120", rfc_example) == 120s);
  CHECK(http_parse_retry_after(" 5\r\n", rfc_example) == 5s);
  CHECK(http_parse_retry_after("0", rfc_example) == 0s);
  CHECK(http_parse_retry_after("99999999999999999999999", rfc_example) == 999'999'999s);
  CHECK(http_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", rfc_example - 10) == 10s);
  CHECK(http_parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", rfc_example - 10) == 10s);  // RFC 850
  CHECK(http_parse_retry_after("Sun Nov  6 08:49:37 1994", rfc_example - 10) == 10s);        // asctime
  CHECK(http_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", rfc_example + 100) == 0s);  // already past
  CHECK(http_parse_retry_after("", rfc_example).count() == -1);
  CHECK(http_parse_retry_after("soon", rfc_example).count() == -1);
  CHECK(http_parse_retry_after(std::string(100, '7') + "x", rfc_example).count() == -1);
}

TEST_CASE("HttpClient transport failures are retryable transport errors", "[http_client]") {
  SECTION("connection refused") {
    const int port = HttpServer::unused_port();
    REQUIRE(port != 0);
    HttpClient client(test_options());
    const HttpResponse response = client.post(post_to("http://127.0.0.1:" + std::to_string(port) + "/"));
    CHECK(response.status == 0);
    CHECK(response.transport_error);
    CHECK_FALSE(response.error.empty());
    const UploadResult result = classify(response, "pyroscope");
    CHECK(upload_outcome(result) == "retryable");
    CHECK(result.message().rfind("pyroscope: ", 0) == 0);
  }
  SECTION("connection reset") {
    HttpServer server;
    server.push(Response::reset());
    HttpClient client(test_options());  // a fresh connection: libcurl replays on a reused one
    const HttpResponse response = client.post(post_to(server.url("/")));
    CHECK(response.status == 0);
    CHECK(response.transport_error);
    CHECK(upload_outcome(classify(response, "x")) == "retryable");
  }
  SECTION("closed without a reply") {
    HttpServer server;
    server.push(Response::close_without_reply());
    HttpClient client(test_options());
    const HttpResponse response = client.post(post_to(server.url("/")));
    CHECK(response.status == 0);
    CHECK(response.transport_error);
    CHECK(upload_outcome(classify(response, "x")) == "retryable");
  }
  SECTION("unresolvable host") {
    HttpClient client(test_options());
    const HttpResponse response = client.post(post_to("http://spanprof-test.invalid/"));
    CHECK(response.transport_error);
    CHECK(upload_outcome(classify(response, "x")) == "retryable");
  }
}

TEST_CASE("HttpClient requests that cannot be made are permanent failures", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  for (const std::string& url : {std::string(), std::string("http://exa mple/"), std::string("not a url"),
                                "ftp://127.0.0.1:" + std::to_string(server.port()) + "/",
                                std::string("file:///etc/passwd")}) {
    CAPTURE(url);
    const HttpResponse response = client.post(post_to(url));
    CHECK(response.status == 0);
    CHECK_FALSE(response.transport_error);
    CHECK_FALSE(response.error.empty());
    CHECK(upload_outcome(classify(response, "otlp")) == "permanent");
  }
  CHECK(server.request_count() == 0);
  // The client still works afterwards.
  CHECK(client.post(post_to(server.url("/"))).status == 200);
}

TEST_CASE("HttpClient gives up on a server that hangs after its timeout", "[http_client]") {
  HttpServer server;
  server.push(Response::hang());
  HttpOptions options = test_options();
  options.timeout = 300ms;
  HttpClient client(options);
  const auto start = Clock::now();
  const HttpResponse response = client.post(post_to(server.url("/")));
  const double elapsed = seconds_since(start);
  CHECK(elapsed >= 0.25);
  CHECK(elapsed < 3.0);
  CHECK(response.status == 0);
  CHECK(response.transport_error);
  CHECK(contains(response.error, "timed out"));
  CHECK(upload_outcome(classify(response, "x")) == "retryable");

  // A slow answer inside the limit is fine.
  server.push(Response::delay(100ms, 202));
  CHECK(client.post(post_to(server.url("/"))).status == 202);
}

TEST_CASE("HttpClient abort flag cuts a transfer short", "[http_client]") {
  HttpServer server;
  HttpOptions options = test_options();
  options.timeout = 60s;
  HttpClient client(options);

  SECTION("mid-transfer, from another thread") {
    server.push(Response::hang());
    std::atomic<bool> abort{false};
    Clock::time_point aborted_at{};
    std::thread aborter([&] {
      server.wait_for_requests(1, 10s);
      std::this_thread::sleep_for(100ms);
      aborted_at = Clock::now();
      abort.store(true);
    });
    const auto start = Clock::now();
    const HttpResponse response = client.post(post_to(server.url("/")), &abort);
    const auto returned_at = Clock::now();
    aborter.join();
    CHECK(std::chrono::duration<double>(returned_at - aborted_at).count() < 2.0);
    CHECK(seconds_since(start) < 10.0);
    CHECK(response.status == 0);
    CHECK(response.transport_error);
    CHECK(response.error == "aborted");
    CHECK(classify(response, "otlp").message() == "otlp: aborted");

    // The aborted connection is not reused, and the client goes on working.
    const HttpResponse next = client.post(post_to(server.url("/")));
    CHECK(next.status == 200);
    CHECK_FALSE(next.reused_connection);
  }
  SECTION("already set: nothing is sent") {
    const std::atomic<bool> abort{true};
    const HttpResponse response = client.post(post_to(server.url("/")), &abort);
    CHECK(response.transport_error);
    CHECK(response.error == "aborted");
    CHECK(server.request_count() == 0);
  }
  SECTION("never set: no effect") {
    const std::atomic<bool> abort{false};
    server.push(Response::delay(200ms));
    CHECK(client.post(post_to(server.url("/")), &abort).status == 200);
  }
}

TEST_CASE("HttpClient keeps its connection alive between posts", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  HttpResponse response = client.post(post_to(server.url("/a")));
  CHECK(response.status == 200);
  CHECK_FALSE(response.reused_connection);
  response = client.post(post_to(server.url("/b")));
  CHECK(response.status == 200);
  CHECK(response.reused_connection);

  server.push(Response::status(200).closing());
  CHECK(client.post(post_to(server.url("/c"))).reused_connection);
  response = client.post(post_to(server.url("/d")));  // the server closed the last one
  CHECK(response.status == 200);
  CHECK_FALSE(response.reused_connection);
  CHECK(server.request_count() == 4);
}

TEST_CASE("HttpClient fails while the server is down and recovers when it is back", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  REQUIRE(client.post(post_to(server.url("/"))).status == 200);

  server.stop();
  const HttpResponse down = client.post(post_to(server.url("/")));
  CHECK(down.transport_error);
  CHECK(upload_outcome(classify(down, "x")) == "retryable");

  REQUIRE(server.start());
  const HttpResponse back = client.post(post_to(server.url("/")));
  CHECK(back.status == 200);
  CHECK_FALSE(back.transport_error);
  CHECK(server.request_count() == 2);
}

TEST_CASE("HttpClient TLS: a failed handshake is a clean transport error", "[http_client]") {
  HttpServer server;
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port()) + "/";
  SECTION("verifying") {
    HttpClient client(test_options());
    const HttpResponse response = client.post(post_to(url));
    CHECK(response.status == 0);
    CHECK(response.transport_error);
    CHECK_FALSE(response.error.empty());
    CHECK(upload_outcome(classify(response, "x")) == "retryable");
  }
  SECTION("not verifying") {
    HttpOptions options = test_options();
    options.verify_tls = false;
    HttpClient client(options);
    const HttpResponse response = client.post(post_to(url));
    CHECK(response.transport_error);
  }
  SECTION("missing CA bundle and client certificate files") {
    HttpOptions options = test_options();
    options.ca_file = "/nonexistent/ca.pem";
    options.client_cert_file = "/nonexistent/client.pem";
    options.client_key_file = "/nonexistent/client.key";
    HttpClient client(options);
    const HttpResponse response = client.post(post_to(url));
    CHECK(response.transport_error);
    CHECK_FALSE(response.error.empty());
  }
  SECTION("TLS options do not disturb plain HTTP") {
    HttpOptions options = test_options();
    options.verify_tls = false;
    options.ca_file = "/nonexistent/ca.pem";
    HttpClient client(options);
    CHECK(client.post(post_to(server.url("/"))).status == 200);
  }
}

TEST_CASE("HttpClient goes through the configured proxy", "[http_client]") {
  HttpServer proxy;  // the test server understands absolute-form targets
  HttpOptions options = test_options();
  options.proxy = proxy.url();
  options.no_proxy.clear();
  HttpClient client(options);
  const HttpResponse response = client.post(post_to("http://ingest.spanprof-test.invalid:4040/ingest?name=a"));
  CHECK(response.status == 200);
  REQUIRE(proxy.request_count() == 1);
  const auto received = proxy.requests().front();
  CHECK(received.path == "/ingest");
  CHECK(received.query == "name=a");
  CHECK(received.header("Host") == "ingest.spanprof-test.invalid:4040");
}

TEST_CASE("HttpClient may be shared by threads", "[http_client]") {
  HttpServer server;
  HttpClient client(test_options());
  constexpr int threads = 4, posts = 10;
  std::atomic<int> ok{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < posts; ++i)
        if (client.post(post_to(server.url("/"), std::to_string(t) + "-" + std::to_string(i))).status == 200) ++ok;
    });
  }
  for (auto& worker : workers) worker.join();
  CHECK(ok.load() == threads * posts);
  const auto received = server.requests();
  CHECK(received.size() == static_cast<std::size_t>(threads * posts));
}

namespace {

std::atomic<std::uint64_t> storm_signals{0};
void on_storm_signal(int) { storm_signals.fetch_add(1, std::memory_order_relaxed); }

// A real-time signal nobody handles, from the top (spanprof's sampler takes its
// own from the bottom), with a handler installed without SA_RESTART so that
// interrupted system calls do fail with EINTR. The handler stays installed: a
// signal still queued when it was removed would kill the process.
int storm_signal() {
  static const int chosen = [] {
    for (int sig = SIGRTMAX; sig >= SIGRTMIN + 4; --sig) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) != 0 || (current.sa_flags & SA_SIGINFO) ||
          current.sa_handler != SIG_DFL)
        continue;
      struct sigaction action {};
      action.sa_handler = &on_storm_signal;
      action.sa_flags = 0;
      sigemptyset(&action.sa_mask);
      if (::sigaction(sig, &action, nullptr) == 0) return sig;
    }
    return 0;
  }();
  return chosen;
}

}  // namespace

TEST_CASE("HttpClient transfers survive a storm of signals (EINTR)", "[http_client]") {
  // spanprof's samplers interrupt threads with real-time signals from a thread
  // CPU-time timer. That timer is armed here too, but a thread blocked in poll()
  // burns no CPU, so another thread also signals it every 100 us.
  const int sig = storm_signal();
  REQUIRE(sig != 0);
  HttpServer server;
  server.set_default(Response::delay(50ms));
  HttpClient client(test_options());
  const pthread_t target = ::pthread_self();

  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = sig;
  event.sigev_notify_thread_id = static_cast<pid_t>(::syscall(SYS_gettid));
  timer_t timer{};
  REQUIRE(::timer_create(CLOCK_THREAD_CPUTIME_ID, &event, &timer) == 0);
  itimerspec every_100us{};
  every_100us.it_interval.tv_nsec = 100'000;
  every_100us.it_value.tv_nsec = 100'000;
  REQUIRE(::timer_settime(timer, 0, &every_100us, nullptr) == 0);

  std::atomic<bool> stop{false};
  const std::uint64_t before = storm_signals.load();
  std::thread storm([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      ::pthread_kill(target, sig);
      std::this_thread::sleep_for(100us);
    }
  });
  const std::string body = binary_body(1 << 20);
  // Checked once the storm is joined: an assertion that throws (e.g. under
  // --abort) while it runs would destroy a joinable thread.
  std::vector<HttpResponse> responses;
  for (int i = 0; i < 8; ++i) responses.push_back(client.post(post_to(server.url("/storm"), body)));
  stop.store(true);
  storm.join();
  ::timer_delete(timer);
  int ok = 0;
  for (const HttpResponse& response : responses) {
    if (response.status == 200) ++ok;
    INFO(response.error);
    CHECK(response.status == 200);
  }
  CHECK(ok == 8);
  const std::uint64_t delivered = storm_signals.load() - before;
  CAPTURE(delivered);
  CHECK(delivered > 100);
  const auto received = server.requests();
  REQUIRE(received.size() == 8);
  for (const auto& r : received) CHECK(r.body == body);
}

TEST_CASE("url_encode keeps unreserved characters only", "[http_client]") {
  using spanprof::detail::url_encode;
  CHECK(url_encode("") == "");
  CHECK(url_encode("AZaz09-._~") == "AZaz09-._~");
  CHECK(url_encode("app.cpu{env=prod,span=a b}") == "app.cpu%7Benv%3Dprod%2Cspan%3Da%20b%7D");
  CHECK(url_encode("/?#[]@!$&'()*+,;=%") == "%2F%3F%23%5B%5D%40%21%24%26%27%28%29%2A%2B%2C%3B%3D%25");
  CHECK(url_encode(std::string("\0\xff\xc3\xa9", 4)) == "%00%FF%C3%A9");
}
