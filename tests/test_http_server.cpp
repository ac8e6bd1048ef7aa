// The loopback HTTP test server (tests/support/http_server.hpp), driven by a raw
// socket client so that what goes over the wire is exactly what the test wrote.
#include "support/catch.hpp"
#include "support/test_helpers.hpp"
#include "support/command.hpp"
#include "support/http_server.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

using spanprof_test::HttpServer;
using spanprof_test::Response;
using namespace std::chrono_literals;

namespace {

using spanprof_test::binary_body;

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Reply {
  int status = 0;  // 0: no complete response
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int error = 0;          // errno of a failed read (ECONNRESET...)
  bool eof = false;       // the server closed before a complete response
  std::size_t bytes = 0;  // bytes of this response that arrived

  std::string header(const std::string& name) const {
    for (const auto& h : headers)
      if (strcasecmp(h.first.c_str(), name.c_str()) == 0) return h.second;
    return {};
  }
};

// A blocking client socket with a receive timeout, so a broken server fails the
// test instead of hanging it.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval timeout{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    const int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) connect_error_ = errno;
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connect_error_ == 0; }
  int connect_error() const { return connect_error_; }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(const std::string& data) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads exactly `n` bytes (or what arrives before EOF / an error).
  std::string read_exactly(std::size_t n) {
    while (pending_.size() < n && read_some()) {
    }
    std::string out = pending_.substr(0, n);
    pending_.erase(0, out.size());
    return out;
  }

  // Reads one response: status line, headers, body framed by Content-Length (or
  // until EOF when there is none).
  Reply read_response() {
    Reply reply;
    std::size_t end = std::string::npos;
    while ((end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!read_some()) return failed(reply);
    }
    const std::string head = pending_.substr(0, end);
    pending_.erase(0, end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.1 ", 0) != 0 || status_line.size() < 12) return reply;
    reply.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const std::size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::size_t value = colon + 1;
      while (value < line.size() && line[value] == ' ') ++value;
      reply.headers.emplace_back(line.substr(0, colon), line.substr(value));
    }
    const std::string length = reply.header("Content-Length");
    if (!length.empty()) {
      const std::size_t n = std::stoul(length);
      while (pending_.size() < n) {
        if (!read_some()) {
          reply.status = 0;
          return failed(reply);
        }
      }
      reply.body = pending_.substr(0, n);
      pending_.erase(0, n);
    } else if (reply.status != 204 && reply.status >= 200) {
      while (read_some()) {
      }
      reply.body = std::move(pending_);
      pending_.clear();
    }
    return reply;
  }

  // After a reply with Connection: close: true when the server closed its side.
  bool sees_eof() {
    char c;
    for (;;) {
      const ssize_t n = ::recv(fd_, &c, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      return n == 0;
    }
  }

 private:
  bool read_some() {
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        pending_.append(buffer, static_cast<std::size_t>(n));
        received_ += static_cast<std::size_t>(n);
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        eof_ = true;
      } else {
        error_ = errno;
      }
      return false;
    }
  }

  Reply& failed(Reply& reply) {
    reply.error = error_;
    reply.eof = eof_;
    reply.bytes = received_;
    return reply;
  }

  int fd_ = -1;
  int connect_error_ = 0;
  std::string pending_;
  std::size_t received_ = 0;
  int error_ = 0;
  bool eof_ = false;
};

std::string post(const std::string& target, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body;
}

// One request on a fresh connection.
Reply round_trip(int port, const std::string& request) {
  Client client(port);
  if (!client.connected()) {
    Reply reply;
    reply.error = client.connect_error();
    return reply;
  }
  client.send(request);
  return client.read_response();
}


}  // namespace

