// Internal. The shared state of a request profiled across threads (request.hpp): the
// samples its fragments recorded, and when it is over.
//
// One word holds its whole life, so that a fragment opens and closes with one
// atomic operation and the request is delivered exactly once, by whichever thread
// sees it over: references (handles and running fragments), running fragments,
// "ended" (RequestProfile::end()) and "delivered". It is delivered when it has
// ended and no fragment runs, or when the last reference goes (abandoned if it
// never ended), and freed when the last reference goes.
#ifndef SPANPROF_DETAIL_REQUEST_STATE_HPP_
#define SPANPROF_DETAIL_REQUEST_STATE_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/detail/capture/heap_sampler.hpp>
#include <spanprof/detail/capture/lock_log.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/guard_core.hpp>
#include <spanprof/detail/hand_over.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/runtime/running_config.hpp>
#include <spanprof/detail/span_decision.hpp>
#include <spanprof/span/span_context.hpp>
#include <spanprof/detail/span/thread_context.hpp>

#if SPANPROF_ENABLED

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

constexpr Counter kept_counter(ProfileReason reason) noexcept {
  return static_cast<Counter>(static_cast<std::size_t>(Counter::kept_sampled) + static_cast<std::size_t>(reason));
}
static_assert(static_cast<std::size_t>(Counter::kept_triggered) - static_cast<std::size_t>(Counter::kept_sampled) + 1 ==
                  keep_reason_count,
              "one kept_* counter per ProfileReason, in its order");

// A span kept for what happened to it (slow, erroring, triggered) made no profile:
// not one sample. Counted and said, so that a missing profile is never silent; a
// span kept only because it was sampled is counted in spans_without_samples alone
// (most short requests of a server are).
SPANPROF_NOINLINE inline void kept_without_samples(ProfileReason reason, std::int64_t duration_ns) noexcept {
  if (reason == ProfileReason::sampled) return;
  count(Counter::kept_without_samples);
  char message[192];
  std::snprintf(message, sizeof message,
                "a span kept as %.*s (%.1f ms) had not one sample, so no profile was made: shorter than the "
                "sampling period, or waiting rather than running (docs/sampling.md)",
                static_cast<int>(to_string(reason).size()), to_string(reason).data(),
                static_cast<double>(duration_ns) / 1e6);
  report_error(ErrorCode::no_samples, message);
}

class RequestState {
 public:
  static constexpr std::size_t max_name = GuardCore::max_span_name;  // as a guard's

  // What a request records, fixed when it begins.
  struct Identity {
    SpanContext span;
    std::string_view name;
    ProfileKinds kinds;
    std::uint64_t generation = 0;  // the configuration whose samplers record it
    std::shared_ptr<TailPolicy> tail_policy;
    std::shared_ptr<AdaptiveTrigger> trigger;
    TriggerVerdict declined = TriggerVerdict::none;  // head sampler said no: profiled or timed for the trigger
    std::uint64_t name_hash = 0;                      // for the trigger, when declined
    bool profiled = true;  // false: declined, timed for the trigger or only labelling
    bool labels = false;   // not profiled, its fragments still label the continuous profile's samples
  };

  // Null when out of memory (the request is then not profiled). With `room_bytes`,
  // that much more in the same allocation, aligned for any object (room()): for an
  // object that needs the request as long as it lives, made there by its owner
  // (the gRPC interceptor), which holds a reference for it until release_room().
  static RequestState* create(Identity identity, std::size_t room_bytes = 0) noexcept {
    void* const block = ::operator new(room_offset() + room_bytes, std::nothrow);
    if (block == nullptr) return nullptr;
    auto* state = ::new (block) RequestState();
    state->span_ = identity.span;
    state->name_length_ = identity.name.size() < max_name ? identity.name.size() : max_name;
    if (state->name_length_ != 0) std::memcpy(state->name_, identity.name.data(), state->name_length_);
    state->kinds_ = identity.kinds;
    state->generation_ = identity.generation;
    state->tail_policy_ = std::move(identity.tail_policy);
    state->trigger_ = std::move(identity.trigger);
    state->declined_ = identity.declined;
    state->name_hash_ = identity.name_hash;
    state->profiled_ = identity.profiled;
    state->labels_ = identity.labels;
    fill_thread_context(state->thread_context_, identity.span, identity.name);
    state->start_ns_ = monotonic_now_ns();
    state->start_unix_ns_ = realtime_now_ns();
    return state;
  }

