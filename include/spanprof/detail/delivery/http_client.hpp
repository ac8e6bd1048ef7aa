// The HTTP transport under the Pyroscope and OTLP uploaders: one POST at a time
// over libcurl, on spanprof's background thread. Every failure comes back as data
// in an HttpResponse — nothing is thrown — and classify() turns it into an
// UploadResult the worker knows how to retry.
//
// Why the curl multi interface for a blocking call: curl_easy_perform only lets a
// progress callback look at an abort flag about once a second while a server
// stays silent. Driving the transfer ourselves in short poll slices lets shutdown
// cut an upload short within tens of milliseconds, and costs nothing else.
#ifndef SPANPROF_DETAIL_DELIVERY_HTTP_CLIENT_HPP_
#define SPANPROF_DETAIL_DELIVERY_HTTP_CLIENT_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/delivery/http_options.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/detail/delivery/http_message.hpp>
#include <spanprof/detail/delivery/http_sockets.hpp>

// Only in builds with libcurl (SPANPROF_WITH_CURL=1, which the build systems set
// when they link it).
#if SPANPROF_WITH_CURL

#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// curl_global_init is not thread-safe before libcurl 7.84, and curl_easy_init
// calls it implicitly when nobody did: run it once, before any handle exists.
// Never paired with curl_global_cleanup — the host (or another library) may use
// libcurl too, and cleanup at exit races threads still running.
SPANPROF_API inline CURLcode http_curl_global_init() noexcept {
  static std::once_flag once;
  static CURLcode result = CURLE_FAILED_INIT;
  SPANPROF_TRY {
    std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  } SPANPROF_CATCH_ALL {
    return CURLE_FAILED_INIT;
  }
  return result;
}

