// A loopback HTTP/1.1 server for tests of the HTTP uploaders: binds 127.0.0.1 on an
// ephemeral port, records every request it receives and answers from a script of
// actions (statuses, delays, connection resets, hangs), so a test can check what an
// uploader sent and how it copes with a server that fails.
//
//   spanprof_test::HttpServer server;              // listening once constructed
//   server.push(spanprof_test::Response::status(503));
//   server.push(spanprof_test::Response::status(429).with_header("Retry-After", "1"));
//   server.set_default(spanprof_test::Response::status(200));
//   ... point the uploader at server.url() ...
//   REQUIRE(server.wait_for_requests(3, std::chrono::seconds(10)));
//   auto requests = server.requests();
//
// Each connection is served on its own thread; every blocking point polls an eventfd
// that stop() signals, so stop() and the destructor return promptly even while a
// client is connected, a reply is being delayed or a request is left hanging.
// Nothing here throws: failures show as start() returning false or port() being 0.
#ifndef SPANPROF_TESTS_SUPPORT_HTTP_SERVER_HPP_
#define SPANPROF_TESTS_SUPPORT_HTTP_SERVER_HPP_

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

namespace spanprof_test {

namespace http_detail {

inline char lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

inline bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

inline std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// True when the comma-separated header value lists `token` (case-insensitive).
inline bool has_token(std::string_view list, std::string_view token) noexcept {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    if (iequals(trim(list.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

inline int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes %XY escapes and '+' as a space; a malformed escape is kept as written.
inline std::string form_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2])));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

inline const char* reason_phrase(int code) noexcept {
  switch (code) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

// Milliseconds left until `deadline`, as a poll() timeout (never negative).
inline int poll_timeout(std::chrono::steady_clock::time_point deadline) noexcept {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30));
}

}  // namespace http_detail

// One request as the server received it.
struct Request {
  std::string method;  // "POST"
  std::string path;    // the target up to '?', as sent (not percent-decoded)
  std::string query;   // the raw text after '?' (empty when there is none)
  std::string body;    // the body, de-chunked; may hold any bytes, NULs included
  std::vector<std::pair<std::string, std::string>> headers;  // in order; names as sent
  std::string version;  // "HTTP/1.1"
  std::chrono::steady_clock::time_point received{};  // when the whole request had been read

  // The first header called `name` (case-insensitive), or "" when there is none.
  std::string header(std::string_view name) const {
    for (const auto& h : headers)
      if (http_detail::iequals(h.first, name)) return h.second;
    return {};
  }
  bool has_header(std::string_view name) const noexcept {
    for (const auto& h : headers)
      if (http_detail::iequals(h.first, name)) return true;
    return false;
  }

  // The query's key=value pairs, percent-decoded with '+' as a space. A key without
  // '=' maps to ""; a repeated key keeps its first value.
  std::map<std::string, std::string> query_params() const {
    std::map<std::string, std::string> params;
    std::string_view rest(query);
    while (!rest.empty()) {
      const std::size_t amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      if (!pair.empty()) {
        const std::size_t eq = pair.find('=');
        std::string key = http_detail::form_decode(pair.substr(0, eq));
        std::string value = eq == std::string_view::npos ? std::string() : http_detail::form_decode(pair.substr(eq + 1));
        params.emplace(std::move(key), std::move(value));
      }
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
    return params;
  }
};

// What the server does with one request, once it has read all of it.
struct Response {
  enum class Kind {
    reply,                // send `code`, `headers` and `body`
    reset,                // close with SO_LINGER 0: the client sees a connection reset
    hang,                 // never answer; the connection stays open until the client or stop() ends it
    close_without_reply,  // close the connection cleanly without a byte of reply
  };

  Kind kind = Kind::reply;
  int code = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // sent after Content-Length
  std::chrono::milliseconds delay_before{0};  // waited before acting (cut short by stop())
  bool close_after = false;                   // reply with Connection: close, then close

