// The sending half of the background worker: symbolizes and encodes what the
// merger cut (a window's merged spans, or one span), and delivers it to the
// uploaders of its lane, with retries, backoff and the spool.
//
// It runs on a thread of its own, fed through a bounded outbox, so that a slow
// backend never stops the merger from taking what request threads hand over: the
// next window fills while the previous one is in flight, and the hand-off only
// overflows when the outbox is full too (a backend slower than the profiles
// arrive, for longer than the outbox holds).
//
// Delivery (docs/delivery.md): each uploader encodes its payload once; a retryable
// failure is retried with exponential backoff and jitter (honouring Retry-After);
// when the attempts run out the uploader is marked down until its backoff expires,
// so one dead backend does not stall the others, and the payload — the bytes the
// uploader sends — goes to the spool directory if one is configured, to be re-sent
// oldest first once the backend answers again (also after a restart). Permanent
// failures are never retried.
#ifndef SPANPROF_DETAIL_DELIVERY_SENDER_HPP_
#define SPANPROF_DETAIL_DELIVERY_SENDER_HPP_

#include <spanprof/base/clock.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/detail/delivery/spool.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/profile/profile_batch.hpp>
#include <spanprof/detail/profile/profile_builder.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// One span on its way through the lanes. Stats count a span once, whatever the
// number of lanes: uploaded when every lane delivered it, dropped when a lane had
// to abandon it. Settled by the sender, abandoned by the merger at a stop.
struct SpanTicket {
  std::atomic<std::size_t> lanes_left{0};
  std::atomic<bool> all_delivered{true};
};
using Tickets = std::vector<std::shared_ptr<SpanTicket>>;

// A lane is done with these spans: each is counted once its last lane is done.
inline void settle_tickets(const Tickets& tickets, bool delivered) noexcept {
  for (const auto& ticket : tickets) {
    if (!delivered) ticket->all_delivered.store(false, std::memory_order_relaxed);
    if (ticket->lanes_left.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
        ticket->all_delivered.load(std::memory_order_relaxed))
      count(Counter::profiles_uploaded);
  }
}

// Spans a stop left undelivered in one lane: dropped, counted once per span.
inline void abandon_tickets(const Tickets& tickets) noexcept {
  for (const auto& ticket : tickets) {
    const bool delivered_elsewhere = ticket->all_delivered.exchange(false, std::memory_order_relaxed);
    if (ticket->lanes_left.fetch_sub(1, std::memory_order_acq_rel) == 1 && delivered_elsewhere)
      count(Counter::profiles_dropped);
  }
}

// What the merger hands the sender: a batch to build and send to a lane's
// uploaders, or a flush marker.
struct Outgoing {
  std::size_t lane = 0;
  bool one_span = false;  // per-span delivery: the profile is that span's, with its identity
  ProfileBatch batch;
  Tickets tickets;
  std::uint64_t flush = 0;  // nonzero: answer flush request `flush` once everything before it is sent
};

// What the worker has counted that is a level, not an event (events go to the
// counter registry).
struct WorkerGauges {
  std::atomic<std::uint64_t> spool_pending{0};  // spooled payloads, not yet delivered
};

struct SenderConfig {
  std::size_t capacity{};  // items waiting in the outbox, at most (Options::queue_capacity)
  OverflowPolicy overflow{};
  RetryPolicy retry;
  std::string spool_directory;  // empty: no spool
  std::uint64_t spool_max_bytes{};
  std::vector<std::shared_ptr<Uploader>> uploaders;
  std::vector<std::vector<std::size_t>> lanes;  // each lane's uploaders (indices into `uploaders`)
  std::shared_ptr<Symbolizer> symbolizer;
  std::vector<std::string> comments;  // written into every profile
  // Retry backoff, re-sends from the spool and (the worker's) batch windows run
  // on this clock; null: the monotonic clock.
  std::shared_ptr<const Clock> clock;
};

class Sender {
 public:
  // Besides the item being sent, the outbox holds at most `capacity` items and
  // this much estimated pprof: two full windows at the default cut, so memory
  // stays bounded whatever the backend does.
  static constexpr std::size_t max_outbox_bytes = std::size_t{2} << 20;

  using FlushAnswer = std::function<void(std::uint64_t)>;

