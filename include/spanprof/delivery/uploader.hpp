// Where finished profiles go. Uploaders run on the background worker, never on a
// request thread, so they may block on I/O; they must not throw (the base class
// contains anything that escapes and reports it as a failure).
//
// Writing your own: derive from BasicUploader<std::mutex> and implement upload_()
// — the base takes the lock, so an uploader never handles concurrency itself — or
// wrap a lambda in CallbackUploader.
//
// Two phases, so an outage costs no re-encoding: encode_payload() turns a profile
// into the bytes the uploader sends (by default the gzip'd pprof), and
// upload_payload() sends them, now or later from the spool, with the profile's
// metadata only. An uploader that sends something else (the OTLP uploader sends an
// ExportProfilesServiceRequest) overrides both; one that sends pprof needs neither.
#ifndef SPANPROF_DELIVERY_UPLOADER_HPP_
#define SPANPROF_DELIVERY_UPLOADER_HPP_

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

// A finished profile, encoded and ready to send: one span's, or (batched delivery)
// the merged spans of a window, whose `span` is then invalid, `span_name` empty and
// `span_count` the number of spans; each sample carries its own span's labels.
struct EncodedProfile {
  ProfileKind kind = ProfileKind::cpu;
  SpanContext span;
  std::string span_name;
  std::int64_t start_unix_ns = 0;
  std::int64_t duration_ns = 0;
  std::int64_t period_ns = 0;            // CPU: CPU time one sample stands for
  std::int64_t heap_interval_bytes = 0;  // heap: mean bytes between samples (0: every allocation)
  std::size_t sample_count = 0;
  std::size_t span_count = 1;            // spans merged into this profile
  std::string engine;
  ProfileReason reason = ProfileReason::sampled;  // also the `profile_reason` label of every sample
  std::string pprof_gzip;  // a gzip-compressed profile.proto, as `go tool pprof` reads it
  // The symbolized profile the bytes were encoded from; valid only during upload()
  // and encode_payload() (null when a spooled payload is sent again).
  // Lets an uploader log a summary or re-encode without decoding.
  const Profile* profile = nullptr;
  // Set while spanprof shuts down: an uploader in a slow call should give up (the
  // profile is then spooled, if a spool is configured). May be null.
  const std::atomic<bool>* cancelled = nullptr;
};

struct UploadResult {
  enum class Status : std::uint8_t { ok, retryable_failure, permanent_failure };
  Status status = Status::ok;
  std::string message;
  std::chrono::milliseconds retry_after{-1};  // the backend asked to wait this long (-1: it did not say)

  static UploadResult ok() { return {}; }
  static UploadResult retryable(std::string why) { return {Status::retryable_failure, std::move(why)}; }
  static UploadResult permanent(std::string why) { return {Status::permanent_failure, std::move(why)}; }
  bool succeeded() const noexcept { return status == Status::ok; }
};

class Uploader {
 public:
  virtual ~Uploader() = default;
  virtual std::string_view name() const noexcept = 0;
  // One call that encodes and sends: encode_payload() then upload_payload().
  virtual UploadResult upload(const EncodedProfile& profile) noexcept = 0;
  // The bytes this uploader sends for `profile`, into `payload` (by default the
  // gzip'd pprof). False (with `error`): this profile cannot be sent by this
  // uploader, and never will be.
  virtual bool encode_payload(const EncodedProfile& profile, std::string& payload, std::string& error) noexcept {
    SPANPROF_TRY {
      payload = profile.pprof_gzip;
      return true;
    } SPANPROF_CATCH_ALL {
      error = "out of memory copying a payload";
      return false;
    }
  }
  // Sends a payload encode_payload() made, now or after a restart (from the spool).
  // Only the metadata of `profile` is set: pprof_gzip is empty, and `profile` points
  // at the model the first time (null when a spooled payload is sent again).
  // By default: upload() with the payload as the pprof.
  virtual UploadResult upload_payload(const EncodedProfile& profile, const std::string& payload) noexcept {
    SPANPROF_TRY {
      EncodedProfile copy = profile;
      copy.pprof_gzip = payload;
      return upload(copy);
    } SPANPROF_CATCH_ALL {
      return UploadResult{UploadResult::Status::retryable_failure, {}};
    }
  }
  // One profile per span, or the spans of a window merged (delivery_policy.hpp).
  virtual Delivery delivery() const noexcept { return Delivery::per_span(); }
};

// No-op lock for uploaders that are known to be used from one thread only.
struct NullMutex {
  void lock() noexcept {}
  void unlock() noexcept {}
};

// Takes the lock around each call and turns an escaping exception into a
// permanent failure. Implement upload_(); override encode_payload_() and
// upload_payload_() too when what is sent is not the profile's pprof.
template <class Mutex>
class BasicUploader : public Uploader {
 public:
  UploadResult upload(const EncodedProfile& profile) noexcept final {
    return guarded([&] { return upload_(profile); });
  }

  bool encode_payload(const EncodedProfile& profile, std::string& payload, std::string& error) noexcept final {
    SPANPROF_TRY {
      std::lock_guard<Mutex> lock(mutex_);
      return encode_payload_(profile, payload, error);
    } SPANPROF_CATCH_STD(e) {
      error = std::string("uploader threw: ") + e.what();
    } SPANPROF_CATCH_ALL {
      error = "uploader threw";
    }
    return false;
  }

  UploadResult upload_payload(const EncodedProfile& profile, const std::string& payload) noexcept final {
    return guarded([&] { return upload_payload_(profile, payload); });
  }

 protected:
  virtual UploadResult upload_(const EncodedProfile& profile) = 0;

  // The default payload is the gzip'd pprof, sent by upload_().
  virtual bool encode_payload_(const EncodedProfile& profile, std::string& payload, std::string&) {
    payload = profile.pprof_gzip;
    return true;
  }
  virtual UploadResult upload_payload_(const EncodedProfile& profile, const std::string& payload) {
    EncodedProfile copy = profile;
    copy.pprof_gzip = payload;
    return upload_(copy);
  }

 private:
  template <class Call>
  UploadResult guarded(Call call) noexcept {
    SPANPROF_TRY {
      std::lock_guard<Mutex> lock(mutex_);
      return call();
    } SPANPROF_CATCH_STD(e) {
      return failed_with(e.what());
    } SPANPROF_CATCH_ALL {
      return failed_with("unknown exception");
    }
  }

  static UploadResult failed_with(const char* what) noexcept {
    SPANPROF_TRY {
      return UploadResult::permanent(std::string("uploader threw: ") + what);
    } SPANPROF_CATCH_ALL {
      return UploadResult{UploadResult::Status::permanent_failure, {}};
    }
  }
  Mutex mutex_;
};

// An uploader from a lambda. Per span unless told otherwise:
//   CallbackUploader(fn, "name", spanprof::Delivery::batched())
class CallbackUploader final : public BasicUploader<std::mutex> {
 public:
  using Callback = std::function<UploadResult(const EncodedProfile&)>;
  explicit CallbackUploader(Callback callback, std::string name = "callback", Delivery delivery = Delivery::per_span())
      : callback_(std::move(callback)), name_(std::move(name)), delivery_(delivery) {}
  std::string_view name() const noexcept override { return name_; }
  Delivery delivery() const noexcept override { return delivery_; }

 protected:
  UploadResult upload_(const EncodedProfile& profile) override {
    return callback_ ? callback_(profile) : UploadResult::ok();
  }

 private:
  Callback callback_;
  std::string name_;
  Delivery delivery_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_UPLOADER_HPP_