  static Response status(int code, std::string body = {}) {
    Response r;
    r.code = code;
    r.body = std::move(body);
    return r;
  }
  static Response delay(std::chrono::milliseconds wait, int code = 200) {
    Response r = status(code);
    r.delay_before = wait;
    return r;
  }
  // `code` with a Retry-After header of `seconds` (429 and 503 use it).
  static Response retry_after(int code, int seconds) {
    return status(code).with_header("Retry-After", std::to_string(seconds));
  }
  static Response reset() { return of_kind(Kind::reset); }
  static Response hang() { return of_kind(Kind::hang); }
  static Response close_without_reply() { return of_kind(Kind::close_without_reply); }

  Response& with_header(std::string name, std::string value) & {
    headers.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  Response with_header(std::string name, std::string value) && {
    with_header(std::move(name), std::move(value));
    return std::move(*this);
  }
  Response& with_body(std::string b) & {
    body = std::move(b);
    return *this;
  }
  Response with_body(std::string b) && {
    with_body(std::move(b));
    return std::move(*this);
  }
  Response& after(std::chrono::milliseconds wait) & {
    delay_before = wait;
    return *this;
  }
  Response after(std::chrono::milliseconds wait) && {
    after(wait);
    return std::move(*this);
  }
  Response& closing() & {
    close_after = true;
    return *this;
  }
  Response closing() && {
    closing();
    return std::move(*this);
  }

 private:
  static Response of_kind(Kind k) {
    Response r;
    r.kind = k;
    return r;
  }
};

class HttpServer {
 public:
  static constexpr std::size_t max_body_bytes = std::size_t{64} << 20;  // larger: 413
  static constexpr std::size_t max_head_bytes = std::size_t{64} << 10;  // larger: 431

  // Listens on 127.0.0.1:`port` (0: an ephemeral port). Check running() or port().
  explicit HttpServer(int port = 0) noexcept {
    port_.store(port);
    start();
  }
  ~HttpServer() { stop(); }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens again, on the port it had before (SO_REUSEADDR), so a client holding
  // the old url() reaches it. True when listening (also when it already was).
  bool start() noexcept {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
    if (running_) return true;
    const int listen_fd = open_listener(port_.load());
    if (listen_fd < 0) return false;
    const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd < 0) {
      ::close(listen_fd);
      return false;
    }
    sockaddr_in bound{};
    socklen_t length = sizeof bound;
    if (::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      ::close(listen_fd);
      ::close(wake_fd);
      return false;
    }
    port_.store(ntohs(bound.sin_port));
    listen_fd_ = listen_fd;
    wake_fd_ = wake_fd;
    stopping_.store(false);
    try {
      accept_thread_ = std::thread([this] { accept_loop(); });
    } catch (...) {
      ::close(listen_fd_);
      ::close(wake_fd_);
      listen_fd_ = wake_fd_ = -1;
      return false;
    }
    running_ = true;
    return true;
  }

  // Stops listening and closes every connection; returns once all threads are gone.
  // The port, the recorded requests and the script are kept for a later start().
  void stop() noexcept {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
    if (!running_) return;
    stopping_.store(true);
    const std::uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    // The accept thread is gone: nobody else touches connections_ now.
    for (auto& c : connections_)
      if (c.thread.joinable()) c.thread.join();
    connections_.clear();
    ::close(listen_fd_);
    ::close(wake_fd_);
    listen_fd_ = wake_fd_ = -1;
    running_ = false;
  }