TEST_CASE("HttpServer records a Content-Length POST exactly", "[http_server]") {
  HttpServer server;
  REQUIRE(server.running());
  REQUIRE(server.port() > 0);
  CHECK(server.url() == "http://127.0.0.1:" + std::to_string(server.port()));
  CHECK(server.url("/ingest") == server.url() + "/ingest");

  std::string body = binary_body(3000);
  body[0] = '\0';
  body[1] = '\r';
  body[2] = '\n';
  REQUIRE(body.find('\0', 5) != std::string::npos);
  const auto before = Clock::now();
  const Reply reply = round_trip(server.port(), post("/ingest?name=app", body,
                                                   "Content-Type: application/octet-stream\r\n"
                                                   "X-Scope-OrgID: tenant-1\r\n"));
  CHECK(reply.status == 200);
  CHECK(reply.body.empty());

  REQUIRE(server.request_count() == 1);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  const auto& r = requests[0];
  CHECK(r.method == "POST");
  CHECK(r.path == "/ingest");
  CHECK(r.query == "name=app");
  CHECK(r.version == "HTTP/1.1");
  CHECK(r.body.size() == body.size());
  CHECK(r.body == body);
  CHECK(r.header("content-type") == "application/octet-stream");
  CHECK(r.header("X-SCOPE-ORGID") == "tenant-1");
  CHECK(r.header("Content-Length") == "3000");
  CHECK(r.header("missing").empty());
  CHECK(r.has_header("host"));
  CHECK_FALSE(r.has_header("missing"));
  CHECK(r.headers.front() == std::make_pair(std::string("Host"), std::string("127.0.0.1")));
  CHECK(r.received >= before);
  CHECK(r.received <= Clock::now());
}

TEST_CASE("HttpServer splits the target and percent-decodes the query", "[http_server]") {
  HttpServer server;
  const Reply reply = round_trip(
      server.port(),
      "GET /ingest?name=my%20app%7Bspan_name%3D%22GET%20%2Fx%22%7D&from=1700000000&spaced=a+b%2Bc&empty=&flag"
      "&name=second&bad=%zz%4 HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(reply.status == 200);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].method == "GET");
  CHECK(requests[0].path == "/ingest");
  CHECK(requests[0].body.empty());
  const auto params = requests[0].query_params();
  CHECK(params.at("name") == "my app{span_name=\"GET /x\"}");  // the first of a repeated key
  CHECK(params.at("from") == "1700000000");
  CHECK(params.at("spaced") == "a b+c");
  CHECK(params.at("empty").empty());
  CHECK(params.at("flag").empty());
  CHECK(params.at("bad") == "%zz%4");  // malformed escapes kept as written
  CHECK(params.size() == 6);

  SECTION("a target without a query, and an absolute-form target") {
    round_trip(server.port(), "GET /v1/profiles HTTP/1.1\r\nHost: x\r\n\r\n");
    round_trip(server.port(), "GET http://127.0.0.1/abs/path?k=v HTTP/1.1\r\nHost: x\r\n\r\n");
    const auto all = server.requests();
    REQUIRE(all.size() == 3);
    CHECK(all[1].path == "/v1/profiles");
    CHECK(all[1].query.empty());
    CHECK(all[1].query_params().empty());
    CHECK(all[2].path == "/abs/path");
    CHECK(all[2].query_params().at("k") == "v");
  }
}

TEST_CASE("HttpServer de-chunks a chunked body", "[http_server]") {
  HttpServer server;
  Client client(server.port());
  REQUIRE(client.connected());
  const std::string body = binary_body(70000);
  // Sent in pieces that split the framing itself, with a chunk extension and a trailer.
  const std::string wire = "POST /v1/profiles HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                           std::string("a;ext=1\r\n") + body.substr(0, 10) + "\r\n" + "10F5E\r\n" +
                           body.substr(10, 69470) + "\r\n" + "208\r\n" + body.substr(69480) + "\r\n" +
                           "0\r\nX-Trailer: yes\r\n\r\n";
  for (std::size_t at = 0; at < wire.size(); at += 9000) {
    REQUIRE(client.send(wire.substr(at, 9000)));
    std::this_thread::sleep_for(2ms);
  }
  CHECK(client.read_response().status == 200);
  // The connection is still usable: the framing ended where it should.
  REQUIRE(client.send(post("/after", "next")));
  CHECK(client.read_response().status == 200);

  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].path == "/v1/profiles");
  CHECK(requests[0].header("transfer-encoding") == "chunked");
  CHECK(requests[0].body.size() == body.size());
  CHECK(requests[0].body == body);
  CHECK(requests[1].body == "next");
}