  Sender(SenderConfig config, const std::atomic<bool>& stop, WorkerGauges& gauges, FlushAnswer answer) noexcept
      : config_(std::move(config)),
        clock_(config_.clock ? *config_.clock : steady_clock_),
        stop_(stop),
        gauges_(gauges),
        answer_flush_(std::move(answer)) {}

  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // The merger's side. When the outbox is full, drop_oldest drops its oldest
  // profiles to make room; drop_newest waits (the hand-off fills meanwhile, and
  // drops the newest). False when stopping: the item's spans are then abandoned
  // and counted.
  bool post(Outgoing item) noexcept {
    SPANPROF_TRY {
      const std::size_t bytes = item.batch.estimated_bytes();
      std::unique_lock<std::mutex> held(mutex_);
      // A flush marker takes no room: it must not push a profile out, nor wait.
      const auto has_room = [&] {
        return item.flush != 0 || outbox_.empty() ||
               (outbox_bytes_ + bytes <= max_outbox_bytes && outbox_.size() < config_.capacity);
      };
      if (config_.overflow == OverflowPolicy::drop_oldest) {
        Tickets dropped;
        while (!has_room() && evict_oldest(dropped)) {
        }
        if (!dropped.empty()) {
          held.unlock();
          abandon_tickets(dropped);
          report_error(ErrorCode::queue_full, "the oldest finished profiles were dropped: the sender is behind");
          held.lock();
        }
      }
      room_.wait(held, [&] { return stop_.load() || has_room(); });
      if (!stop_.load()) {
        outbox_bytes_ += bytes;
        outbox_.push_back(std::move(item));
        held.unlock();
        work_.notify_one();
        return true;
      }
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory handing a profile to the sender");
    }
    abandon_tickets(item.tickets);
    return false;
  }

  // In a forked child, on the parent's sender (whose thread stayed in the parent).
  void close_files_after_fork() noexcept {
    if (spool_) spool_->close_files_after_fork();
  }

  // Wakes the thread and any merger waiting for room, to see the stop.
  void wake() noexcept {
    { std::lock_guard<std::mutex> held(mutex_); }
    work_.notify_all();
    room_.notify_all();
  }

  // A stop past its deadline, from the stopping thread: what the sender still
  // holds (its outbox, and the item it may be stuck uploading) is counted as
  // dropped now, so stats() add up when shutdown() returns. Should the stuck
  // upload ever return, the sender counts nothing more for it.
  void abandon_everything() noexcept {
    std::deque<Outgoing> left;
    {
      std::lock_guard<std::mutex> held(mutex_);
      left.swap(outbox_);
      outbox_bytes_ = 0;
    }
    room_.notify_all();
    std::lock_guard<std::mutex> held(settle_mutex_);
    abandoned_ = true;
    for (const Outgoing& item : left) abandon_tickets(item.tickets);
    if (in_flight_ != nullptr) abandon_tickets(in_flight_->tickets);
    in_flight_ = nullptr;
  }

  // The sender thread's body.
  void run() noexcept {
    SPANPROF_TRY {
      if (config_.symbolizer) builder_ = std::make_unique<ProfileBuilder>(*config_.symbolizer);
      for (const auto& uploader : config_.uploaders)
        destinations_.push_back(Destination{uploader, uploader ? std::string(uploader->name()) : std::string()});
      open_spool();
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory starting the spanprof sender");
    }
    for (;;) {
      Outgoing item;
      bool have = false;
      {
        std::unique_lock<std::mutex> held(mutex_);
        const auto ready = [&] { return stop_.load() || !outbox_.empty(); };
        const std::int64_t due = next_spool_attempt();
        if (due == never) {
          work_.wait(held, ready);
        } else {
          work_.wait_for(held, clock_.real_wait(due - clock_.now_ns()), ready);
        }
        if (stop_.load()) break;
        if (!outbox_.empty()) {
          item = std::move(outbox_.front());
          outbox_.pop_front();
          outbox_bytes_ -= std::min(outbox_bytes_, item.batch.estimated_bytes());
          have = true;
        }
      }
      if (have) {
        room_.notify_all();
        if (item.flush != 0) {
          resend_spooled();
          flush_uploaders();
          answer_flush_(item.flush);
        } else if (take_in_flight(item)) {
          send(item);
        }
      }
      resend_spooled();
    }
    // Stopped (a shutdown past its deadline): what waits here is dropped, counted.
    std::deque<Outgoing> left;
    {
      std::lock_guard<std::mutex> held(mutex_);
      left.swap(outbox_);
      outbox_bytes_ = 0;
    }
    room_.notify_all();
    for (const Outgoing& item : left) abandon_tickets(item.tickets);
  }