  bool running() const noexcept {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
    return running_;
  }
  int port() const noexcept { return port_.load(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  std::string url(std::string_view path) const { return url() + std::string(path); }

  // The script: each request takes the oldest pushed action, then the default.
  void push(Response r) {
    std::lock_guard<std::mutex> lock(mutex_);
    script_.push_back(std::move(r));
  }
  void set_default(Response r) {
    std::lock_guard<std::mutex> lock(mutex_);
    default_ = std::move(r);
  }
  std::size_t scripted_left() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return script_.size();
  }

  // Every request read in full, whatever its action (resets and hangs included), in
  // arrival order. A body over max_body_bytes is recorded with an empty body (and
  // answered 413 without consuming an action); malformed requests are not recorded.
  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::size_t request_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_.size();
  }
  void clear_requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.clear();
  }
  // Records requests without their bodies from now on: a long run against a
  // server in the same process, measuring that process's memory, must not count
  // what the server keeps.
  void keep_bodies(bool keep) {
    std::lock_guard<std::mutex> lock(mutex_);
    keep_bodies_ = keep;
  }
  // True once at least `n` requests have been recorded; false after `timeout`.
  bool wait_for_requests(std::size_t n, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return recorded_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
  }

  // A loopback port nobody listens on (bound, then closed); 0 on failure.
  static int unused_port() noexcept {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    sockaddr_in address = loopback(0);
    int port = 0;
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
      port = ntohs(address.sin_port);
    ::close(fd);
    return port;
  }

 private:
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  // The parsed request line and headers of one request.
  struct Head {
    Request request;
    bool keep_alive = true;
  };

  // The socket of one connection, with the bytes read but not yet parsed.
  struct Peer {
    int fd = -1;
    std::string in;
    std::size_t pos = 0;  // first unparsed byte of `in`
  };

  enum class Read { ok, closed, too_large, bad };

  static sockaddr_in loopback(int port) noexcept {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
  }

  static int open_listener(int port) noexcept {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const sockaddr_in address = loopback(port);
    // A port just released can take a moment to become bindable again.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
      if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) break;
      if (errno != EADDRINUSE || port == 0 || std::chrono::steady_clock::now() > deadline) {
        ::close(fd);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (::listen(fd, 128) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

  // Waits for `events` on `fd` (or for stop()) until `timeout_ms` (-1: no limit).
  // Returns 1 when ready, 0 on timeout, -1 when stopping or on error.
  int wait_fd(int fd, short events, int timeout_ms) const noexcept {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
      if (stopping()) return -1;
      pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {fd, events, 0}};
      const int nfds = fd >= 0 ? 2 : 1;
      const int timeout = timeout_ms < 0 ? -1 : http_detail::poll_timeout(deadline);
      const int n = ::poll(fds, static_cast<nfds_t>(nfds), timeout);
      if (n < 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      if (fds[0].revents != 0 || stopping()) return -1;
      if (n == 0) {
        if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) return 0;
        continue;
      }
      if (nfds == 2 && fds[1].revents != 0) return 1;
    }
  }

  // Sleeps for `d`; false when stop() cut it short.
  bool pause(std::chrono::milliseconds d) const noexcept {
    if (d.count() <= 0) return !stopping();
    const int ms = static_cast<int>(std::min<std::int64_t>(d.count(), 1 << 30));
    return wait_fd(-1, 0, ms) == 0;
  }