TEST_CASE("HttpServer answers Expect: 100-continue before the body", "[http_server]") {
  HttpServer server;
  server.set_default(Response::status(201, "created"));
  Client client(server.port());
  REQUIRE(client.connected());
  const std::string body = binary_body(2 << 20);
  REQUIRE(client.send("POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nExpect: 100-continue\r\n\r\n"));
  // The interim response arrives although no byte of the body has been sent.
  CHECK(client.read_exactly(25) == "HTTP/1.1 100 Continue\r\n\r\n");
  REQUIRE(client.send(body));
  const Reply reply = client.read_response();
  CHECK(reply.status == 201);
  CHECK(reply.body == "created");
  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].body == body);
  CHECK(requests[0].header("expect") == "100-continue");

  SECTION("a chunked body with Expect: 100-continue") {
    REQUIRE(client.send("POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                        "Expect: 100-continue\r\n\r\n"));
    CHECK(client.read_exactly(25) == "HTTP/1.1 100 Continue\r\n\r\n");
    REQUIRE(client.send("3\r\nabc\r\n0\r\n\r\n"));
    CHECK(client.read_response().status == 201);
    REQUIRE(server.request_count() == 2);
    CHECK(server.requests()[1].body == "abc");
  }
}

TEST_CASE("HttpServer rejects bodies over 64 MiB with 413", "[http_server]") {
  HttpServer server;
  Client client(server.port());
  REQUIRE(client.connected());
  REQUIRE(client.send("POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(HttpServer::max_body_bytes + 1) + "\r\nExpect: 100-continue\r\n\r\n"));
  const Reply reply = client.read_response();  // 413 straight away, no 100 Continue
  CHECK(reply.status == 413);
  CHECK(reply.header("Connection") == "close");
  CHECK(client.sees_eof());
  REQUIRE(server.request_count() == 1);  // recorded as an attempt, without a body
  CHECK(server.requests()[0].body.empty());

  SECTION("a chunk that would go over the limit") {
    Client chunked(server.port());
    REQUIRE(chunked.send("POST /ingest HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4000001\r\n"));
    CHECK(chunked.read_response().status == 413);
  }
}

TEST_CASE("HttpServer answers a malformed request with 400 and does not record it", "[http_server]") {
  HttpServer server;
  CHECK(round_trip(server.port(), "NONSENSE\r\n\r\n").status == 400);
  CHECK(round_trip(server.port(), "POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n").status == 400);
  CHECK(round_trip(server.port(), "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").status == 400);
  CHECK(round_trip(server.port(), "GET / HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n").status == 431);
  CHECK(server.request_count() == 0);
}

TEST_CASE("HttpServer keeps a connection alive for several requests", "[http_server]") {
  HttpServer server;
  Client client(server.port());
  REQUIRE(client.connected());
  REQUIRE(client.send(post("/one", "first")));
  const Reply first = client.read_response();
  CHECK(first.status == 200);
  CHECK(first.header("Connection").empty());
  REQUIRE(client.send(post("/two", "second")));
  CHECK(client.read_response().status == 200);
  // Two pipelined requests in one write.
  REQUIRE(client.send(post("/three", "3") + post("/four", "4")));
  CHECK(client.read_response().status == 200);
  CHECK(client.read_response().status == 200);
  // Connection: close ends it after the reply.
  REQUIRE(client.send(post("/five", "5", "Connection: close\r\n")));
  const Reply last = client.read_response();
  CHECK(last.status == 200);
  CHECK(last.header("Connection") == "close");
  CHECK(client.sees_eof());

  const auto requests = server.requests();
  REQUIRE(requests.size() == 5);
  const char* paths[] = {"/one", "/two", "/three", "/four", "/five"};
  const char* bodies[] = {"first", "second", "3", "4", "5"};
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(requests[i].path == paths[i]);
    CHECK(requests[i].body == bodies[i]);
  }

  SECTION("HTTP/1.0 closes unless asked to keep alive") {
    Client old(server.port());
    REQUIRE(old.send("GET /old HTTP/1.0\r\n\r\n"));
    CHECK(old.read_response().status == 200);
    CHECK(old.sees_eof());
  }
}

TEST_CASE("HttpServer plays its script in order, then the default", "[http_server]") {
  HttpServer server;
  server.push(Response::status(500, "boom"));
  server.push(Response::retry_after(429, 7));
  server.push(Response::status(204));
  server.push(Response::status(503).with_header("Retry-After", "2").with_body("later"));
  server.push(Response::status(400, "bad").closing());
  server.set_default(Response::status(202, "ok").with_header("Content-Type", "text/plain"));
  CHECK(server.scripted_left() == 5);

  Client client(server.port());
  REQUIRE(client.send(post("/", "1")));
  Reply r = client.read_response();
  CHECK(r.status == 500);
  CHECK(r.body == "boom");
  REQUIRE(client.send(post("/", "2")));
  r = client.read_response();
  CHECK(r.status == 429);
  CHECK(r.header("Retry-After") == "7");
  REQUIRE(client.send(post("/", "3")));
  r = client.read_response();
  CHECK(r.status == 204);
  CHECK(r.header("Content-Length").empty());
  CHECK(r.body.empty());
  REQUIRE(client.send(post("/", "4")));
  r = client.read_response();
  CHECK(r.status == 503);
  CHECK(r.header("Retry-After") == "2");
  CHECK(r.body == "later");
  REQUIRE(client.send(post("/", "5")));
  r = client.read_response();
  CHECK(r.status == 400);
  CHECK(client.sees_eof());  // closing() ends the keep-alive connection
  for (int i = 0; i < 2; ++i) {
    r = round_trip(server.port(), post("/", "default"));
    CHECK(r.status == 202);
    CHECK(r.body == "ok");
    CHECK(r.header("content-type") == "text/plain");
  }
  CHECK(server.scripted_left() == 0);
  CHECK(server.request_count() == 7);
}

TEST_CASE("HttpServer delays a reply as scripted", "[http_server]") {
  HttpServer server;
  server.push(Response::delay(200ms, 503));
  const auto start = Clock::now();
  const Reply reply = round_trip(server.port(), post("/", "x"));
  const double elapsed = ms_since(start);
  CHECK(reply.status == 503);
  CHECK(elapsed >= 200.0);
  CHECK(elapsed < 10000.0);
  // The next request is not delayed.
  const auto again = Clock::now();
  CHECK(round_trip(server.port(), post("/", "y")).status == 200);
  CHECK(ms_since(again) < 10000.0);
}

TEST_CASE("HttpServer resets a connection as scripted", "[http_server]") {
  HttpServer server;
  server.push(Response::reset());
  const Reply reply = round_trip(server.port(), post("/", "payload"));
  CHECK(reply.status == 0);
  CHECK(reply.error == ECONNRESET);
  CHECK(reply.bytes == 0);
  REQUIRE(server.request_count() == 1);  // the attempt is recorded
  CHECK(server.requests()[0].body == "payload");
  CHECK(round_trip(server.port(), post("/", "retry")).status == 200);
  CHECK(server.request_count() == 2);

  SECTION("a delayed reset") {
    server.push(Response::reset().after(100ms));
    const auto start = Clock::now();
    CHECK(round_trip(server.port(), post("/", "z")).error == ECONNRESET);
    CHECK(ms_since(start) >= 100.0);
  }
}

TEST_CASE("HttpServer closes without a reply as scripted", "[http_server]") {
  HttpServer server;
  server.push(Response::close_without_reply());
  const Reply reply = round_trip(server.port(), post("/", "x"));
  CHECK(reply.status == 0);
  CHECK(reply.eof);
  CHECK(reply.error == 0);
  CHECK(reply.bytes == 0);
  CHECK(server.request_count() == 1);
}

TEST_CASE("HttpServer stop() returns promptly while requests hang or wait", "[http_server]") {
  HttpServer server;
  SECTION("a hanging request") { server.push(Response::hang()); }
  SECTION("a long delay") { server.push(Response::delay(std::chrono::minutes(5))); }

  Client client(server.port());
  Client idle(server.port());  // connected, never sends anything
  REQUIRE(client.connected());
  REQUIRE(idle.connected());
  REQUIRE(client.send(post("/", "never answered")));
  REQUIRE(server.wait_for_requests(1, 10s));
  std::this_thread::sleep_for(20ms);  // the server is now waiting

  const auto start = Clock::now();
  server.stop();
  const double stop_ms = ms_since(start);
  INFO("stop() took " << stop_ms << " ms");
  CHECK(stop_ms < 1000.0);
  CHECK_FALSE(server.running());
  const Reply reply = client.read_response();
  CHECK(reply.status == 0);  // no answer: the connection was closed
  CHECK((reply.eof || reply.error == ECONNRESET));
  CHECK(server.request_count() == 1);  // the record survives stop()
}

TEST_CASE("HttpServer's destructor returns promptly with clients connected", "[http_server]") {
  auto server = std::make_unique<HttpServer>();
  server->set_default(Response::hang());
  Client hanging(server->port());
  Client idle(server->port());
  Client partial(server->port());
  REQUIRE(hanging.send(post("/", "x")));
  REQUIRE(partial.send("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly part"));
  REQUIRE(server->wait_for_requests(1, 10s));
  std::this_thread::sleep_for(20ms);
  const auto start = Clock::now();
  server.reset();
  const double destroy_ms = ms_since(start);
  INFO("~HttpServer took " << destroy_ms << " ms");
  CHECK(destroy_ms < 1000.0);
}

TEST_CASE("HttpServer can go down and come back on the same port", "[http_server]") {
  HttpServer server;
  const int port = server.port();
  CHECK(round_trip(port, post("/", "before")).status == 200);

  server.stop();
  CHECK_FALSE(server.running());
  CHECK(server.port() == port);
  Client refused(port);
  CHECK(refused.connect_error() == ECONNREFUSED);

  REQUIRE(server.start());
  CHECK(server.running());
  CHECK(server.port() == port);
  CHECK(server.start());  // already running: nothing to do
  CHECK(round_trip(port, post("/", "after")).status == 200);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].body == "before");
  CHECK(requests[1].body == "after");

  SECTION("several cycles, with connections left open each time") {
    for (int i = 0; i < 3; ++i) {
      Client open(port);
      REQUIRE(open.send(post("/", "cycle")));
      CHECK(open.read_response().status == 200);
      server.stop();
      REQUIRE(server.start());
      CHECK(server.port() == port);
    }
    CHECK(round_trip(port, post("/", "last")).status == 200);
  }
}

