// The background half of the pipeline: a bounded queue fed by request threads and
// one thread that symbolizes, encodes and uploads. Request threads never wait for
// it: when the queue is full a profile is dropped (the newest, or the oldest, as
// configured) and counted.
//
// Delivery (docs/delivery.md): a retryable failure is retried with exponential
// backoff and jitter (honouring Retry-After); when the attempts run out the
// uploader is marked down until its backoff expires, so one dead backend does not
// stall the queue, and the profile goes to the spool directory if one is
// configured, to be re-sent oldest first once the backend answers again (also
// after a restart). Permanent failures are never retried.
#ifndef SPANPROF_DELIVERY_WORKER_HPP_
#define SPANPROF_DELIVERY_WORKER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/capture/captured_profile.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/delivery/spool.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/profile/profile_builder.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What the worker has counted that is a level, not an event (events go to the
// counter registry).
struct WorkerGauges {
  std::atomic<std::uint64_t> spool_pending{0};  // spooled, not yet delivered
};

class Worker {
 public:
  struct Config {
    std::size_t capacity = 256;
    OverflowPolicy overflow = OverflowPolicy::drop_newest;
    RetryPolicy retry;
    std::string spool_directory;  // empty: no spool
    std::uint64_t spool_max_bytes = 256u << 20;
    std::vector<std::shared_ptr<Uploader>> uploaders;
    std::shared_ptr<Symbolizer> symbolizer;
    std::vector<std::string> comments;  // written into every profile
  };

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { stop(std::chrono::milliseconds(2000)); }

