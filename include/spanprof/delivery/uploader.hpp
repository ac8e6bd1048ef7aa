// Where finished profiles go. An uploader is one hook:
//
//   class KafkaUploader final : public spanprof::Uploader {
//    public:
//     KafkaUploader() : Uploader("kafka") {}
//    protected:
//     spanprof::UploadResult do_send(const spanprof::EncodedProfile& profile, std::string_view payload,
//                                    const spanprof::UploadContext&) override {
//       return producer_.send(profile.record.span.trace_id.to_hex(), payload) ? spanprof::UploadResult::ok()
//                                                                           : spanprof::UploadResult::retryable("kafka down");
//     }
//   };
//
// and optionally do_flush() (push what you buffer). The base owns the rest: calls
// come from spanprof's delivery thread one at a time, retries, backoff and the
// spool are the sender's, failures go to the error channel, and an exception that
// escapes a hook becomes a permanent failure of that profile, never the host's.
//
// The payload is the gzip'd pprof. An uploader that sends another wire format
// (the OTLP uploader sends an ExportProfilesServiceRequest) also overrides
// do_encode(): its bytes are made once, and kept as they are in the spool during
// an outage, so a re-send never encodes again and do_send() sees the same bytes
// either way.
#ifndef SPANPROF_DELIVERY_UPLOADER_HPP_
#define SPANPROF_DELIVERY_UPLOADER_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>

SPANPROF_NAMESPACE_BEGIN

// What a payload holds: one span's profile, or (batched delivery) a window's,
// whose record's `span` is then invalid, `span_name` empty and `span_count` the
// number of spans; each sample carries its own span's labels. This is all the
// spool keeps beside the payload, so a re-send after a restart sees the same.
struct EncodedProfile {
  SpanRecord record;
  std::size_t sample_count = 0;
  std::size_t span_count = 1;  // spans merged into this profile
};

// What do_encode() makes its bytes from, valid only during the call.
struct EncodeInput {
  // The symbolized profile, to encode another format or relabel without decoding.
  // Null when only the bytes are at hand (a tool sending a file).
  const Profile* profile = nullptr;
  // The same profile as a gzip-compressed profile.proto, as `go tool pprof` reads
  // it: made once for all uploaders.
  std::string_view pprof_gzip;
};

// What do_send() may need beside the record and the payload, valid only during
// the call.
struct UploadContext {
  // The symbolized profile the payload was just encoded from, to log a summary
  // without decoding; null when the payload is sent again from the spool.
  const Profile* profile = nullptr;
  // Set while spanprof shuts down: an uploader in a slow call should give up (the
  // payload is then spooled, if a spool is configured). May be null.
  const std::atomic<bool>* cancelled = nullptr;

  bool cancel_requested() const noexcept { return cancelled != nullptr && cancelled->load(std::memory_order_relaxed); }
};

// What a send or a flush did: a Status (status.hpp), and for a failure whether
// trying again may help and how long the backend asked to wait.
class UploadResult : public Status {
 public:
  UploadResult() noexcept = default;  // ok

  static UploadResult ok() noexcept { return {}; }
  // The backend may take it later (a timeout, a 5xx, a 429): the sender retries
  // with backoff, then spools.
  static UploadResult retryable(std::string_view why,
                                std::chrono::milliseconds retry_after = std::chrono::milliseconds(-1)) noexcept {
    return UploadResult(true, why, retry_after);
  }
  // It never will (a 4xx, a payload refused): the profile is dropped and counted.
  static UploadResult permanent(std::string_view why) noexcept {
    return UploadResult(false, why, std::chrono::milliseconds(-1));
  }

  bool may_retry() const noexcept { return may_retry_; }
  // How long the backend asked to wait (Retry-After); -1 when it did not say.
  std::chrono::milliseconds retry_after() const noexcept { return retry_after_; }

 private:
  UploadResult(bool may_retry, std::string_view why, std::chrono::milliseconds retry_after) noexcept
      : Status(ErrorCode::upload_failed, why), may_retry_(may_retry), retry_after_(retry_after) {}

  bool may_retry_ = false;
  std::chrono::milliseconds retry_after_{-1};
};

class Uploader {
 public:
  // `delivery`: one profile per span, or the spans of a window merged
  // (delivery_policy.hpp).
  explicit Uploader(std::string name, Delivery delivery = Delivery::per_span()) noexcept
      : name_(std::move(name)), delivery_(delivery) {}
  virtual ~Uploader() = default;
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  std::string_view name() const noexcept { return name_; }
  Delivery delivery() const noexcept { return delivery_; }