  RequestState(const RequestState&) = delete;
  RequestState& operator=(const RequestState&) = delete;

  void* room() noexcept { return reinterpret_cast<char*>(this) + room_offset(); }
  // The object in the room is gone: its reference goes too.
  static void release_room(void* room) noexcept {
    reinterpret_cast<RequestState*>(static_cast<char*>(room) - room_offset())->release();
  }

  // A fragment's label took a sample of the continuous profile (Options::continuous):
  // the request is in that profile, and is linked to it like a kept profile.
  void note_continuous_sample() noexcept { continuous_sampled_.store(true, std::memory_order_relaxed); }
  bool in_continuous_profile() const noexcept { return continuous_sampled_.load(std::memory_order_relaxed); }

  const SpanContext& span() const noexcept { return span_; }
  std::string_view name() const noexcept { return std::string_view(name_, name_length_); }
  ProfileKinds kinds() const noexcept { return kinds_; }
  std::uint64_t generation() const noexcept { return generation_; }
  // What otel_thread_ctx_v1 points at while a fragment of it runs (thread_context.hpp).
  const ThreadContextRecord& thread_context() const noexcept { return thread_context_; }

  // ---- handles (RequestProfile) -----------------------------------------------------

  void acquire() noexcept { life_.fetch_add(one_reference, std::memory_order_relaxed); }

  // The last reference delivers what was recorded, if nothing did yet, and frees.
  void release() noexcept {
    const std::uint64_t now = life_.fetch_sub(one_reference, std::memory_order_acq_rel) - one_reference;
    if ((now & (reference_mask | running_mask)) != 0) return;
    if ((now & delivered_bit) == 0) (void)deliver((now & ended_bit) == 0);
    destroy();
  }

  void set_error(bool failed) noexcept { errored_.store(failed, std::memory_order_relaxed); }
  void discard() noexcept { discarded_.store(true, std::memory_order_relaxed); }

  // The request is over: the tail policy decides now, with its duration and error
  // status; it is delivered now if no fragment runs, else when the last running one
  // closes. True when it is kept: its profile was handed over now, or will be once
  // those fragments close (if they took samples). The caller holds a reference,
  // and drops it after.
  bool end() noexcept {
    if (end_claimed_.exchange(true, std::memory_order_acq_rel)) return false;  // ended before
    const std::int64_t end = monotonic_now_ns();
    end_ns_ = end;
    decision_ = decide(end - start_ns_);
    // Published with the ended bit: whoever delivers reads the decision after it.
    std::uint64_t before = life_.load(std::memory_order_relaxed);
    std::uint64_t after;
    do {
      after = before | ended_bit;
      if ((before & running_mask) == 0) after |= delivered_bit;
    } while (!life_.compare_exchange_weak(before, after, std::memory_order_acq_rel, std::memory_order_relaxed));
    if ((after & delivered_bit) == 0) return decision_.keep;  // a fragment runs: it delivers
    return deliver(false);
  }

  // ---- fragments -------------------------------------------------------------------

  // A thread starts running the request: false once it has ended (not profiled).
  // A running fragment holds a reference of its own.
  bool enter_fragment() noexcept {
    if (!profiled_ && !labels_) return false;  // timed for the trigger: no fragment has a part
    std::uint64_t before = life_.load(std::memory_order_relaxed);
    do {
      if ((before & (ended_bit | delivered_bit)) != 0) return false;
    } while (!life_.compare_exchange_weak(before, before + one_reference + one_running, std::memory_order_acquire,
                                          std::memory_order_relaxed));
    return true;
  }

  // The thread stops running it (its samples were added before). The last
  // fragment to close after end() delivers; the last reference frees.
  void leave_fragment() noexcept { leave(one_reference + one_running); }

  // A fragment still open on its thread whose records another thread took over
  // (Fragment::take_records_over): it runs no more, so the request is delivered
  // without waiting for its thread, but it keeps its reference (that thread still
  // points at this state) until it closes there and calls release().
  void leave_running() noexcept { leave(one_running); }