  void accept_loop() noexcept {
    while (!stopping()) {
      if (wait_fd(listen_fd_, POLLIN, -1) < 0) return;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause(std::chrono::milliseconds(10));
        continue;  // EAGAIN, EINTR, ECONNABORTED...
      }
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      reap_finished();
      try {
        auto done = std::make_shared<std::atomic<bool>>(false);
        connections_.push_back(Connection{std::thread([this, fd, done] {
                                            serve(fd);
                                            done->store(true, std::memory_order_release);
                                          }),
                                          done});
      } catch (...) {
        ::close(fd);
      }
    }
  }

  void reap_finished() noexcept {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->done->load(std::memory_order_acquire)) {
        if (it->thread.joinable()) it->thread.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Reads more bytes into peer.in; false on end of stream, error or stop().
  bool read_more(Peer& peer) const {
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(peer.fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        peer.in.append(buffer, static_cast<std::size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (wait_fd(peer.fd, POLLIN, -1) < 0) return false;
    }
  }

  bool send_all(int fd, std::string_view data) const noexcept {
    while (!data.empty()) {
      const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (wait_fd(fd, POLLOUT, -1) < 0) return false;
    }
    return true;
  }

  // One line ending in LF (CR stripped) into `line`; ok, closed, or too_large past `limit`.
  Read read_line(Peer& peer, std::string& line, std::size_t limit) const {
    for (;;) {
      const std::size_t lf = peer.in.find('\n', peer.pos);
      if (lf != std::string::npos) {
        if (lf - peer.pos > limit) return Read::too_large;
        std::size_t end = lf;
        if (end > peer.pos && peer.in[end - 1] == '\r') --end;
        line.assign(peer.in, peer.pos, end - peer.pos);
        peer.pos = lf + 1;
        return Read::ok;
      }
      if (peer.in.size() - peer.pos > limit) return Read::too_large;
      if (!read_more(peer)) return Read::closed;
    }
  }

  // Makes sure `n` unparsed bytes are buffered.
  bool fill(Peer& peer, std::size_t n) const {
    while (peer.in.size() - peer.pos < n)
      if (!read_more(peer)) return false;
    return true;
  }

  // Request line and headers. `closed` also covers a connection idle at end of stream.
  Read read_head(Peer& peer, Head& head) const {
    std::string line;
    std::size_t budget = max_head_bytes;
    // Empty lines before the request line are tolerated (RFC 9112 §2.2).
    do {
      const Read r = read_line(peer, line, budget);
      if (r != Read::ok) return r;
      budget -= std::min(budget, line.size() + 2);
      if (budget == 0) return Read::too_large;
    } while (line.empty());

    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp1 == 0 || sp2 == std::string::npos || sp2 == sp1 + 1) return Read::bad;
    Request& request = head.request;
    request.method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    request.version = std::string(http_detail::trim(std::string_view(line).substr(sp2 + 1)));
    if (request.version != "HTTP/1.1" && request.version != "HTTP/1.0") return Read::bad;
    if (target.find("://") != std::string::npos && target.front() != '/') {  // absolute-form
      const std::size_t slash = target.find('/', target.find("://") + 3);
      target = slash == std::string::npos ? "/" : target.substr(slash);
    }
    const std::size_t hash = target.find('#');
    if (hash != std::string::npos) target.resize(hash);
    const std::size_t question = target.find('?');
    request.path = target.substr(0, question);
    if (question != std::string::npos) request.query = target.substr(question + 1);

    for (;;) {
      const Read r = read_line(peer, line, budget);
      if (r != Read::ok) return r == Read::closed ? Read::bad : r;
      budget -= std::min(budget, line.size() + 2);
      if (budget == 0) return Read::too_large;
      if (line.empty()) break;
      if ((line[0] == ' ' || line[0] == '\t') && !request.headers.empty()) {  // obsolete line folding
        request.headers.back().second += ' ';
        request.headers.back().second += http_detail::trim(line);
        continue;
      }
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos || colon == 0) return Read::bad;
      const std::string_view name = http_detail::trim(std::string_view(line).substr(0, colon));
      if (name.size() != colon) return Read::bad;  // no whitespace before the colon
      request.headers.emplace_back(std::string(name), std::string(http_detail::trim(std::string_view(line).substr(colon + 1))));
    }
    const std::string connection = request.header("Connection");
    head.keep_alive = request.version == "HTTP/1.1" ? !http_detail::has_token(connection, "close")
                                                    : http_detail::has_token(connection, "keep-alive");
    return Read::ok;
  }

  Read read_chunked(Peer& peer, std::string& body) const {
    std::string line;
    for (;;) {
      const Read r = read_line(peer, line, 4096);
      if (r != Read::ok) return r == Read::too_large ? Read::bad : r;
      std::string_view size_text = http_detail::trim(std::string_view(line).substr(0, line.find(';')));
      if (size_text.empty() || size_text.size() > 15) return Read::bad;
      std::size_t size = 0;
      for (const char c : size_text) {
        const int d = http_detail::hex_digit(c);
        if (d < 0) return Read::bad;
        size = size * 16 + static_cast<std::size_t>(d);
      }
      if (size == 0) break;
      if (body.size() + size > max_body_bytes) return Read::too_large;
      if (!fill(peer, size + 2)) return Read::closed;
      body.append(peer.in, peer.pos, size);
      peer.pos += size;
      if (peer.in.compare(peer.pos, 2, "\r\n") == 0) {
        peer.pos += 2;
      } else if (peer.in[peer.pos] == '\n') {
        peer.pos += 1;
      } else {
        return Read::bad;
      }
      compact(peer);
    }
    // Trailer fields, ignored, up to the empty line.
    std::size_t budget = max_head_bytes;
    for (;;) {
      const Read r = read_line(peer, line, budget);
      if (r != Read::ok) return r == Read::too_large ? Read::bad : r;
      if (line.empty()) return Read::ok;
      budget -= std::min(budget, line.size() + 2);
      if (budget == 0) return Read::bad;
    }
  }

  // Drops the parsed prefix of the buffer once it is worth it.
  static void compact(Peer& peer) {
    if (peer.pos > (std::size_t{1} << 20) || peer.pos == peer.in.size()) {
      peer.in.erase(0, peer.pos);
      peer.pos = 0;
    }
  }

  static std::string head_of(int code, std::size_t content_length, bool with_length, bool close,
                             const std::vector<std::pair<std::string, std::string>>& headers) {
    std::string out = "HTTP/1.1 " + std::to_string(code) + " " + http_detail::reason_phrase(code) + "\r\n";
    bool has_length = false;
    for (const auto& h : headers) has_length = has_length || http_detail::iequals(h.first, "Content-Length");
    if (with_length && !has_length) out += "Content-Length: " + std::to_string(content_length) + "\r\n";
    for (const auto& h : headers) out += h.first + ": " + h.second + "\r\n";
    if (close) out += "Connection: close\r\n";
    out += "\r\n";
    return out;
  }

  bool send_reply(int fd, const Response& r, bool head_request, bool close) const {
    const bool bodyless = (r.code >= 100 && r.code < 200) || r.code == 204 || r.code == 304;
    std::string out = head_of(r.code, r.body.size(), !bodyless, close, r.headers);
    if (!bodyless && !head_request) out += r.body;
    return send_all(fd, out);
  }

  // Sends a protocol error, then closes.
  void fail(Peer& peer, int code) const {
    Response r = Response::status(code);
    send_reply(peer.fd, r, false, true);
    close_gracefully(peer);
  }

  // FIN first, then reads what the client still sends (briefly) so that closing does
  // not turn unread bytes into a reset that could hide the reply.
  void close_gracefully(Peer& peer) const noexcept {
    ::shutdown(peer.fd, SHUT_WR);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    char buffer[16 * 1024];
    for (;;) {
      const ssize_t n = ::recv(peer.fd, buffer, sizeof buffer, 0);
      if (n == 0) break;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      if (n < 0 && wait_fd(peer.fd, POLLIN, http_detail::poll_timeout(deadline)) <= 0) break;
      if (std::chrono::steady_clock::now() >= deadline) break;
    }
    close_fd(peer);
  }

  static void close_fd(Peer& peer) noexcept {
    if (peer.fd >= 0) ::close(peer.fd);
    peer.fd = -1;
  }

  void record(Request request) {
    request.received = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!keep_bodies_) std::string().swap(request.body);
      requests_.push_back(std::move(request));
    }
    recorded_.notify_all();
  }

  Response next_action() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (script_.empty()) return default_;
    Response r = std::move(script_.front());
    script_.pop_front();
    return r;
  }

  // Serves one connection until it closes, fails or stop() is called.
  void serve(int fd) noexcept {
    Peer peer;
    peer.fd = fd;
    try {
      serve_requests(peer);
    } catch (...) {
    }
    close_fd(peer);
  }

  void serve_requests(Peer& peer) {
    while (!stopping() && peer.fd >= 0) {
      Head head;
      const Read r = read_head(peer, head);
      if (r == Read::closed) return;
      if (r == Read::too_large) return fail(peer, 431);
      if (r == Read::bad) return fail(peer, 400);
      Request& request = head.request;

      // Body framing: chunked wins over Content-Length (RFC 9112 §6.3).
      const std::string transfer_encoding = request.header("Transfer-Encoding");
      const bool chunked = !transfer_encoding.empty();
      if (chunked && !http_detail::iequals(http_detail::trim(transfer_encoding.substr(transfer_encoding.rfind(',') + 1)),
                                           "chunked"))
        return fail(peer, 400);
      std::size_t length = 0;
      bool too_large = false;
      if (!chunked) {
        bool seen = false;
        for (const auto& h : request.headers) {
          if (!http_detail::iequals(h.first, "Content-Length")) continue;
          if (h.second.empty() || h.second.size() > 19 ||
              h.second.find_first_not_of("0123456789") != std::string::npos)
            return fail(peer, 400);
          const std::size_t value = std::stoull(h.second);
          if (seen && value != length) return fail(peer, 400);
          seen = true;
          length = value;
        }
        too_large = length > max_body_bytes;
      }
      if (too_large) {
        record(std::move(request));
        return fail(peer, 413);
      }

      // Expect: 100-continue: invite the body unless some of it is already here.
      const bool expects_body = chunked || length > 0;
      if (expects_body && request.version == "HTTP/1.1" &&
          http_detail::iequals(http_detail::trim(request.header("Expect")), "100-continue") &&
          peer.pos == peer.in.size()) {
        if (!send_all(peer.fd, "HTTP/1.1 100 Continue\r\n\r\n")) return;
      }

      if (chunked) {
        const Read b = read_chunked(peer, request.body);
        if (b == Read::closed) return;
        if (b == Read::bad) return fail(peer, 400);
        if (b == Read::too_large) {
          request.body.clear();
          record(std::move(request));
          return fail(peer, 413);
        }
      } else if (length > 0) {
        if (!fill(peer, length)) return;
        request.body.assign(peer.in, peer.pos, length);
        peer.pos += length;
      }
      compact(peer);

      const bool head_request = request.method == "HEAD";
      record(std::move(request));
      const Response action = next_action();
      if (!pause(action.delay_before)) return;
      switch (action.kind) {
        case Response::Kind::reply: {
          const bool close = !head.keep_alive || action.close_after;
          if (!send_reply(peer.fd, action, head_request, close)) return;
          if (close) return close_gracefully(peer);
          break;
        }
        case Response::Kind::reset: {
          const linger hard{1, 0};
          ::setsockopt(peer.fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
          return close_fd(peer);
        }
        case Response::Kind::hang: {
          // Until the client gives up or stop(); whatever it sends is ignored.
          peer.in.clear();
          peer.pos = 0;
          while (read_more(peer)) peer.in.clear();
          return;
        }
        case Response::Kind::close_without_reply:
          return close_gracefully(peer);
      }
    }
  }

  mutable std::mutex lifecycle_mutex_;  // start() and stop()
  bool running_ = false;
  std::atomic<int> port_{0};
  std::atomic<bool> stopping_{false};
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: readable once stop() has begun
  std::thread accept_thread_;
  std::list<Connection> connections_;  // accept thread only, until stop() joins it

  mutable std::mutex mutex_;  // requests_, script_, default_
  mutable std::condition_variable recorded_;
  std::vector<Request> requests_;
  bool keep_bodies_ = true;
  std::deque<Response> script_;
  Response default_;
};

}  // namespace spanprof_test

#endif  // SPANPROF_TESTS_SUPPORT_HTTP_SERVER_HPP_