  // The bytes this uploader sends for `profile` (do_encode()). A failure
  // (encoding_failed): this profile cannot be sent by this uploader, and never
  // will be.
  Status encode(const EncodedProfile& profile, const EncodeInput& input, std::string& payload) noexcept {
    SPANPROF_TRY {
      std::lock_guard<std::mutex> held(mutex_);
      return do_encode(profile, input, payload);
    } SPANPROF_CATCH_STD(e) {
      return detail::status_from_exception(ErrorCode::encoding_failed, "uploader threw while encoding: ", e.what());
    } SPANPROF_CATCH_ALL {
      return detail::status_from_exception(ErrorCode::encoding_failed, "uploader threw while encoding: ", "unknown exception");
    }
    return Status(ErrorCode::internal, "unreachable");  // -fno-exceptions: the try is an if (true)
  }

  // Sends a payload encode() made, now or after a restart (from the spool).
  UploadResult send(const EncodedProfile& profile, std::string_view payload,
                    const UploadContext& context = UploadContext()) noexcept {
    return guarded([&] { return do_send(profile, payload, context); });
  }

  // encode() then send(): for a profile in hand (tools, tests).
  UploadResult upload(const EncodedProfile& profile, const EncodeInput& input) noexcept {
    std::string payload;
    const Status encoded = encode(profile, input, payload);
    if (!encoded) return UploadResult::permanent(encoded.message());
    UploadContext context;
    context.profile = input.profile;
    return send(profile, payload, context);
  }

  // Pushes what the uploader buffers: spanprof::flush() and shutdown call it.
  UploadResult flush() noexcept {
    return guarded([&] { return do_flush(); });
  }

 protected:
  // The hook every uploader writes: deliver `payload` (the gzip'd pprof unless
  // do_encode() says otherwise) for `profile`.
  virtual UploadResult do_send(const EncodedProfile& profile, std::string_view payload,
                               const UploadContext& context) = 0;

  // Optional: push what this uploader buffers.
  virtual UploadResult do_flush() { return UploadResult::ok(); }

  // Optional, for a wire format other than pprof: the bytes do_send() gets.
  virtual Status do_encode(const EncodedProfile& profile, const EncodeInput& input, std::string& payload) {
    (void)profile;
    payload.assign(input.pprof_gzip.data(), input.pprof_gzip.size());
    return Status::ok();
  }

 private:
  template <class Call>
  UploadResult guarded(Call call) noexcept {
    SPANPROF_TRY {
      std::lock_guard<std::mutex> held(mutex_);
      return call();
    } SPANPROF_CATCH_STD(e) {
      return UploadResult::permanent(detail::status_from_exception(ErrorCode::upload_failed, "uploader threw: ", e.what()).message());
    } SPANPROF_CATCH_ALL {
      return UploadResult::permanent("uploader threw: unknown exception");
    }
    return UploadResult::permanent("unreachable");  // -fno-exceptions: the try is an if (true)
  }

  std::mutex mutex_;  // one call at a time, whichever thread makes it
  const std::string name_;
  const Delivery delivery_;
};

// An uploader from a lambda that takes the record and the gzip'd pprof (the same
// bytes whether sent now or again from the spool), and optionally the call's
// context. Per span unless told otherwise:
//   CallbackUploader([](const EncodedProfile& p, std::string_view pprof_gzip) { ... });
//   CallbackUploader([](const EncodedProfile& p, std::string_view pprof_gzip, const UploadContext& c) { ... },
//                    "name", spanprof::Delivery::batched())
class CallbackUploader final : public Uploader {
 public:
  using Callback = std::function<UploadResult(const EncodedProfile& profile, std::string_view pprof_gzip,
                                              const UploadContext& context)>;

  template <class Function,
            std::enable_if_t<std::is_invocable_r_v<UploadResult, Function&, const EncodedProfile&, std::string_view,
                                                   const UploadContext&>,
                             int> = 0>
  explicit CallbackUploader(Function callback, std::string name = "callback", Delivery delivery = Delivery::per_span())
      : Uploader(std::move(name), delivery), callback_(std::move(callback)) {}

  template <class Function,
            std::enable_if_t<std::is_invocable_r_v<UploadResult, Function&, const EncodedProfile&, std::string_view> &&
                                 !std::is_invocable_v<Function&, const EncodedProfile&, std::string_view,
                                                      const UploadContext&>,
                             int> = 0>
  explicit CallbackUploader(Function callback, std::string name = "callback", Delivery delivery = Delivery::per_span())
      : Uploader(std::move(name), delivery),
        callback_([callback = std::move(callback)](const EncodedProfile& profile, std::string_view pprof_gzip,
                                                   const UploadContext&) mutable {
          return callback(profile, pprof_gzip);
        }) {}

 protected:
  UploadResult do_send(const EncodedProfile& profile, std::string_view payload, const UploadContext& context) override {
    return callback_ ? callback_(profile, payload, context) : UploadResult::ok();
  }

 private:
  Callback callback_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_UPLOADER_HPP_