struct HttpHeaderListDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using HttpHeaderList = std::unique_ptr<curl_slist, HttpHeaderListDeleter>;

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options) noexcept : options_(std::move(options)) {}
  ~HttpClient() { release_handles(); }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Blocking, on the caller's (background) thread; concurrent calls take turns.
  // `abort` (may be null) is checked every http_abort_poll_ms, so shutdown can cut
  // a transfer short: the result is then a transport_error with error "aborted".
  HttpResponse post(const HttpRequest& request, const std::atomic<bool>* abort = nullptr) noexcept {
    HttpResponse response;
    SPANPROF_TRY {
      std::lock_guard<std::mutex> held(mutex_);
      perform(request, abort, response);
    } SPANPROF_CATCH_STD(e) {
      fail(response, true, e.what());
    } SPANPROF_CATCH_ALL {
      fail(response, true, "unknown exception");
    }
    return response;
  }

  const HttpOptions& options() const noexcept { return options_; }

 private:
  // What the callbacks fill in while a transfer runs.
  struct Transfer {
    HttpResponse* response = nullptr;
  };

  // Keeps the easy handle attached to the multi handle for one transfer only, so
  // every exit path leaves it free for curl_easy_reset.
  struct Attachment {
    CURLM* multi;
    CURL* easy;
    ~Attachment() { curl_multi_remove_handle(multi, easy); }
  };

  static void fail(HttpResponse& response, bool transport, std::string_view message) noexcept {
    response.transport_error = transport;
    http_set_text(response.error, message);
  }

  // libcurl before 8.17 opens its sockets without close-on-exec: a host that
  // forks and execs would hand spanprof's connections to the new program (and
  // keep them open there). Opened here with SOCK_CLOEXEC, which leaves no window
  // for a concurrent fork.
  static curl_socket_t open_socket(void*, curlsocktype, curl_sockaddr* address) noexcept {
    const int fd = ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    if (fd >= 0) http_socket_registry().add(fd);
    return fd;
  }
  static int close_socket(void*, curl_socket_t fd) noexcept {
    http_socket_registry().remove(fd);
    return ::close(fd);
  }

  // Easy handle first: it is never left attached, and the multi handle owns the
  // connection cache that its cleanup closes. In a forked child the handles are
  // the parent's (their sockets closed by the fork handler, their numbers maybe
  // reused since): they are dropped without a cleanup that would touch them.
  void release_handles() noexcept {
    const bool ours = handles_pid_ == ::getpid();
    for (const int fd : wakeup_fds_) http_socket_registry().remove(fd);
    wakeup_fds_.clear();
    if (ours && easy_ != nullptr) curl_easy_cleanup(easy_);
    if (ours && multi_ != nullptr) curl_multi_cleanup(multi_);
    easy_ = nullptr;
    multi_ = nullptr;
  }

  static std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) noexcept {
    const std::size_t n = size * count;
    auto& body = static_cast<Transfer*>(user)->response->body;
    SPANPROF_TRY {
      if (body.size() < http_response_body_limit)
        body.append(data, std::min(n, http_response_body_limit - body.size()));
    } SPANPROF_CATCH_ALL {
    }
    // The rest is read and dropped rather than refused: refusing would fail the
    // transfer and close a connection that is fine to reuse.
    return n;
  }

  static std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) noexcept {
    const std::size_t n = size * count;
    http_read_header_line(std::string_view(data, n), std::time(nullptr), *static_cast<Transfer*>(user)->response);
    return n;
  }

  // Every header once, with its last value: built-ins, then HttpOptions::headers,
  // then the request's. No list, and `invalid` set, when a header must not be sent.
  HttpHeaderList build_headers(const HttpRequest& request, std::string& invalid) const {
    struct Field {
      std::string_view name;
      std::string value;
    };
    std::vector<Field> fields;
    const auto set = [&fields](std::string_view name, std::string value) {
      for (auto& field : fields) {
        if (equals_ignoring_ascii_case(field.name, name)) {
          field.value = std::move(value);
          return;
        }
      }
      fields.push_back({name, std::move(value)});
    };
    if (!request.content_type.empty()) set("Content-Type", request.content_type);
    if (!request.content_encoding.empty()) set("Content-Encoding", request.content_encoding);
    if (!options_.bearer_token.empty()) {
      set("Authorization", "Bearer " + options_.bearer_token);
    } else if (!options_.basic_auth_user.empty()) {
      std::string value = "Basic ";
      http_append_base64(options_.basic_auth_user + ':' + options_.basic_auth_password, value);
      set("Authorization", std::move(value));
    }
    for (const auto* list : {&options_.headers, &request.headers})
      for (const auto& header : *list) set(header.first, header.second);

    HttpHeaderList headers;
    const auto append = [&headers](const std::string& line) {
      curl_slist* head = curl_slist_append(headers.get(), line.c_str());
      if (head == nullptr) SPANPROF_THROW(std::bad_alloc());
      (void)headers.release();  // the same list, now one longer (or new when it was empty)
      headers.reset(head);
    };
    bool has_expect = false, has_content_type = false;
    for (const auto& field : fields) {
      if (!http_header_name_valid(field.name) || !http_header_value_valid(field.value)) {
        invalid = "invalid HTTP header \"" + std::string(field.name.substr(0, 64)) + '"';
        return nullptr;
      }
      has_expect = has_expect || equals_ignoring_ascii_case(field.name, "Expect");
      has_content_type = has_content_type || equals_ignoring_ascii_case(field.name, "Content-Type");
      // "Name:" with nothing after it tells libcurl to drop the header; "Name;" sends it empty.
      append(std::string(field.name) + (field.value.empty() ? ";" : ": " + field.value));
    }
    // libcurl asks larger bodies to wait for "100 Continue": one more round trip
    // on every upload, for servers that would refuse a body we send anyway.
    if (!has_expect) append("Expect:");
    // Otherwise libcurl labels a POST body application/x-www-form-urlencoded.
    if (!has_content_type) append("Content-Type:");
    return headers;
  }

  // Every option, every time: curl_easy_reset keeps the connection and DNS caches
  // but no option of the previous request (its body and header list are gone).
  CURLcode configure(const HttpRequest& request, curl_slist* headers, Transfer& transfer, const char*& failed) {
    CURLcode rc = CURLE_OK;
    const auto check = [&rc, &failed](CURLcode code, const char* option) {
      if (rc == CURLE_OK && code != CURLE_OK) {
        rc = code;
        failed = option;
      }
    };
    const auto millis = [](std::chrono::milliseconds d) {
      return static_cast<long>(std::clamp<std::int64_t>(d.count(), 0, LONG_MAX));
    };
    check(curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, error_buffer_), "CURLOPT_ERRORBUFFER");
    check(curl_easy_setopt(easy_, CURLOPT_URL, request.url.c_str()), "CURLOPT_URL");
    // An endpoint from configuration must not turn into file:// or something stranger.
#if LIBCURL_VERSION_NUM >= 0x075500
    check(curl_easy_setopt(easy_, CURLOPT_PROTOCOLS_STR, "http,https"), "CURLOPT_PROTOCOLS_STR");
#else
    check(curl_easy_setopt(easy_, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS)),
          "CURLOPT_PROTOCOLS");