  // A fragment's CPU or wall records: the log's records from its start, of every
  // kind the spans open on its thread asked for; the request takes those of its kinds.
  void add_stack_records(const ThreadStackSampler& sampler, const std::uint64_t* first, std::size_t words,
                         ProfileKinds kinds, std::uint64_t dropped) noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    SPANPROF_TRY {
      for (const ProfileKind kind : {ProfileKind::cpu, ProfileKind::wall}) {
        if (!kinds.contains(kind)) continue;
        Recorded& into = recorded_[static_cast<std::size_t>(kind)];
        if (kind == ProfileKind::cpu) into.dropped += dropped;
        into.period_ns = sampler.period_ns(kind);
        into.engine = sampler.engine_name(kind);
        append_stack_records(first, words, kind, into.records);
      }
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory adding a fragment's samples to its request; dropped");
    }
  }

  // A fragment's lock records (lock_log.hpp).
  void add_lock_records(const LockRecords& locks) noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    Recorded& into = recorded_[static_cast<std::size_t>(ProfileKind::lock)];
    into.engine = lock_engine_name;
    SPANPROF_TRY {
      into.records.insert(into.records.end(), locks.first, locks.first + locks.words);
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory adding a fragment's lock waits to its request; dropped");
    }
  }

  // Where a fragment's time went (Options::time_split): the request's is the sum.
  void add_time(const TimeSplit& split) noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    time_ += split;
  }

  // A fragment's heap records.
  void add_heap_records(HeapSpanResult& result) noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    Recorded& into = recorded_[static_cast<std::size_t>(ProfileKind::heap)];
    into.dropped += result.dropped;
    into.heap_interval_bytes = result.interval_bytes;
    into.engine = sampling_heap_engine_name();
    if (into.records.empty()) {
      into.records = std::move(result.records);
      return;
    }
    SPANPROF_TRY {
      into.records.insert(into.records.end(), result.records.begin(), result.records.end());
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "out of memory adding a fragment's heap samples to its request; dropped");
    }
  }

 private:
  RequestState() = default;
  ~RequestState() = default;

  static constexpr std::size_t room_offset() noexcept {
    return (sizeof(RequestState) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) *
           alignof(std::max_align_t);
  }
  void destroy() noexcept {
    this->~RequestState();
    ::operator delete(static_cast<void*>(this));
  }

  static constexpr std::uint64_t one_reference = 1;
  static constexpr std::uint64_t reference_mask = (std::uint64_t{1} << 24) - 1;
  static constexpr std::uint64_t one_running = std::uint64_t{1} << 24;
  static constexpr std::uint64_t running_mask = reference_mask << 24;
  static constexpr std::uint64_t ended_bit = std::uint64_t{1} << 48;
  static constexpr std::uint64_t delivered_bit = std::uint64_t{1} << 49;

  struct Recorded {
    std::vector<std::uint64_t> records;
    std::uint64_t dropped = 0;
    std::int64_t period_ns = 0;
    std::int64_t heap_interval_bytes = 0;
    const char* engine = "";
  };

  // Drops a running fragment, with its reference or not.
  void leave(std::uint64_t dropped) noexcept {
    std::uint64_t before = life_.load(std::memory_order_relaxed);
    std::uint64_t after;
    bool deliver_now;
    do {
      after = before - dropped;
      deliver_now = (after & running_mask) == 0 && (after & ended_bit) != 0 && (after & delivered_bit) == 0;
      // Delivering, it keeps a reference until done: nobody frees the state under it.
      if (deliver_now) after = (after + one_reference) | delivered_bit;
    } while (!life_.compare_exchange_weak(before, after, std::memory_order_acq_rel, std::memory_order_acquire));
    if (deliver_now) {
      (void)deliver(false);
      release();
      return;
    }
    if ((after & (reference_mask | running_mask)) == 0) {
      if ((after & delivered_bit) == 0) (void)deliver((after & ended_bit) == 0);
      destroy();
    }
  }

  TailDecision decide(std::int64_t duration) noexcept {
    if (!profiled_) {
      if (declined_ == TriggerVerdict::observe) trigger_->observe(name_hash_, duration);
      return TailDecision::discard();
    }
    if (discarded_.load(std::memory_order_relaxed)) return TailDecision::discard();
    const bool triggered = declined_ == TriggerVerdict::profile;
    if (!tail_policy_ && !trigger_ && !triggered) return TailDecision::keep_as(ProfileReason::sampled);
    SpanOutcome outcome{span_, std::string_view(name_, name_length_), duration,
                        errored_.load(std::memory_order_relaxed)};
    if (tail_policy_) {
      std::lock_guard<std::mutex> held(mutex_);
      outcome.time = time_;
    }
    return decide_at_end(tail_policy_.get(), trigger_.get(), triggered, name_hash_, outcome);
  }

  // Once per request, by the one thread that marked it delivered (or freed it): no
  // fragment runs any more, so the records are this thread's alone, without the
  // lock (every fragment added its records before its change of life_, which the
  // change that made this thread the deliverer read). True when a profile was
  // handed over.
  bool deliver(bool abandoned) noexcept {
    // Not profiled: ended, the trigger has its latency; abandoned, there is none to give.
    if (!profiled_) return false;
    if (abandoned) {
      count(Counter::requests_abandoned);
      end_ns_ = monotonic_now_ns();
      decision_ = decide(end_ns_ - start_ns_);
    }
    const std::int64_t duration = end_ns_ - start_ns_;
    const TailDecision decision = decision_;
    if (!decision.keep) {
      count(discarded_.load(std::memory_order_relaxed) ? Counter::discarded_explicitly
                                                        : Counter::discarded_by_tail_policy);
      return false;
    }
    count(kept_counter(decision.reason));
    bool handed_over = false, any_records = false;
    SpanIdentity identity{span_, std::string_view(name_, name_length_), decision.reason, start_unix_ns_, duration,
                          time_};
    for (const ProfileKind kind : {ProfileKind::cpu, ProfileKind::wall, ProfileKind::heap, ProfileKind::lock}) {
      Recorded& recorded = recorded_[static_cast<std::size_t>(kind)];
      if (!kinds_.contains(kind) || recorded.records.empty()) continue;
      any_records = true;
      const HandOver result = hand_over_profile(identity, kind, recorded.engine, [&recorded](CapturedProfile& pending) {
        pending.profile.period_ns = recorded.period_ns;
        pending.profile.heap_interval_bytes = recorded.heap_interval_bytes;
        pending.profile.dropped_samples = recorded.dropped;
        pending.packed_samples = std::move(recorded.records);
        return true;
      });
      handed_over = result == HandOver::handed_over || handed_over;
    }
    if (!any_records) kept_without_samples(decision.reason, duration);
    return handed_over;
  }

  std::atomic<std::uint64_t> life_{one_reference};  // the creator's handle
  std::atomic<bool> continuous_sampled_{false};
  SpanContext span_;
  char name_[max_name];
  std::size_t name_length_ = 0;
  ProfileKinds kinds_;
  std::uint64_t generation_ = 0;
  std::shared_ptr<TailPolicy> tail_policy_;
  std::shared_ptr<AdaptiveTrigger> trigger_;
  // What the trigger made of it when the head sampler declined it: profiled
  // because the trigger asked for its name, or timed only (none: sampled).
  TriggerVerdict declined_ = TriggerVerdict::none;
  std::uint64_t name_hash_ = 0;
  bool profiled_ = true;
  bool labels_ = false;
  std::int64_t start_ns_ = 0;
  std::int64_t start_unix_ns_ = 0;
  // Written once by the thread that claimed the end, published by the ended bit.
  std::atomic<bool> end_claimed_{false};
  std::int64_t end_ns_ = 0;
  TailDecision decision_;
  std::atomic<bool> errored_{false};
  std::atomic<bool> discarded_{false};
  std::mutex mutex_;  // the records: fragments on several threads may close at once
  Recorded recorded_[profile_kind_count];
  TimeSplit time_;  // the fragments' that closed, summed
  ThreadContextRecord thread_context_;  // written once, before any fragment runs
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_REQUEST_STATE_HPP_