 private:
  static constexpr std::int64_t never = INT64_MAX;

  // One uploader's delivery state, owned by the sender thread.
  struct Destination {
    std::shared_ptr<Uploader> uploader;
    std::string name;
    int failures = 0;               // consecutive retryable failures
    bool down = false;              // gave up on the last profile; probe after retry_at
    std::int64_t retry_at = 0;      // on clock_
    std::uint64_t spooled = 0;      // waiting in the spool for this uploader
  };

  enum class Outcome : std::uint8_t { delivered, failed, spooled };

  // Under mutex_: takes the oldest profile out of the outbox (a flush marker stays).
  bool evict_oldest(Tickets& dropped) {
    for (auto it = outbox_.begin(); it != outbox_.end(); ++it) {
      if (it->flush != 0) continue;
      dropped.insert(dropped.end(), it->tickets.begin(), it->tickets.end());
      outbox_bytes_ -= std::min(outbox_bytes_, it->batch.estimated_bytes());
      outbox_.erase(it);
      return true;
    }
    return false;
  }

  // Builds the profile once and hands it to every uploader of the lane. Counts in
  // spans: a batch that fails for one uploader is that many profiles failed.
  void send(const Outgoing& item) noexcept {
    const ProfileBatch& batch = item.batch;
    const std::uint64_t spans = batch.span_count();
    bool all_ok = false;
    std::uint64_t failed = 0, spooled = 0;
    SPANPROF_TRY {
      const std::vector<std::size_t>& lane = config_.lanes.at(item.lane);
      if (!builder_) {
        report_error(ErrorCode::internal, "sending a profile: no symbolizer");
        settle(item, false, spans * lane.size(), 0);
        return;
      }
      const Profile profile = batch.build(*builder_, config_.comments);
      std::string pprof_gzip;
      if (const Status status = encode_pprof_gzip(profile, pprof_gzip); !status) {
        report_error(status.code(), status.message());
        settle(item, false, spans * lane.size(), 0);
        return;
      }
      const EncodedProfile encoded = describe(batch, item.one_span, profile.samples.size());
      const EncodeInput input{&profile, pprof_gzip};
      all_ok = true;
      for (const std::size_t d : lane) {
        Destination& destination = destinations_.at(d);
        std::string payload;
        const Status status = destination.uploader ? destination.uploader->encode(encoded, input, payload)
                                                   : Status(ErrorCode::internal, "no uploader");
        if (!status) {
          report_error(status.code(), destination.name + ": " + status.message());
          failed += spans;
          all_ok = false;
          continue;
        }
        const Outcome outcome = deliver(destination, encoded, payload, profile);
        if (outcome == Outcome::failed) failed += spans;
        if (outcome == Outcome::spooled) spooled += spans;
        all_ok = outcome == Outcome::delivered && all_ok;
      }
    } SPANPROF_CATCH_STD(e) {
      all_ok = false;
      report_error(ErrorCode::internal, std::string("sending a profile: ") + e.what());
    } SPANPROF_CATCH_ALL {
      all_ok = false;
      report_error(ErrorCode::internal, "unknown exception while sending a profile");
    }
    settle(item, all_ok, failed, spooled);
  }

  // What an uploader buffers goes out when spanprof::flush() or shutdown asks.
  void flush_uploaders() noexcept {
    for (Destination& d : destinations_) {
      if (!d.uploader) continue;
      const UploadResult result = d.uploader->flush();
      if (result) continue;
      SPANPROF_TRY {
        report_error(ErrorCode::upload_failed, d.name + ": flush: " + result.message());
      } SPANPROF_CATCH_ALL {
        report_error(ErrorCode::upload_failed, "an uploader's flush failed");
      }
    }
  }