#endif
    // Signals are not for libcurl to take in a multi-threaded host (its DNS
    // timeout would use SIGALRM); the threaded resolver needs none.
    check(curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L), "CURLOPT_NOSIGNAL");
    using OpenSocket = curl_socket_t (*)(void*, curlsocktype, curl_sockaddr*);
    using CloseSocket = int (*)(void*, curl_socket_t);
    check(curl_easy_setopt(easy_, CURLOPT_OPENSOCKETFUNCTION, static_cast<OpenSocket>(&open_socket)),
          "CURLOPT_OPENSOCKETFUNCTION");
    check(curl_easy_setopt(easy_, CURLOPT_CLOSESOCKETFUNCTION, static_cast<CloseSocket>(&close_socket)),
          "CURLOPT_CLOSESOCKETFUNCTION");
    check(curl_easy_setopt(easy_, CURLOPT_POST, 1L), "CURLOPT_POST");
    check(curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size())),
          "CURLOPT_POSTFIELDSIZE_LARGE");
    // Borrowed, not copied: profiles can be megabytes, and `request` outlives the transfer.
    check(curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, request.body.data()), "CURLOPT_POSTFIELDS");
    check(curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers), "CURLOPT_HTTPHEADER");
    check(curl_easy_setopt(easy_, CURLOPT_USERAGENT, "spanprof/" SPANPROF_VERSION_STRING), "CURLOPT_USERAGENT");
    check(curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS, millis(options_.connect_timeout)),
          "CURLOPT_CONNECTTIMEOUT_MS");
    check(curl_easy_setopt(easy_, CURLOPT_TIMEOUT_MS, millis(options_.timeout)), "CURLOPT_TIMEOUT_MS");
    using Callback = std::size_t (*)(char*, std::size_t, std::size_t, void*);
    check(curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, static_cast<Callback>(&on_body)), "CURLOPT_WRITEFUNCTION");
    check(curl_easy_setopt(easy_, CURLOPT_WRITEDATA, &transfer), "CURLOPT_WRITEDATA");
    check(curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, static_cast<Callback>(&on_header)),
          "CURLOPT_HEADERFUNCTION");
    check(curl_easy_setopt(easy_, CURLOPT_HEADERDATA, &transfer), "CURLOPT_HEADERDATA");
    check(curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L), "CURLOPT_SSL_VERIFYPEER");
    check(curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L), "CURLOPT_SSL_VERIFYHOST");
    if (!options_.ca_file.empty())
      check(curl_easy_setopt(easy_, CURLOPT_CAINFO, options_.ca_file.c_str()), "CURLOPT_CAINFO");
    if (!options_.client_cert_file.empty())
      check(curl_easy_setopt(easy_, CURLOPT_SSLCERT, options_.client_cert_file.c_str()), "CURLOPT_SSLCERT");
    if (!options_.client_key_file.empty())
      check(curl_easy_setopt(easy_, CURLOPT_SSLKEY, options_.client_key_file.c_str()), "CURLOPT_SSLKEY");
    if (!options_.proxy.empty())
      check(curl_easy_setopt(easy_, CURLOPT_PROXY, options_.proxy.c_str()), "CURLOPT_PROXY");
    if (!options_.no_proxy.empty())
      check(curl_easy_setopt(easy_, CURLOPT_NOPROXY, options_.no_proxy.c_str()), "CURLOPT_NOPROXY");
    return rc;
  }

  // Failures of the request itself rather than of the network: the same request
  // would fail the same way forever.
  static bool is_request_error(CURLcode code) noexcept {
    switch (code) {
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
      case CURLE_NOT_BUILT_IN:
      case CURLE_BAD_FUNCTION_ARGUMENT:
      case CURLE_UNKNOWN_OPTION:
        return true;
      default:
        return false;
    }
  }

  // curl's own detail when it has some, under its generic text unless the detail
  // already says it.
  std::string curl_error(CURLcode code) const {
    const std::string_view generic = curl_easy_strerror(code);
    const std::string_view detail(error_buffer_, ::strnlen(error_buffer_, sizeof error_buffer_));
    const std::string_view trimmed = trim_ascii_space(detail);
    if (trimmed.empty()) return std::string(generic);
    if (trimmed.find(generic) != std::string_view::npos) return std::string(trimmed);
    return std::string(generic) + ": " + std::string(trimmed);
  }

  // Drives one transfer in short slices. True when it ran to an end (`result`
  // says how); false when aborted or when the multi interface itself failed.
  bool run(const std::atomic<bool>* abort, CURLcode& result, std::string& failure) {
    CURLMcode mc = curl_multi_add_handle(multi_, easy_);
    if (mc != CURLM_OK) {
      failure = std::string("curl_multi_add_handle: ") + curl_multi_strerror(mc);
      return false;
    }
    const Attachment attachment{multi_, easy_};
    for (;;) {
      int running = 0;
      mc = curl_multi_perform(multi_, &running);
      if (mc != CURLM_OK) {
        failure = std::string("curl_multi_perform: ") + curl_multi_strerror(mc);
        return false;
      }
      int queued = 0;
      while (const CURLMsg* message = curl_multi_info_read(multi_, &queued)) {
        if (message->msg == CURLMSG_DONE && message->easy_handle == easy_) {
          result = message->data.result;
          return true;
        }
      }
      if (running == 0) {
        failure = "the transfer ended without a result";
        return false;
      }
      if (abort != nullptr && abort->load(std::memory_order_acquire)) {
        // Removing the unfinished transfer makes libcurl close its connection.
        failure = "aborted";
        return false;
      }
#if LIBCURL_VERSION_NUM >= 0x074200
      mc = curl_multi_poll(multi_, nullptr, 0, http_abort_poll_ms, nullptr);
#else
      // curl_multi_wait returns at once when libcurl has no socket to offer yet.
      int ready = 0;
      mc = curl_multi_wait(multi_, nullptr, 0, http_abort_poll_ms, &ready);
      if (mc == CURLM_OK && ready == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
#endif
      if (mc != CURLM_OK) {
        failure = std::string("curl_multi_poll: ") + curl_multi_strerror(mc);
        return false;
      }
    }
  }

  void perform(const HttpRequest& request, const std::atomic<bool>* abort, HttpResponse& response) {
    if (abort != nullptr && abort->load(std::memory_order_acquire)) return fail(response, true, "aborted");
    const CURLcode init = http_curl_global_init();
    if (init != CURLE_OK) return fail(response, true, std::string("curl_global_init: ") + curl_easy_strerror(init));
    // Created on first use (on the worker thread) and kept: the multi handle holds
    // the connection cache that keep-alive reuses. A failed creation is retried
    // by the next post.
    if ((easy_ != nullptr || multi_ != nullptr) && handles_pid_ != ::getpid()) release_handles();
    handles_pid_ = ::getpid();
    if (easy_ == nullptr) easy_ = curl_easy_init();
    if (multi_ == nullptr) {
      const std::vector<int> before = http_open_descriptors();
      multi_ = curl_multi_init();
      if (multi_ != nullptr) {
        wakeup_fds_ = http_close_new_sockets_on_exec(before);
        for (const int fd : wakeup_fds_) http_socket_registry().add(fd);
      }
    }
    if (easy_ == nullptr || multi_ == nullptr) return fail(response, true, "cannot create a libcurl handle");

    std::string invalid;
    const HttpHeaderList headers = build_headers(request, invalid);
    if (!invalid.empty()) return fail(response, false, invalid);

    curl_easy_reset(easy_);
    error_buffer_[0] = '\0';
    Transfer transfer{&response};
    const char* failed_option = "";
    const CURLcode configured = configure(request, headers.get(), transfer, failed_option);
    if (configured != CURLE_OK) {
      return fail(response, configured == CURLE_OUT_OF_MEMORY,
                  std::string(failed_option) + ": " + curl_easy_strerror(configured));
    }

    CURLcode result = CURLE_OK;
    std::string failure;
    const bool finished = run(abort, result, failure);
    // Neither the borrowed body nor the header list may outlive this call.
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, static_cast<const char*>(nullptr));
    curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(nullptr));
    if (!finished) return fail(response, true, failure);

    long status = 0;
    if (curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK) response.status = status;
    if (result != CURLE_OK) return fail(response, !is_request_error(result), curl_error(result));
    long connects = 0;
    response.reused_connection =
        curl_easy_getinfo(easy_, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects == 0;
    if (response.status < 200 || response.status > 299) {
      std::string message = "HTTP " + std::to_string(response.status);
      if (!response.body.empty()) {
        message += ": ";
        http_append_excerpt(response.body, message);
      }
      response.error = std::move(message);
    }
  }

  const HttpOptions options_;
  std::mutex mutex_;  // one transfer at a time on the handles below
  CURL* easy_ = nullptr;
  CURLM* multi_ = nullptr;
  pid_t handles_pid_ = 0;        // the process the handles were made in
  std::vector<int> wakeup_fds_;  // the multi handle's socketpair, in the registry
  char error_buffer_[CURL_ERROR_SIZE] = {};
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_CURL

#endif  // SPANPROF_DETAIL_DELIVERY_HTTP_CLIENT_HPP_