  bool start(Config config) noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    if (running_) return true;
    config_ = std::move(config);
    stopping_ = false;
    try {
      shared_ = std::make_shared<Shared>();
      thread_ = std::thread([this, shared = shared_] { run(shared); });
    } catch (...) {
      report_error(ErrorCode::internal, "cannot start the spanprof worker thread");
      return false;
    }
    running_ = true;
    return true;
  }

  // Called from request threads; O(1) under a lock the worker holds only to pop.
  bool submit(std::unique_ptr<CapturedProfile> pending) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (running_ && !stopping_ && queue_.size() >= config_.capacity &&
          config_.overflow == OverflowPolicy::drop_oldest && !queue_.empty()) {
        // The newest profile is the one most likely still being looked for.
        discard(*queue_.front());
        queue_.pop_front();
        count(Counter::profiles_dropped);
      }
      if (running_ && !stopping_ && queue_.size() < config_.capacity) {
        try {
          queue_.push_back(std::move(pending));
          count(Counter::profiles_enqueued);
        } catch (...) {
          pending.reset();
        }
        if (!pending) {
          wake_.notify_one();
          return true;
        }
      }
    }
    count(Counter::profiles_dropped);
    if (pending) discard(*pending);
    report_error(ErrorCode::queue_full, "a finished profile was dropped: the hand-off queue is full or stopped");
    return false;
  }

  static void discard(CapturedProfile& pending) noexcept { discard_captured_profile(pending); }

  // Waits until every profile handed over so far is processed, or the deadline.
  bool flush(std::chrono::milliseconds timeout) noexcept {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_.wait_until(lock, deadline, [this] { return !running_ || (queue_.empty() && in_flight_ == 0); });
  }

  // Drains what it can before the deadline, then stops. A worker stuck in an
  // upload past the deadline is left behind (detached) rather than waited for.
  bool stop(std::chrono::milliseconds timeout) noexcept {
    const bool drained = flush(timeout);
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!running_) return drained;
      stopping_ = true;
      running_ = false;
      shared_->stop = true;
      for (auto& pending : queue_)
        if (pending) discard(*pending);
      count(Counter::profiles_dropped, queue_.size());
      queue_.clear();
      thread = std::move(thread_);
    }
    wake_.notify_all();
    sleep_.notify_all();
    if (thread.joinable()) {
      if (drained) thread.join();
      else thread.detach();
    }
    return drained;
  }

  std::uint64_t spool_pending() const noexcept { return gauges_.spool_pending.load(std::memory_order_relaxed); }

  std::size_t queue_length() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }

 private:
  struct Shared {
    std::atomic<bool> stop{false};
  };

  using Clock = std::chrono::steady_clock;

  // One uploader's delivery state, owned by the worker thread.
  struct Destination {
    std::shared_ptr<Uploader> uploader;
    std::string name;
    int failures = 0;               // consecutive retryable failures
    bool down = false;              // gave up on the last profile; probe after retry_at
    Clock::time_point retry_at{};
    std::uint64_t spooled = 0;      // waiting in the spool for this uploader
  };

  // Everything one run of the worker thread owns.
  struct Session {
    Config config;
    std::shared_ptr<Shared> shared;
    std::unique_ptr<ProfileBuilder> builder;
    std::vector<Destination> destinations;
    std::unique_ptr<Spool> spool;
    std::minstd_rand random{std::random_device{}()};
  };

  void run(std::shared_ptr<Shared> shared) noexcept {
    Session session;
    session.shared = std::move(shared);
    try {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        session.config = config_;
      }
      if (session.config.symbolizer) session.builder = std::make_unique<ProfileBuilder>(*session.config.symbolizer);
      for (const auto& uploader : session.config.uploaders)
        if (uploader) session.destinations.push_back(Destination{uploader, std::string(uploader->name())});
      open_spool(session);
    } catch (...) {
      report_error(ErrorCode::internal, "out of memory starting the spanprof worker");
    }
    for (;;) {
      std::unique_ptr<CapturedProfile> pending;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        const Clock::time_point due = next_spool_attempt(session);
        wake_.wait_until(lock, due, [&] { return session.shared->stop.load() || !queue_.empty(); });
        if (session.shared->stop.load()) return;
        if (!queue_.empty()) {
          pending = std::move(queue_.front());
          queue_.pop_front();
          ++in_flight_;
        }
      }
      if (pending) {
        process(*pending, session);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          --in_flight_;
        }
        idle_.notify_all();
      } else {
        resend_spooled(session);
      }
    }
  }

  void open_spool(Session& session) {
    if (session.config.spool_directory.empty()) return;
    auto spool = std::make_unique<Spool>(session.config.spool_directory, session.config.spool_max_bytes);
    std::string error;
    // After spanprof::start() with new options, the previous worker may still hold
    // the spool's lock for a moment while it winds down.
    bool opened = spool->open(error);
    for (int wait = 0; !opened && wait < 20 && !session.shared->stop.load(); ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      opened = spool->open(error);
    }
    if (!opened) {
      report_error(ErrorCode::upload_failed, "spool directory unusable, undeliverable profiles will be lost: " + error);
      return;
    }
    std::uint64_t total = 0;
    for (Destination& d : session.destinations) {
      d.spooled = spool->pending(d.name).size();
      total += d.spooled;
    }
    gauges_.spool_pending.store(total, std::memory_order_relaxed);
    session.spool = std::move(spool);
  }

  // When the worker should next try to re-send a spooled profile (max: nothing to do).
  Clock::time_point next_spool_attempt(const Session& session) const noexcept {
    Clock::time_point due = Clock::time_point::max();
    if (!session.spool) return due;
    for (const Destination& d : session.destinations)
      if (d.spooled != 0) due = std::min(due, d.down ? d.retry_at : Clock::now());
    return due;
  }

  std::chrono::milliseconds backoff(Session& session, int failures, std::chrono::milliseconds retry_after) {
    const RetryPolicy& retry = session.config.retry;
    double delay = static_cast<double>(retry.initial_backoff.count());
    for (int i = 1; i < failures && delay < static_cast<double>(retry.max_backoff.count()); ++i) delay *= 2;
    // Jitter spreads the retries of many processes that lost the same backend.
    std::uniform_real_distribution<double> spread(1.0 - retry.jitter, 1.0 + retry.jitter);
    delay = std::min(delay * spread(session.random), static_cast<double>(retry.max_backoff.count()));
    if (retry_after.count() > 0) delay = std::max(delay, static_cast<double>(std::min(retry_after, retry.max_backoff).count()));
    return std::chrono::milliseconds(static_cast<std::int64_t>(delay));
  }

  // Sleeps unless spanprof is shutting down; false if woken by the shutdown.
  bool pause(Session& session, std::chrono::milliseconds delay) {
    std::unique_lock<std::mutex> lock(mutex_);
    return !sleep_.wait_for(lock, delay, [&] { return session.shared->stop.load(); });
  }

  enum class Outcome : std::uint8_t { delivered, failed, spooled };

  // Tries one uploader, with retries; parks the profile in the spool when the
  // backend stays unreachable.
  Outcome deliver(Session& session, Destination& d, const EncodedProfile& encoded) {
    if (d.down && Clock::now() < d.retry_at) return park(session, d, encoded, "the backend is marked down");
    for (int attempt = 1;; ++attempt) {
      const UploadResult result = d.uploader->upload(encoded);
      if (result.succeeded()) {
        d.failures = 0;
        d.down = false;
        return Outcome::delivered;
      }
      const std::string message = d.name + ": " + result.message;
      if (result.status == UploadResult::Status::permanent_failure) {
        count(Counter::upload_failures);
        report_error(ErrorCode::upload_failed, message + " (not retried)");
        return Outcome::failed;
      }
      ++d.failures;
      // A backend already marked down gets one probe per backoff period, so an
      // outage costs the queue one attempt, not a full retry sequence, per profile.
      if (d.down || attempt >= session.config.retry.max_attempts || session.shared->stop.load()) {
        d.down = true;
        d.retry_at = Clock::now() + backoff(session, d.failures, result.retry_after);
        return park(session, d, encoded, message);
      }
      count(Counter::upload_retries);
      if (!pause(session, backoff(session, attempt, result.retry_after))) {
        d.down = true;
        d.retry_at = Clock::now();
        return park(session, d, encoded, message);
      }
    }
  }

  Outcome park(Session& session, Destination& d, const EncodedProfile& encoded, const std::string& why) {
    if (session.spool) {
      const std::uint64_t evicted_before = session.spool->counters().evicted;
      std::string error;
      if (session.spool->store(d.name, encoded, error)) {
        count(Counter::profiles_spooled);
        const std::uint64_t evicted = session.spool->counters().evicted - evicted_before;
        count(Counter::spool_evicted, evicted);
        refresh_spool_counts(session);
        return Outcome::spooled;
      }
      report_error(ErrorCode::upload_failed, d.name + ": cannot spool an undeliverable profile: " + error);
    } else {
      report_error(ErrorCode::upload_failed, why);
    }
    count(Counter::upload_failures);
    return Outcome::failed;
  }

  void refresh_spool_counts(Session& session) {
    std::uint64_t total = 0;
    for (Destination& d : session.destinations) {
      d.spooled = session.spool->pending(d.name).size();
      total += d.spooled;
    }
    gauges_.spool_pending.store(total, std::memory_order_relaxed);
  }

  // Re-sends the oldest spooled profile of each uploader that is due.
  void resend_spooled(Session& session) noexcept {
    if (!session.spool) return;
    try {
      for (Destination& d : session.destinations) {
        if (d.spooled == 0 || (d.down && Clock::now() < d.retry_at) || session.shared->stop.load()) continue;
        const auto items = session.spool->pending(d.name);
        if (items.empty()) {
          d.spooled = 0;
          continue;
        }
        EncodedProfile encoded;
        Profile decoded;
        std::string error;
        if (!session.spool->load(items.front(), encoded, decoded, error)) {
          report_error(ErrorCode::upload_failed, d.name + ": dropped an unreadable spooled profile: " + error);
        } else {
          encoded.cancelled = &session.shared->stop;
          const UploadResult result = d.uploader->upload(encoded);
          if (result.status == UploadResult::Status::retryable_failure) {
            d.down = true;
            d.retry_at = Clock::now() + backoff(session, ++d.failures, result.retry_after);
            continue;  // stays spooled
          }
          if (result.succeeded()) {
            d.failures = 0;
            d.down = false;
            count(Counter::spool_resent);
          } else {
            count(Counter::upload_failures);
            report_error(ErrorCode::upload_failed, d.name + ": " + result.message + " (spooled profile dropped)");
          }
          session.spool->remove(items.front());
        }
        refresh_spool_counts(session);
      }
    } catch (...) {
      report_error(ErrorCode::internal, "out of memory re-sending spooled profiles");
    }
  }

  void process(CapturedProfile& pending, Session& session) noexcept {
    ProfileBuilder* builder = session.builder.get();
    const Config& config = session.config;
    try {
      RawProfile& raw = pending.profile;
      if (!unpack_captured_profile(pending)) return;
      if (raw.samples.empty() || !builder) return;
      const Profile profile = builder->build(raw, config.comments);
      EncodedProfile encoded;
      std::string error;
      if (!encode_pprof_gzip(profile, encoded.pprof_gzip, error)) {
        report_error(ErrorCode::encoding_failed, error);
        return;
      }
      encoded.kind = raw.kind;
      encoded.span = raw.span;
      encoded.span_name = raw.span_name;
      encoded.start_unix_ns = raw.start_unix_ns;
      encoded.duration_ns = raw.duration_ns;
      encoded.period_ns = raw.period_ns;
      encoded.heap_interval_bytes = raw.heap_interval_bytes;
      encoded.sample_count = raw.samples.size();
      encoded.engine = raw.engine;
      encoded.reason = raw.reason;
      encoded.profile = &profile;
      encoded.cancelled = &session.shared->stop;
      bool all_ok = true;
      for (Destination& destination : session.destinations)
        all_ok = deliver(session, destination, encoded) == Outcome::delivered && all_ok;
      if (all_ok) count(Counter::profiles_uploaded);
    } catch (const std::exception& e) {
      report_error(ErrorCode::internal, e.what());
    } catch (...) {
      report_error(ErrorCode::internal, "unknown exception while processing a profile");
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable sleep_;  // retry backoff, cut short by stop()
  std::condition_variable idle_;
  std::deque<std::unique_ptr<CapturedProfile>> queue_;
  std::size_t in_flight_ = 0;
  bool running_ = false;
  bool stopping_ = false;
  Config config_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  WorkerGauges gauges_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_WORKER_HPP_
