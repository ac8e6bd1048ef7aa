// The background half of the pipeline: the hand-off fed by request threads, a
// merger thread that takes what they handed over, and a sender thread
// (sender.hpp) that symbolizes, encodes and uploads.
//
// The hand-off costs a request thread neither a lock nor a system call in the
// common case (hand_off.hpp): the merger takes the whole list when its timer fires
// (every 100 ms) or when the list reaches half its capacity (the only time a
// producer wakes it). When the list is full a profile is dropped — the newest, or
// the oldest, as configured — and counted; a request thread never waits.
//
// Each uploader says how it wants profiles (Uploader::delivery()): one per span,
// its repeated stacks merged, or the spans of a window merged into one profile per
// kind (profile_batch.hpp), cut early at the uploader's limits. Uploaders that
// want the same thing share a lane: one merge, one symbolization, one pprof.
#ifndef SPANPROF_DETAIL_DELIVERY_WORKER_HPP_
#define SPANPROF_DETAIL_DELIVERY_WORKER_HPP_

#include <spanprof/base/clock.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/thread_name.hpp>
#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/detail/delivery/hand_off.hpp>
#include <spanprof/detail/delivery/sender.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/profile/profile_batch.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class Worker {
 public:
  // The sender's settings (capacity and overflow bound the hand-off too; the
  // worker groups the uploaders into lanes), and the merger's.
  struct Config : SenderConfig {
    std::chrono::milliseconds tick{100};  // how often the merger looks at the hand-off
    // Run by the merger every watchdog_interval (at its next tick): the runtime's
    // checks on the host (the sample signal's health), off every request thread.
    std::function<void()> watchdog;
    std::chrono::milliseconds watchdog_interval{100};
    // The process's continuous profile (Options::continuous): takes what its
    // sampler recorded since the merger's last look (null: off), and its window on
    // the wall clock.
    std::function<void(std::vector<RawProfile>&)> continuous;
    std::chrono::milliseconds continuous_window{};
  };

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { stop(std::chrono::milliseconds(2000)); }

  bool start(Config config) noexcept {
    std::unique_lock<std::mutex> held(mutex_);
    if (running_) return true;
    SPANPROF_TRY {
      auto run = std::make_shared<Run>();
      run->tick = config.tick;
      run->watchdog = config.watchdog;
      run->watchdog_interval = config.watchdog_interval;
      run->continuous = config.continuous;
      run->continuous_window = config.continuous_window;
      run->clock = config.clock ? config.clock : default_clock();
      // Flushes asked of an earlier run were answered when it stopped.
      run->flushes_answered = flush_requested_;
      SenderConfig sending = config;
      sending.uploaders.clear();
      sending.lanes.clear();
      for (const auto& uploader : config.uploaders) {
        if (!uploader) continue;
        sending.uploaders.push_back(uploader);
        add_to_lane(*run, sending, sending.uploaders.size() - 1, uploader->delivery());
      }
      run->sender = std::make_unique<Sender>(std::move(sending), run->stop, gauges_,
                                             [this](std::uint64_t flush) { answer_flush(flush); });
      capacity_.store(config.capacity, std::memory_order_relaxed);
      may_exceed_.store(config.overflow == OverflowPolicy::drop_oldest, std::memory_order_relaxed);
      std::thread sender([run] {
        begin_spanprof_thread(sender_thread_name);
        run->sender->run();
      });
      SPANPROF_TRY {
        merger_ = std::thread([this, run] {
          begin_spanprof_thread(merger_thread_name);
          merge(*run);
        });
      } SPANPROF_CATCH_ALL {
        run->stop = true;
        run->sender->wake();
        sender.join();
        SPANPROF_RETHROW;
      }
      sender_ = std::move(sender);
      run_ = std::move(run);
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "cannot start the spanprof worker threads");
      return false;
    }
    accepting_.store(true, std::memory_order_release);
    running_ = true;
    return true;
  }

  // Called from request threads: no lock, and no system call unless the hand-off
  // reached its wake-up mark.
  bool submit(std::unique_ptr<CapturedProfile> captured) noexcept {
    bool wake = false;
    if (accepting_.load(std::memory_order_acquire) &&
        hand_off_.push(captured, capacity_.load(std::memory_order_relaxed),
                       may_exceed_.load(std::memory_order_relaxed), wake)) {
      count(Counter::profiles_enqueued);
      if (SPANPROF_UNLIKELY(wake)) wake_.notify_one();
      return true;
    }
    count(Counter::profiles_dropped);
    count(Counter::profiles_refused);
    if (captured) {
      discard_captured_profile(*captured);
      captured_profile_pool().release(std::move(captured));
    }
    report_error(ErrorCode::queue_full, "a finished profile was dropped: the hand-off is full or stopped");
    return false;
  }

  // Waits until every profile handed over so far has been delivered — batches
  // are cut now rather than at the end of their window — or the deadline.
  bool flush(std::chrono::milliseconds timeout) noexcept {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> held(mutex_);
    if (!running_) return hand_off_.size() == 0;
    const std::uint64_t wanted = ++flush_requested_;
    wake_.notify_all();
    return idle_.wait_until(held, deadline, [&] { return !running_ || flush_done_ >= wanted; });
  }

  // Delivers what it can before the deadline, then stops. Threads stuck in an
  // upload past the deadline are left behind (detached) rather than waited for.
  bool stop(std::chrono::milliseconds timeout) noexcept {
    const bool drained = flush(timeout);
    std::thread merger, sender;
    std::shared_ptr<Run> run;
    {
      std::lock_guard<std::mutex> held(mutex_);
      if (!running_) return drained;
      accepting_.store(false, std::memory_order_release);
      running_ = false;
      run = std::move(run_);
      run->stop = true;
      merger = std::move(merger_);
      sender = std::move(sender_);
    }
    wake_.notify_all();
    idle_.notify_all();
    run->sender->wake();
    if (drained) {
      for (std::thread* thread : {&merger, &sender})
        if (thread->joinable()) thread->join();
    } else {
      // The sender may be stuck in an upload for good: it is left behind, and what
      // it holds is counted as dropped once the merger has passed on all it had.
      bool merged = false;
      {
        std::unique_lock<std::mutex> held(run->merged_mutex);
        merged = run->merged_cv.wait_for(held, merger_stop_wait, [&] { return run->merged; });
      }
      if (merged) {
        if (merger.joinable()) merger.join();
        run->sender->abandon_everything();
      } else if (merger.joinable()) {
        merger.detach();
      }
      if (sender.joinable()) sender.detach();
    }
    // What was handed over after the drain is dropped, and counted.
    SPANPROF_TRY {
      for (auto& captured : hand_off_.take()) {
        discard_captured_profile(*captured);
        captured_profile_pool().release(std::move(captured));
        count(Counter::profiles_dropped);
      }
    } SPANPROF_CATCH_ALL {
    }
    return drained;
  }

  // In a forked child: the merger and sender threads stayed in the parent, and
  // the child must not wait on their locks nor deliver what the parent's threads
  // handed over (the parent does). The caller then builds a fresh Worker in place.
  void close_files_after_fork() noexcept {
    if (run_) run_->sender->close_files_after_fork();
  }

  std::uint64_t spool_pending() const noexcept { return gauges_.spool_pending.load(std::memory_order_relaxed); }
  std::size_t queue_length() const noexcept { return hand_off_.size(); }

 private:
  static constexpr std::int64_t never = INT64_MAX;

  static std::int64_t ns(std::chrono::milliseconds span) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(span).count();
  }

  // How long a stop past its deadline waits for the merger to count what it held.
  static constexpr std::chrono::milliseconds merger_stop_wait{200};

  // Uploaders that want profiles the same way share a lane: one merge, one build.
  struct Lane {
    Delivery delivery;
    ProfileBatch batches[profile_kind_count];  // batched: by ProfileKind
    Tickets tickets[profile_kind_count];       // the spans of batches[k], in order
    std::int64_t window_end[profile_kind_count]{};  // on Run::clock
    // The continuous profile's window, on the wall clock, one batch per kind (CPU;
    // lock waits when they are recorded); a window cut early at the lane's limits
    // goes on in a new batch with the same bounds.
    ProfileBatch continuous[profile_kind_count];
    std::int64_t continuous_start = 0;
    std::int64_t continuous_end = 0;
  };

  // Everything one start() runs, shared by its two threads (and kept alive by them
  // when a stop past its deadline leaves them behind).
  struct Run {
    std::atomic<bool> stop{false};
    std::chrono::milliseconds tick{100};
    std::shared_ptr<const Clock> clock;  // batch windows; the merger's tick stays real time
    std::vector<Lane> lanes;         // the merger's
    std::uint64_t flushes_answered = 0;  // the merger's: flush requests it has passed on
    std::function<void()> watchdog;
    std::chrono::milliseconds watchdog_interval{100};
    std::function<void(std::vector<RawProfile>&)> continuous;
    std::chrono::milliseconds continuous_window{10'000};
    std::unique_ptr<Sender> sender;
    // Set when the merger has counted what it held: a stop past its deadline
    // waits briefly for it (the merger runs no user code), so that stats() add up
    // when shutdown() returns.
    std::mutex merged_mutex;
    std::condition_variable merged_cv;
    bool merged = false;
  };

  static void add_to_lane(Run& run, SenderConfig& sending, std::size_t uploader, const Delivery& delivery) {
    for (std::size_t i = 0; i < run.lanes.size(); ++i) {
      const Delivery& other = run.lanes[i].delivery;
      if (other == delivery || (!other.is_batched() && !delivery.is_batched())) {
        sending.lanes[i].push_back(uploader);
        return;
      }
    }
    run.lanes.emplace_back();
    run.lanes.back().delivery = delivery;
    sending.lanes.push_back({uploader});
  }

  void answer_flush(std::uint64_t flush) noexcept {
    {
      std::lock_guard<std::mutex> held(mutex_);
      flush_done_ = std::max(flush_done_, flush);
    }
    idle_.notify_all();
  }

  // The merger thread's body.
  void merge(Run& run) noexcept {
    using RealClock = std::chrono::steady_clock;
    RealClock::time_point watched = RealClock::now();
    for (;;) {
      std::uint64_t flush_wanted = 0;
      {
        std::unique_lock<std::mutex> held(mutex_);
        const std::int64_t window_end = next_window_end(run);
        const auto wait = window_end == never
                              ? run.tick
                              : std::min<std::chrono::nanoseconds>(
                                    run.tick, run.clock->real_wait(window_end - run.clock->now_ns()));
        wake_.wait_for(held, wait, [&] {
          return run.stop.load() || flush_requested_ > run.flushes_answered ||
                 hand_off_.size() * 2 >= capacity_.load(std::memory_order_relaxed);
        });
        if (run.stop.load()) break;
        flush_wanted = flush_requested_;
      }
      const bool flushing = flush_wanted > run.flushes_answered;
      if (run.watchdog && RealClock::now() - watched >= run.watchdog_interval) {
        watched = RealClock::now();
        run.watchdog();
      }
      drain(run);
      take_continuous(run, flushing);
      cut_due_windows(run, flushing);
      if (flushing) {
        // Answered by the sender once everything before the marker is sent.
        Outgoing marker;
        marker.flush = flush_wanted;
        run.sender->post(std::move(marker));
        run.flushes_answered = flush_wanted;
      }
    }
    // Stopped before their window ended (a shutdown past its deadline): the spans
    // still being merged are dropped, and counted.
    for (Lane& lane : run.lanes)
      for (Tickets& tickets : lane.tickets) abandon_tickets(tickets);
    {
      std::lock_guard<std::mutex> held(run.merged_mutex);
      run.merged = true;
    }
    run.merged_cv.notify_all();
  }

  // Takes everything handed over and merges it, or passes it on; with
  // drop_oldest, drops the oldest beyond the capacity first.
  void drain(Run& run) noexcept {
    SPANPROF_TRY {
      std::vector<std::unique_ptr<CapturedProfile>> taken = hand_off_.take();
      const std::size_t capacity = capacity_.load(std::memory_order_relaxed);
      const std::size_t first = taken.size() > capacity ? taken.size() - capacity : 0;
      if (first != 0) report_error(ErrorCode::queue_full, "the oldest finished profiles were dropped: the hand-off was full");
      for (std::size_t i = 0; i < taken.size(); ++i) {
        if (i < first || run.stop.load()) {
          discard_captured_profile(*taken[i]);
          count(Counter::profiles_dropped);
        } else {
          process(*taken[i], run);
        }
        captured_profile_pool().release(std::move(taken[i]));  // for a request thread to reuse
      }
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory taking finished profiles");
    }
  }

  void process(CapturedProfile& captured, Run& run) noexcept {
    SPANPROF_TRY {
      RawProfile& raw = captured.profile;
      if (!unpack_captured_profile(captured)) {  // reported why
        count(Counter::upload_failures);
        return;
      }
      if (raw.samples.empty() || run.lanes.empty()) {
        count(Counter::profiles_uploaded);  // nothing to send is nothing lost
        return;
      }
      auto ticket = std::make_shared<SpanTicket>();
      ticket->lanes_left = run.lanes.size();
      for (std::size_t l = 0; l < run.lanes.size(); ++l) {
        Lane& lane = run.lanes[l];
        if (!lane.delivery.is_batched()) {
          Outgoing one;
          one.lane = l;
          one.one_span = true;
          one.tickets.push_back(ticket);
          one.batch.add(raw);
          run.sender->post(std::move(one));
          continue;
        }
        const auto k = static_cast<std::size_t>(raw.kind);
        ProfileBatch& batch = lane.batches[k];
        if (!batch.accepts(raw)) cut(run, l, k);
        if (batch.empty()) lane.window_end[k] = run.clock->now_ns() + ns(lane.delivery.window);
        lane.tickets[k].push_back(ticket);
        batch.add(raw);
        // Cut at the backend's limits, before one more span pushes past them.
        if (batch.sample_count() >= lane.delivery.max_samples || batch.estimated_bytes() >= lane.delivery.max_bytes)
          cut(run, l, k);
      }
    } SPANPROF_CATCH_STD(e) {
      report_error(ErrorCode::internal, e.what());
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "unknown exception while processing a profile");
    }
  }

  // What the continuous profile recorded since the last look joins each lane's
  // window of the wall clock: cut when the window ends, at the lane's limits, and
  // at a flush.
  static void take_continuous(Run& run, bool flushing) noexcept {
    if (!run.continuous) return;
    SPANPROF_TRY {
      std::vector<RawProfile> taken;
      run.continuous(taken);
      const std::int64_t now = realtime_now_ns();
      const std::int64_t window = std::max<std::int64_t>(1, ns(run.continuous_window));
      for (std::size_t l = 0; l < run.lanes.size(); ++l) {
        Lane& lane = run.lanes[l];
        if (now >= lane.continuous_end) {
          cut_continuous(run, l);
          lane.continuous_start = now - now % window;
          lane.continuous_end = lane.continuous_start + window;
        }
        for (const RawProfile& raw : taken) {
          ProfileBatch& batch = lane.continuous[static_cast<std::size_t>(raw.kind)];
          if (batch.empty()) batch.set_window(lane.continuous_start, lane.continuous_end);
          batch.add(raw);
          if (batch.sample_count() >= lane.delivery.max_samples || batch.estimated_bytes() >= lane.delivery.max_bytes)
            cut_continuous(run, l, raw.kind);
        }
        if (flushing) cut_continuous(run, l);
      }
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory merging the continuous profile");
    }
  }

  static void cut_continuous(Run& run, std::size_t lane, ProfileKind kind) noexcept {
    Outgoing window;
    window.lane = lane;
    std::swap(window.batch, run.lanes[lane].continuous[static_cast<std::size_t>(kind)]);
    if (!window.batch.empty()) run.sender->post(std::move(window));
  }
  static void cut_continuous(Run& run, std::size_t lane) noexcept {
    for (std::size_t k = 0; k < profile_kind_count; ++k) cut_continuous(run, lane, static_cast<ProfileKind>(k));
  }

  static std::int64_t next_window_end(const Run& run) noexcept {
    std::int64_t due = never;
    for (const Lane& lane : run.lanes)
      for (std::size_t k = 0; k < profile_kind_count; ++k)
        if (!lane.batches[k].empty()) due = std::min(due, lane.window_end[k]);
    return due;
  }

  static void cut_due_windows(Run& run, bool all) noexcept {
    const std::int64_t now = run.clock->now_ns();
    for (std::size_t l = 0; l < run.lanes.size(); ++l)
      for (std::size_t k = 0; k < profile_kind_count; ++k)
        if (!run.lanes[l].batches[k].empty() && (all || now >= run.lanes[l].window_end[k])) cut(run, l, k);
  }

  // Hands a lane's window to the sender and starts a new one.
  static void cut(Run& run, std::size_t lane, std::size_t kind) noexcept {
    Outgoing window;
    window.lane = lane;
    std::swap(window.batch, run.lanes[lane].batches[kind]);
    std::swap(window.tickets, run.lanes[lane].tickets[kind]);
    if (!window.batch.empty()) run.sender->post(std::move(window));
  }

  HandOff hand_off_;
  std::atomic<std::size_t> capacity_{256};
  std::atomic<bool> may_exceed_{false};
  std::atomic<bool> accepting_{false};
  std::mutex mutex_;
  std::condition_variable wake_;  // the merger waits here
  std::condition_variable idle_;  // flush() waits here
  std::uint64_t flush_requested_ = 0;  // under mutex_
  std::uint64_t flush_done_ = 0;       // under mutex_
  bool running_ = false;
  std::shared_ptr<Run> run_;
  std::thread merger_;
  std::thread sender_;
  WorkerGauges gauges_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_WORKER_HPP_