TEST_CASE("HttpServer can start late on a chosen port", "[http_server]") {
  const int port = HttpServer::unused_port();
  REQUIRE(port > 0);
  CHECK(round_trip(port, post("/", "x")).error == ECONNREFUSED);
  HttpServer server(port);
  REQUIRE(server.running());
  CHECK(server.port() == port);
  CHECK(round_trip(port, post("/", "x")).status == 200);
}

TEST_CASE("HttpServer::unused_port() refuses connections", "[http_server]") {
  const int port = HttpServer::unused_port();
  REQUIRE(port > 0);
  Client client(port);
  CHECK(client.connect_error() == ECONNREFUSED);
}

TEST_CASE("HttpServer::wait_for_requests waits for the count", "[http_server]") {
  HttpServer server;
  CHECK_FALSE(server.wait_for_requests(1, 20ms));
  CHECK(server.wait_for_requests(0, 0ms));
  std::thread sender([port = server.port()] {
    std::this_thread::sleep_for(50ms);
    round_trip(port, post("/", "a"));
    round_trip(port, post("/", "b"));
  });
  const bool both_arrived = server.wait_for_requests(2, 10s);
  sender.join();  // before any assertion: one that throws would leave it joinable
  CHECK(both_arrived);
  CHECK(server.request_count() == 2);
  CHECK_FALSE(server.wait_for_requests(3, 30ms));
  server.clear_requests();
  CHECK(server.request_count() == 0);
}

