// Where finished profiles go. An uploader is two hooks:
//
//   class KafkaUploader final : public spanprof::Uploader {
//    public:
//     KafkaUploader() : Uploader("kafka") {}
//    protected:
//     spanprof::UploadResult do_send(const spanprof::EncodedProfile& profile, const std::string& payload) override {
//       return producer_.send(profile.span.trace_id.to_hex(), payload) ? spanprof::UploadResult::ok()
//                                                                    : spanprof::UploadResult::retryable("kafka down");
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
// an outage, so a re-send never encodes again.
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

SPANPROF_NAMESPACE_BEGIN

// A finished profile, encoded and ready to send: one span's record, or (batched
// delivery) a window's, whose `span` is then invalid, `span_name` empty and
// `span_count` the number of spans; each sample carries its own span's labels.
struct EncodedProfile : SpanRecord {
  std::size_t sample_count = 0;
  std::size_t span_count = 1;  // spans merged into this profile
  // A gzip-compressed profile.proto, as `go tool pprof` reads it. Empty when a
  // payload another do_encode() made is sent again from the spool.
  std::string pprof_gzip;
  // The symbolized profile the bytes were encoded from; valid only during the
  // call (null when a spooled payload is sent again). Lets an uploader log a
  // summary or re-encode without decoding.
  const Profile* profile = nullptr;
  // Set while spanprof shuts down: an uploader in a slow call should give up (the
  // profile is then spooled, if a spool is configured). May be null.
  const std::atomic<bool>* cancelled = nullptr;
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
  Status encode(const EncodedProfile& profile, std::string& payload) noexcept {
    SPANPROF_TRY {
      std::lock_guard<std::mutex> lock(mutex_);
      return do_encode(profile, payload);
    } SPANPROF_CATCH_STD(e) {
      return detail::status_from_exception(ErrorCode::encoding_failed, "uploader threw while encoding: ", e.what());
    } SPANPROF_CATCH_ALL {
      return detail::status_from_exception(ErrorCode::encoding_failed, "uploader threw while encoding: ", "unknown exception");
    }
    return Status(ErrorCode::internal, "unreachable");  // -fno-exceptions: the try is an if (true)
  }

  // Sends a payload encode() made, now or after a restart (from the spool, when
  // only the record and counts of `profile` are known).
  UploadResult send(const EncodedProfile& profile, const std::string& payload) noexcept {
    return guarded([&] { return do_send(profile, payload); });
  }

  // encode() then send(): for a profile in hand (tools, tests).
  UploadResult upload(const EncodedProfile& profile) noexcept {
    std::string payload;
    const Status encoded = encode(profile, payload);
    if (!encoded) return UploadResult::permanent(encoded.message());
    return send(profile, payload);
  }

  // Pushes what the uploader buffers: spanprof::flush() and shutdown call it.
  UploadResult flush() noexcept {
    return guarded([&] { return do_flush(); });
  }

 protected:
  // The hook every uploader writes: deliver `payload` (the gzip'd pprof unless
  // do_encode() says otherwise) for `profile`.
  virtual UploadResult do_send(const EncodedProfile& profile, const std::string& payload) = 0;

  // Optional: push what this uploader buffers.
  virtual UploadResult do_flush() { return UploadResult::ok(); }

  // Optional, for a wire format other than pprof: the bytes do_send() gets.
  virtual Status do_encode(const EncodedProfile& profile, std::string& payload) {
    payload = profile.pprof_gzip;
    return Status::ok();
  }

 private:
  template <class Call>
  UploadResult guarded(Call call) noexcept {
    SPANPROF_TRY {
      std::lock_guard<std::mutex> lock(mutex_);
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

// An uploader from a lambda that takes the profile (its pprof in pprof_gzip).
// Per span unless told otherwise:
//   CallbackUploader(fn, "name", spanprof::Delivery::batched())
class CallbackUploader final : public Uploader {
 public:
  using Callback = std::function<UploadResult(const EncodedProfile&)>;
  explicit CallbackUploader(Callback callback, std::string name = "callback", Delivery delivery = Delivery::per_span())
      : Uploader(std::move(name), delivery), callback_(std::move(callback)) {}

 protected:
  UploadResult do_send(const EncodedProfile& profile, const std::string& payload) override {
    if (!callback_) return UploadResult::ok();
    if (!profile.pprof_gzip.empty() || payload.empty()) return callback_(profile);
    EncodedProfile resent = profile;  // from the spool: the payload is the pprof
    resent.pprof_gzip = payload;
    return callback_(resent);
  }

 private:
  Callback callback_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_UPLOADER_HPP_