  // The sender thread takes `item` to send it; false if a stop past its deadline
  // came first (the item is then counted as dropped here, as the rest was).
  bool take_in_flight(const Outgoing& item) noexcept {
    std::lock_guard<std::mutex> held(settle_mutex_);
    if (abandoned_) {
      abandon_tickets(item.tickets);
      return false;
    }
    in_flight_ = &item;
    return true;
  }

  // The in-flight item's outcome, counted unless a stop past its deadline already
  // counted it as dropped.
  void settle(const Outgoing& item, bool delivered, std::uint64_t failed, std::uint64_t spooled) noexcept {
    std::lock_guard<std::mutex> held(settle_mutex_);
    in_flight_ = nullptr;
    if (abandoned_) return;
    if (failed != 0) count(Counter::upload_failures, failed);
    if (spooled != 0) count(Counter::profiles_spooled, spooled);
    settle_tickets(item.tickets, delivered);
  }

  // The record an uploader sees: the span's own, or a window's (its kind, period
  // and time span).
  static EncodedProfile describe(const ProfileBatch& batch, bool one_span, std::size_t sample_count) {
    EncodedProfile encoded;
    encoded.record = one_span && batch.span_count() == 1 ? batch.spans().front() : batch.window_record();
    encoded.sample_count = sample_count;
    encoded.span_count = batch.span_count();
    return encoded;
  }

  void open_spool() {
    if (config_.spool_directory.empty()) return;
    auto spool = std::make_unique<Spool>(config_.spool_directory, config_.spool_max_bytes);
    // After spanprof::start() with new options, the previous sender may still hold
    // the spool's lock for a moment while it winds down.
    Status opened = spool->open();
    for (int wait = 0; !opened && wait < 20 && !stop_.load(); ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      opened = spool->open();
    }
    if (!opened) {
      report_error(ErrorCode::upload_failed,
                   "spool directory unusable, undeliverable profiles will be lost: " + opened.message());
      return;
    }
    spool_ = std::move(spool);
    refresh_spool_counts();
  }

  // When a spooled payload should next be re-sent (never: nothing to do).
  std::int64_t next_spool_attempt() const noexcept {
    std::int64_t due = never;
    if (!spool_) return due;
    for (const Destination& d : destinations_)
      if (d.spooled != 0) due = std::min(due, d.down ? d.retry_at : clock_.now_ns());
    return due;
  }