TEST_CASE("HttpServer serves concurrent clients", "[http_server]") {
  HttpServer server;
  server.set_default(Response::status(200, "fine"));
  constexpr int threads = 8;
  constexpr int per_thread = 20;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&, t] {
      Client client(server.port());
      for (int i = 0; i < per_thread; ++i) {
        const std::string body = std::to_string(t) + ":" + std::to_string(i) + std::string(static_cast<std::size_t>(i) * 100, 'p');
        if (!client.send(post("/c", body))) return;
        const Reply r = client.read_response();
        if (r.status == 200 && r.body == "fine") ok.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  CHECK(ok.load() == threads * per_thread);
  const auto requests = server.requests();
  REQUIRE(requests.size() == static_cast<std::size_t>(threads * per_thread));
  std::vector<int> seen(threads, 0);
  for (const auto& r : requests) {
    const int t = std::stoi(r.body.substr(0, r.body.find(':')));
    REQUIRE(t >= 0);
    REQUIRE(t < threads);
    const int i = std::stoi(r.body.substr(r.body.find(':') + 1));
    CHECK(i == seen[static_cast<std::size_t>(t)]);  // each connection's requests in order
    ++seen[static_cast<std::size_t>(t)];
  }
}

TEST_CASE("HttpServer works with the curl tool", "[http_server]") {
  if (spanprof_test::capture_command("command -v curl").exit_code != 0) {
    WARN("curl not installed: skipped");
    return;
  }
  HttpServer server;
  server.push(Response::status(503));
  char path[] = "/tmp/spanprof_http_server_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  const std::string body = binary_body(3 << 20);  // large enough for curl to send Expect: 100-continue
  std::ofstream(path, std::ios::binary) << body;

  const std::string base = "curl -sS -o /dev/null -w '%{http_code}' ";
  auto first = spanprof_test::capture_command(base + "--data-binary @" + path + " '" + server.url("/ingest?name=a%20b") + "'");
  CHECK(first.output == "503");
  auto chunked = spanprof_test::capture_command(base + "-H 'Transfer-Encoding: chunked' --data-binary @" + path + " '" +
                                                server.url("/v1/profiles") + "'");
  CHECK(chunked.output == "200");
  server.push(Response::reset());
  auto reset = spanprof_test::capture_command(base + "--data-binary x " + server.url());
  CHECK(reset.exit_code == 56);  // CURLE_RECV_ERROR: connection reset by peer
  ::unlink(path);

  const auto requests = server.requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].query_params().at("name") == "a b");
  CHECK(requests[0].body == body);
  CHECK(requests[0].header("Expect") == "100-continue");
  CHECK(requests[1].header("Transfer-Encoding") == "chunked");
  CHECK(requests[1].header("Expect") == "100-continue");
  CHECK(requests[1].body == body);
  CHECK(requests[2].body == "x");
}
