// Where finished profiles go. Uploaders run on the background worker, never on a
// request thread, so they may block on I/O; they must not throw (the base class
// contains anything that escapes and reports it as a failure).
//
// Writing your own: derive from BasicUploader<std::mutex> and implement upload_()
// — the base takes the lock, so an uploader never handles concurrency itself — or
// wrap a lambda in CallbackUploader.
#ifndef SPANPROF_DELIVERY_UPLOADER_HPP_
#define SPANPROF_DELIVERY_UPLOADER_HPP_

#include <spanprof/config.hpp>
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

// A finished profile, encoded and ready to send.
struct EncodedProfile {
  ProfileKind kind = ProfileKind::cpu;
  SpanContext span;
  std::string span_name;
  std::int64_t start_unix_ns = 0;
  std::int64_t duration_ns = 0;
  std::int64_t period_ns = 0;            // CPU: CPU time one sample stands for
  std::int64_t heap_interval_bytes = 0;  // heap: mean bytes between samples (0: every allocation)
  std::size_t sample_count = 0;
  std::string engine;
  ProfileReason reason = ProfileReason::sampled;  // also the `profile_reason` label of every sample
  std::string pprof_gzip;  // a gzip-compressed profile.proto, as `go tool pprof` reads it
  // The symbolized profile the bytes were encoded from; valid only during upload().
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
  virtual UploadResult upload(const EncodedProfile& profile) noexcept = 0;
  virtual std::string_view name() const noexcept = 0;
};

// No-op lock for uploaders that are known to be used from one thread only.
struct NullMutex {
  void lock() noexcept {}
  void unlock() noexcept {}
};

template <class Mutex>
class BasicUploader : public Uploader {
 public:
  UploadResult upload(const EncodedProfile& profile) noexcept final {
    try {
      std::lock_guard<Mutex> lock(mutex_);
      return upload_(profile);
    } catch (const std::exception& e) {
      return failed_with(e.what());
    } catch (...) {
      return failed_with("unknown exception");
    }
  }

 protected:
  virtual UploadResult upload_(const EncodedProfile& profile) = 0;

 private:
  static UploadResult failed_with(const char* what) noexcept {
    try {
      return UploadResult::permanent(std::string("uploader threw: ") + what);
    } catch (...) {
      return UploadResult{UploadResult::Status::permanent_failure, {}};
    }
  }
  Mutex mutex_;
};

class CallbackUploader final : public BasicUploader<std::mutex> {
 public:
  using Callback = std::function<UploadResult(const EncodedProfile&)>;
  explicit CallbackUploader(Callback callback, std::string name = "callback")
      : callback_(std::move(callback)), name_(std::move(name)) {}
  std::string_view name() const noexcept override { return name_; }

 protected:
  UploadResult upload_(const EncodedProfile& profile) override {
    return callback_ ? callback_(profile) : UploadResult::ok();
  }

 private:
  Callback callback_;
  std::string name_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_UPLOADER_HPP_