  static std::int64_t ns(std::chrono::milliseconds delay) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count();
  }

  std::chrono::milliseconds backoff(int failures, std::chrono::milliseconds retry_after) {
    const RetryPolicy& retry = config_.retry;
    double delay = static_cast<double>(retry.initial_backoff.count());
    for (int i = 1; i < failures && delay < static_cast<double>(retry.max_backoff.count()); ++i) delay *= 2;
    // Jitter spreads the retries of many processes that lost the same backend.
    std::uniform_real_distribution<double> spread(1.0 - retry.jitter, 1.0 + retry.jitter);
    delay = std::min(delay * spread(random_), static_cast<double>(retry.max_backoff.count()));
    if (retry_after.count() > 0)
      delay = std::max(delay, static_cast<double>(std::min(retry_after, retry.max_backoff).count()));
    return std::chrono::milliseconds(static_cast<std::int64_t>(delay));
  }

  // Waits `delay` on the clock unless spanprof is shutting down; false if woken
  // by the shutdown.
  bool pause(std::chrono::milliseconds delay) {
    const std::int64_t until = clock_.now_ns() + ns(delay);
    std::unique_lock<std::mutex> held(mutex_);
    for (std::int64_t now = clock_.now_ns(); now < until; now = clock_.now_ns())
      if (work_.wait_for(held, clock_.real_wait(until - now), [&] { return stop_.load(); })) return false;
    return true;
  }

  // Tries one uploader, with retries; parks the payload in the spool when the
  // backend stays unreachable.
  Outcome deliver(Destination& d, const EncodedProfile& encoded, std::string_view payload, const Profile& profile) {
    if (d.down && clock_.now_ns() < d.retry_at) return park(d, encoded, payload, "the backend is marked down");
    for (int attempt = 1;; ++attempt) {
      count(Counter::upload_requests);
      const UploadResult result = d.uploader->send(encoded, payload, UploadContext{&profile, &stop_});
      if (result) {
        d.failures = 0;
        d.down = false;
        return Outcome::delivered;
      }
      const std::string message = d.name + ": " + result.message();
      if (!result.may_retry()) {
        report_error(ErrorCode::upload_failed, message + " (not retried)");
        return Outcome::failed;
      }
      ++d.failures;
      // A backend already marked down gets one probe per backoff period, so an
      // outage costs one attempt, not a full retry sequence, per profile.
      if (d.down || attempt >= config_.retry.max_attempts || stop_.load()) {
        d.down = true;
        d.retry_at = clock_.now_ns() + ns(backoff(d.failures, result.retry_after()));
        return park(d, encoded, payload, message);
      }
      count(Counter::upload_retries);
      if (!pause(backoff(attempt, result.retry_after()))) {
        d.down = true;
        d.retry_at = clock_.now_ns();
        return park(d, encoded, payload, message);
      }
    }
  }

  Outcome park(Destination& d, const EncodedProfile& encoded, std::string_view payload, const std::string& why) {
    if (spool_) {
      const std::uint64_t evicted_before = spool_->counters().evicted;
      const Status stored = spool_->store(d.name, encoded, payload);
      if (stored) {
        count(Counter::spool_evicted, spool_->counters().evicted - evicted_before);
        refresh_spool_counts();
        return Outcome::spooled;
      }
      report_error(ErrorCode::upload_failed, d.name + ": cannot spool an undeliverable profile: " + stored.message());
    } else {
      report_error(ErrorCode::upload_failed, why);
    }
    return Outcome::failed;
  }

  void refresh_spool_counts() {
    std::uint64_t total = 0;
    for (Destination& d : destinations_) {
      d.spooled = spool_->pending(d.name).size();
      total += d.spooled;
    }
    gauges_.spool_pending.store(total, std::memory_order_relaxed);
  }

  // Re-sends the oldest spooled payload of each uploader that is due.
  void resend_spooled() noexcept {
    if (!spool_) return;
    SPANPROF_TRY {
      for (Destination& d : destinations_) {
        if (d.spooled == 0 || (d.down && clock_.now_ns() < d.retry_at) || stop_.load() || !d.uploader) continue;
        const auto items = spool_->pending(d.name);
        if (items.empty()) {
          d.spooled = 0;
          continue;
        }
        EncodedProfile metadata;
        std::string payload;
        if (const Status loaded = spool_->load(items.front(), metadata, payload); !loaded) {
          report_error(ErrorCode::upload_failed, d.name + ": dropped an unreadable spooled profile: " + loaded.message());
        } else {
          count(Counter::upload_requests);
          const UploadResult result = d.uploader->send(metadata, payload, UploadContext{nullptr, &stop_});
          if (!result && result.may_retry()) {
            d.down = true;
            d.retry_at = clock_.now_ns() + ns(backoff(++d.failures, result.retry_after()));
            continue;  // stays spooled
          }
          if (result) {
            d.failures = 0;
            d.down = false;
            count(Counter::spool_resent, metadata.span_count);
          } else {
            count(Counter::upload_failures, metadata.span_count);
            report_error(ErrorCode::upload_failed, d.name + ": " + result.message() + " (spooled profile dropped)");
          }
        }
        spool_->remove(items.front());
        refresh_spool_counts();
      }
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory re-sending spooled profiles");
    }
  }

  const SenderConfig config_;
  const SteadyClock steady_clock_;
  const Clock& clock_;
  const std::atomic<bool>& stop_;
  WorkerGauges& gauges_;
  const FlushAnswer answer_flush_;

  std::mutex mutex_;
  std::condition_variable work_;  // the sender waits here: items, spool due, backoff, stop
  std::condition_variable room_;  // the merger waits here for room in the outbox
  std::deque<Outgoing> outbox_;
  std::size_t outbox_bytes_ = 0;
  // Who counts the item being sent: the sender when it settles, or the stopping
  // thread when a stop past its deadline abandons the sender (abandon_everything).
  std::mutex settle_mutex_;
  const Outgoing* in_flight_ = nullptr;
  bool abandoned_ = false;

  // The sender thread's own.
  std::unique_ptr<ProfileBuilder> builder_;
  std::vector<Destination> destinations_;
  std::unique_ptr<Spool> spool_;
  std::minstd_rand random_{std::random_device{}()};
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_SENDER_HPP_
