// Internal. The slow paths of a guard (guard_core.hpp): compiled once per
// program, with the runtime (config.hpp), never in the files that open guards.
#ifndef SPANPROF_DETAIL_GUARD_CORE_INL_HPP_
#define SPANPROF_DETAIL_GUARD_CORE_INL_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/detail/capture/classic_cpu_engine.hpp>
#include <spanprof/detail/capture/classic_heap_engine.hpp>
#include <spanprof/detail/capture/heap_sampler.hpp>
#include <spanprof/detail/capture/lock_log.hpp>
#include <spanprof/detail/capture/lock_waits.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/span_labels.hpp>
#include <spanprof/detail/capture/stack_sampler.hpp>
#include <spanprof/detail/capture/thread_times.hpp>
#include <spanprof/detail/capture/wall_ticker.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/guard_core.hpp>
#include <spanprof/detail/hand_over.hpp>
#include <spanprof/detail/request_state.hpp>
#include <spanprof/detail/runtime/running_config.hpp>
#include <spanprof/detail/span_decision.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/tail_policy.hpp>

#if SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>
#include <utility>

#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

void config_for_first_guard() noexcept {
  GuardHostState& state = guard_host_state();
  if (GuardHost* host = state.host.load(std::memory_order_acquire)) {
    host->start_for_guard();
    return;
  }
  if (!state.reported_missing.exchange(true, std::memory_order_relaxed)) {
    report_error(ErrorCode::invalid_configuration, "a guard opened before spanprof's runtime was set up; not profiled");
  }
}

void make_thread_owners() noexcept {
  (void)&stack_sampler_owner;
  (void)&heap_log_owner;
  (void)&span_label_stack_owner;
  (void)this_thread_counters();
}

bool head_sampler_declines(const GuardGate& gate, const SpanContext& span, std::string_view span_name) noexcept {
  return !running_config(gate).head_sampler->should_profile(span, span_name);
}

void GuardCore::open_profiled(const GuardGate& gate, ConfigReader& reader, std::uint64_t inside,
                              const SpanContext& span, std::string_view span_name, ProfileKinds kinds,
                              bool configured) noexcept {
  if (SPANPROF_UNLIKELY(!span.valid())) {
    reader.leave(inside);
    report_error(ErrorCode::invalid_span_context, "a guard was given an invalid trace or span id; not profiled");
    return;
  }
  const RunningConfig& config = running_config(gate);
  prepare(config, reader);
  reader.leave(inside);
  if (gate.labels_spans) label_span(span, span_name);
  begin(config, span, span_name, configured ? config.profiles : kinds, false);
}

// The members a guard that opened nothing never touches are set here rather than
// by initializers, so that the turned-down guard writes only its few state bytes.
// Pins the configuration until unpin(): a restart does not free it under us.
inline void GuardCore::prepare(const RunningConfig& config, ConfigReader& reader) noexcept {
  reader.pin(config.sampler.generation);
  pins_ = &reader;
  config_ = &config;
  triggered_ = false;
  discarded_ = false;
  moved_ = false;
  keep_ = true;
  reason_ = ProfileReason::sampled;
  name_length_ = 0;
  uncaught_at_open_ = 0;
  sampler_ = nullptr;
  start_ns_ = 0;
  duration_ns_ = -1;
  name_hash_ = 0;
  user_span_ = nullptr;
  span_hooks_ = nullptr;
  ticket_ = SpanSlotTicket{};
  heap_record_ = HeapActiveSpan{};
  span_ = SpanContext{};
  fragment_ = false;
  timed_ = false;
  split_read_ = false;
}

// The head sampler said no; the adaptive trigger may still want this span, and
// feeds on the latency of one span in `observe_one_in` per thread.
void GuardCore::declined(const GuardGate& gate, ConfigReader& reader, const SpanContext& span,
                         std::string_view span_name, ProfileKinds kinds, bool configured) noexcept {
  const RunningConfig& config = running_config(gate);
  if (gate.labels_spans) label_span(span, span_name);
  if (!gate.has_trigger) return;
  std::uint64_t name_hash = 0;
  const TriggerVerdict verdict = trigger_verdict(*config.trigger, span, span_name, name_hash);
  if (verdict == TriggerVerdict::none) return;
  prepare(config, reader);
  name_hash_ = name_hash;
  if (verdict == TriggerVerdict::profile) {
    begin(config, span, span_name, configured ? config.profiles : kinds, true);
    return;
  }
  observe_only_ = true;
  start_ns_ = monotonic_now_ns();
}

SPANPROF_NOINLINE void GuardCore::begin(const RunningConfig& config, const SpanContext& span, std::string_view span_name,
                      ProfileKinds kinds, bool triggered) noexcept {
  span_ = span;
  triggered_ = triggered;
  // Only a tail policy asks whether the span failed; the count is a call into the
  // C++ runtime, not worth making for nobody.
  if (config.tail_policy) uncaught_at_open_ = std::uncaught_exceptions();
  name_length_ = static_cast<std::uint8_t>(span_name.size() < max_span_name ? span_name.size() : max_span_name);
  copy_span_name(name_, span_name.data(), name_length_);
  const bool classic_cpu = kinds.contains(ProfileKind::cpu) && config.cpu_engine == CpuEngine::classic;
  if (SPANPROF_UNLIKELY(classic_cpu)) open_classic();
  // The thread's stack sampler records CPU ticks (sampling engine) and wall ticks.
  ProfileKinds sampled;
  if (kinds.contains(ProfileKind::cpu) && !classic_cpu) sampled = sampled | cpu;
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall))) sampled = sampled | wall;
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::lock))) sampled = sampled | lock;
  // One clock read opens a sampled span: its start, and the moment the thread's
  // outermost span changed when the ticker watches the thread.
  std::int64_t opened_ns = -1;
  if (!sampled.empty()) opened_ns = open_sampling(config, sampled);
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::heap))) open_heap(config);
  if (active()) {
    count(Counter::profiles_started);
    // The classic engines take milliseconds to start (the heap's may be one): the
    // span starts once they run.
    const bool slow_engines = classic_cpu || kinds.contains(ProfileKind::heap);
    start_ns_ = SPANPROF_LIKELY(opened_ns >= 0 && !slow_engines) ? opened_ns : monotonic_now_ns();
    // Right after the clock read that started it: the split's parts and the span's
    // elapsed time cover the same stretch.
    if (SPANPROF_UNLIKELY(config.time_split)) read_times_at_open();
  } else {
    unpin();  // nothing to close: the destructor will not look at the configuration
  }
}

inline void GuardCore::unpin() noexcept { pins_->unpin(config_->sampler.generation); }

inline bool GuardCore::failed() const noexcept {
  return errored_ || std::uncaught_exceptions() > uncaught_at_open_ ||
         (span_hooks_ != nullptr && span_hooks_->failed != nullptr && span_hooks_->failed(user_span_));
}

void GuardCore::open_fragment(RequestState& request) noexcept {
  ThreadCounters* thread = guard_thread();
  if (SPANPROF_UNLIKELY(thread == nullptr)) return;
  ConfigReader& reader = thread->config_reader;
  std::uint64_t inside;
  const GuardGate* gate = enter_config_section(reader, inside);
  // Restarted since the request began: its samples would not be comparable.
  if (SPANPROF_LIKELY(gate != nullptr && running_config(*gate).sampler.generation == request.generation()))
    begin_fragment(running_config(*gate), request, request.kinds());
  reader.leave(inside);
}

// What a fragment records: the request's kinds, with the sampling engines only
// (the classic ones profile the whole process, not one thread's turn). It reads
// the configuration only here, inside the thread's reading section, and nothing of
// it at close: unlike a guard's, its configuration is not pinned. It sets only
// what its close reads: a turn of an async request costs a few dozen nanoseconds.
inline void GuardCore::begin_fragment(const RunningConfig& config, RequestState& request, ProfileKinds kinds) noexcept {
  if (config.labels_spans) label_span(request.span(), request.name());
  request_ = &request;
  fragment_ = true;
  pins_ = nullptr;
  config_ = nullptr;
  keep_ = true;
  moved_ = false;
  reason_ = ProfileReason::sampled;  // the request decides, and says if it is kept without a sample
  duration_ns_ = -1;
  timed_ = false;
  split_read_ = false;
  ProfileKinds sampled;
  if (kinds.contains(ProfileKind::cpu) && config.cpu_engine == CpuEngine::sampling) sampled = sampled | cpu;
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall))) sampled = sampled | wall;
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::lock))) sampled = sampled | lock;
  if (!sampled.empty()) open_sampling(config, sampled);
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::heap)) && config.heap_engine == HeapEngine::sampling)
    open_heap(config);
  if (SPANPROF_UNLIKELY(config.time_split) && active()) read_times_at_open();
}

// The span's times, and its start at the moment they were read: the split and the span's elapsed time cover
// the same stretch. Kept in the span's slot of the thread's sampler (a guard lives in coroutine frames and
// stays small): spans without one (the classic engine's, heap-only ones) are not timed.
SPANPROF_NOINLINE void GuardCore::read_times_at_open() noexcept {
  if (state_ != State::sampling) return;
  ThreadTimes& times = sampler_->span(ticket_).times_at_open;
  timed_ = read_thread_times(times);
  if (timed_) start_ns_ = times.at_ns;
}

// A closing guard's split, from its close's read to its hand-over, on its thread.
inline thread_local TimeSplit closing_time_split;

// At the close, before the tail policy (it may keep a span for where its time
// went) or for the request a fragment adds to; otherwise at the hand-over, when
// the span has a profile: most of a busy server's short requests at 100 Hz have
// none, and their close then costs no system call. The span's slot still holds
// the open's times then (popped, not reused before this thread's next span). A
// guard that closes on another thread than it opened has no split: the times are
// per thread.
SPANPROF_NOINLINE void GuardCore::split_time_at_close() noexcept {
  ThreadTimes now;
  split_read_ = true;
  if (current_stack_sampler != sampler_ || !read_thread_times(now)) {
    timed_ = false;
    return;
  }
  if (duration_ns_ < 0) duration_ns_ = now.at_ns - start_ns_;
  closing_time_split = time_split_between(sampler_->span(ticket_).times_at_open, now);
}

void GuardCore::finish() noexcept {
  if (labelled_) unlabel();
  if (!active() && !observe_only_) return;  // it only labelled the continuous profile
  decide_and_close();
  // Closed on another thread (a coroutine resumed elsewhere): the pin is the
  // opening thread's, which only that thread may change, and it may have exited.
  // It stays, and keeps that configuration alive for good: a few hundred bytes
  // per restart of spanprof, against a configuration freed under a reader.
  if (SPANPROF_LIKELY(pins_ == &thread_counters.config_reader)) unpin();
}

// The span ended: decide whether to keep what it recorded, then close the engines.
inline void GuardCore::decide_and_close() noexcept {
  // What a tick brings from here on is the span's code's, not the close's.
  if (state_ == State::sampling && current_stack_sampler == sampler_) sampler_->begin_close(ticket_, this);
  if (SPANPROF_UNLIKELY(timed_) && (fragment_ || config_->tail_policy)) split_time_at_close();
  if (fragment_) {
    // A fragment: the request decides when it ends, with all its fragments.
    if (SPANPROF_UNLIKELY(timed_)) request_->add_time(closing_time_split);
    close_engines();
    return;
  }
  const RunningConfig& config = *config_;
  if (observe_only_) {
    observe_only_ = false;
    config.trigger->observe(name_hash_, monotonic_now_ns() - start_ns_);
    return;
  }
  if (SPANPROF_UNLIKELY(discarded_)) {
    count(Counter::discarded_explicitly);
    keep_ = false;
    close_engines();
    return;
  }
  if (!config.tail_policy && !config.trigger && !triggered_) {
    // Nothing to decide: kept as sampled; the duration is read only if there is
    // a profile to hand over.
    count(kept_counter(ProfileReason::sampled));
    close_engines();
    return;
  }
  const std::int64_t duration = duration_ns_ >= 0 ? duration_ns_ : monotonic_now_ns() - start_ns_;
  SpanOutcome outcome{span_, std::string_view(name_, name_length_), duration,
                      config.tail_policy ? failed() : false};
  if (timed_) outcome.time = closing_time_split;
  const bool marked = config.tail_policy && state_ == State::sampling && current_stack_sampler == sampler_;
  if (marked) sampler_->pause_close();  // the policy is the program's code
  const TailDecision decision =
      decide_at_end(config.tail_policy.get(), config.trigger.get(), triggered_, name_hash_, outcome);
  if (marked) sampler_->begin_close(ticket_, this);
  if (timed_) closing_time_split = outcome.time;  // a policy that closed a guard of its own wrote it
  if (decision.keep) count(kept_counter(decision.reason));
  else count(Counter::discarded_by_tail_policy);
  keep_ = decision.keep;
  reason_ = decision.reason;
  duration_ns_ = duration;
  close_engines();
}

inline void GuardCore::close_engines() noexcept {
  // Heap first: the CPU hand-over allocates, and those allocations are the SDK's.
  if (heap_state_ != State::idle) close_heap();
  if (classic_cpu_) close_classic();
  if (state_ != State::idle) close_sampling();
  // The span learns of its profile before the guard returns, so it can carry the
  // link (pyroscope.profile.id) when it is exported after.
  if (handed_over_ && !fragment_ && span_hooks_ != nullptr && span_hooks_->profile_kept != nullptr)
    span_hooks_->profile_kept(user_span_);
}

// The continuous profile's samples carry the span while it is open (span_labels.hpp), profiled or not; one
// that labelled a sample learns of it as of a kept profile (pyroscope.profile.id); a fragment tells its request.
inline void GuardCore::label_span(const SpanContext& span, std::string_view span_name) noexcept {
  span_hooks_ = nullptr;  // keep_span_for_close sets it after, for a span read at close
  labelled_ = push_span_label(this, span, span_name);
}

inline void GuardCore::unlabel() noexcept {
  labelled_ = false;
  if (!pop_span_label(this)) return;
  if (fragment_) request_->note_continuous_sample();
  else if (span_hooks_ != nullptr && span_hooks_->profile_kept != nullptr) span_hooks_->profile_kept(user_span_);
}

void GuardCore::stop_sampling_when(const std::atomic<bool>& flag) noexcept {
  if (state_ != State::idle) sampler_->span(ticket_).stop = &flag;
}

inline std::int64_t GuardCore::open_sampling(const RunningConfig& config, ProfileKinds kinds) noexcept {
  ThreadStackSampler* sampler = current_stack_sampler;
  if (SPANPROF_UNLIKELY(sampler == nullptr || sampler->settings().generation != config.sampler.generation)) {
    // New settings (spanprof::start was called again) apply from this thread's
    // next outermost span: replacing the sampler now would free the log that
    // the open outer guards still read.
    if (sampler == nullptr || !sampler->has_open_span()) {
      if (config.sampler.signal_number == 0) return -1;
      sampler = make_stack_sampler(config.sampler);
      if (sampler == nullptr) return -1;
    }
  }
  if (kinds.contains(ProfileKind::cpu) && SPANPROF_UNLIKELY(!sampler->armed())) {
    if (!sampler->has_source() || !sampler->arm()) kinds = kinds.without(ProfileKind::cpu);
    if (kinds.empty()) return -1;
  }
  sampler_ = sampler;
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall))) open_wall(*sampler, config);
  // The ticker watches POSIX-timer threads for points the kernel is late with. A
  // ticker that watches none is woken, and the first one started (a thread), before the span
  // is on the stack: none of that is the span's (starting a thread is slow where
  // the kernel is emulated: docs/arm64.md).
  if (kinds.contains(ProfileKind::cpu) && sampler->settings().watch_cpu &&
      SPANPROF_UNLIKELY(ticker_watches_none().load(std::memory_order_relaxed)) &&
      sampler->source() == CpuSampleSource::posix_timer && ticker_watches_none().exchange(false, std::memory_order_acq_rel))
    wall_ticker().watch_cpu();
  // The span starts here, once its sampler is made and the ticker runs: a thread's
  // first span makes its sampler (its log, its timer), none of it the span's.
  const std::int64_t opened_ns = monotonic_now_ns();
  ticket_ = sampler->push(kinds, opened_ns, this);
  if (SPANPROF_UNLIKELY(!ticket_.valid())) {
    too_deep(*sampler, kinds);
    return -1;
  }
  if (kinds.contains(ProfileKind::cpu)) sampler->counters().add(Counter::cpu_guards_opened, 1);
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::lock)))
    open_lock_recording(*sampler, ticket_, config.sampler.wall_period_ns, fragment_ ? request_->span() : span_,
                        fragment_ ? request_->name() : std::string_view(name_, name_length_));
  state_ = State::sampling;
  return opened_ns;
}

SPANPROF_NOINLINE void GuardCore::too_deep(ThreadStackSampler& sampler, ProfileKinds kinds) noexcept {
  if (kinds.contains(ProfileKind::wall) && sampler.wall_span_closed(monotonic_now_ns()))
    wall_ticker().thread_ended_wall_span();
  report_error(ErrorCode::sample_buffer_full, "more than 32 profiled spans open on one thread; this one is not profiled");
}

SPANPROF_NOINLINE void GuardCore::open_wall(ThreadStackSampler& sampler, const RunningConfig& config) noexcept {
  if (sampler.wall_span_opened(monotonic_now_ns()))
    wall_ticker().thread_started_wall_span(config.sampler.wall_period_ns);
  sampler.counters().add(Counter::wall_guards_opened, 1);
}

inline void GuardCore::close_sampling() noexcept {
  ThreadStackSampler* sampler = sampler_;
  state_ = State::idle;
  if (SPANPROF_UNLIKELY(current_stack_sampler != sampler)) return close_sampling_elsewhere(sampler);
  const ActiveSpan& span = sampler->span(ticket_);
  const ProfileKinds kinds = span.kinds;
  const std::size_t log_start = span.log_start;
  const std::uint64_t dropped_at_start = span.dropped_at_start;
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::lock)))
    close_internal_lock_watch(sampler->internal_lock_waits(), &sampler->counters());
  const LockRecords locks = kinds.contains(ProfileKind::lock) ? lock_records_since(span.lock_log_start) : LockRecords{};
  // The wall time since the last sample goes to it before the span leaves.
  if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall)) && sampler->wall_span_closed(monotonic_now_ns()))
    wall_ticker().thread_ended_wall_span();
  if (SPANPROF_UNLIKELY(!sampler->pop(ticket_)))
    return moved("a profiled span closed before a span opened after it on its thread (interleaved coroutines?): "
                 "its samples are dropped (docs/async.md)");
  const std::size_t used = sampler->used_words();
  const std::uint64_t dropped = sampler->dropped() - dropped_at_start;
  if (!keep_) {
    // Discarded by the tail policy: nothing is copied, symbolized or sent.
  } else if (used > log_start || dropped != 0 || locks.words != 0) {
    hand_over(sampler, used, dropped, kinds, log_start, locks);
  } else {
    sampler->counters().add(Counter::spans_without_samples, 1);
    // A fragment's request counts its own when it ends, over all its fragments.
    if (SPANPROF_UNLIKELY(reason_ != ProfileReason::sampled) && !fragment_)
      kept_without_samples(reason_, duration_ns_);
  }
  sampler->span_closed();
}

// A fragment whose request ended on another thread, copied from that thread while
// the fragment stays open on its own (which holds the slot, so the log is neither
// reset nor freed under the copy): its records go to the request now, and its
// close on its own thread only frees the slot. False, touching nothing, when it
// records more than the thread's stack log (heap, or the classic engine).
bool GuardCore::take_records_elsewhere() noexcept {
  // A fragment's lock waits are in its own thread's lock log, which only that thread reads.
  if (!fragment_ || heap_state_ != State::idle || classic_cpu_) return false;
  if (state_ == State::sampling && sampler_->span(ticket_).kinds.contains(ProfileKind::lock)) return false;
  if (state_ == State::sampling) {
    ThreadStackSampler* sampler = sampler_;
    const ActiveSpan& span = sampler->span(ticket_);
    const std::size_t used = sampler->used_words_published();
    const std::uint64_t dropped = sampler->dropped() - span.dropped_at_start;
    if (used > span.log_start || dropped != 0) hand_over(sampler, used, dropped, span.kinds, span.log_start, {});
  }
  keep_ = false;
  return true;
}

// The guard ends on another thread than it began (a coroutine resumed on another
// thread of a pool): that thread's samples are its own to read, so this span's
// are dropped. Its slot is marked dead, the last thing done to the sampler: the
// opening thread frees it, and never reads this guard again.
SPANPROF_NOINLINE void GuardCore::close_sampling_elsewhere(ThreadStackSampler* sampler) noexcept {
  if (sampler->span(ticket_).kinds.contains(ProfileKind::wall) && sampler->wall_span_closed_elsewhere())
    wall_ticker().thread_ended_wall_span();
  if (sampler->span(ticket_).kinds.contains(ProfileKind::lock))
    close_internal_lock_watch(sampler->internal_lock_waits(), nullptr);
  sampler->close_elsewhere(ticket_);
  moved("a profiled span closed on another thread than it opened (a coroutine resumed elsewhere?): its samples "
        "are dropped (docs/async.md)");
}

inline void GuardCore::moved(const char* what) noexcept {
  if (moved_) return;  // one span, counted once (its CPU and heap parts both moved)
  moved_ = true;
  count(Counter::spans_moved);
  report_error(ErrorCode::span_moved, what);
}

// Copies this span's records out of the log, one profile per kind it asked for
// (a fragment's go to its request).
SPANPROF_NOINLINE void GuardCore::hand_over(ThreadStackSampler* sampler, std::size_t used, std::uint64_t dropped,
                                            ProfileKinds kinds, std::size_t log_start, LockRecords locks) noexcept {
  if (dropped != 0) report_samples_dropped(dropped, "samples dropped: the per-thread sample buffer is full");
  if (fragment_) {
    if (locks.words != 0) request_->add_lock_records(locks);
    return request_->add_stack_records(*sampler, sampler->words() + log_start, used - log_start, kinds, dropped);
  }
  if (locks.words != 0) {
    hand_over(ProfileKind::lock, lock_engine_name, [&locks](CapturedProfile& pending) {
      pending.packed_samples.assign(locks.first, locks.first + locks.words);
      return true;
    });
  }
  if (used <= log_start) return;
  const std::uint64_t* first = sampler->words() + log_start;
  const std::size_t words = used - log_start;
  // The log holds what the spans around this one (and inside it) asked for too:
  // each profile takes the records of its kind.
  for (const ProfileKind kind : {ProfileKind::cpu, ProfileKind::wall}) {
    if (!kinds.contains(kind)) continue;
    const HandOver result = hand_over(kind, sampler->engine_name(kind), [&](CapturedProfile& pending) {
      pending.packed_samples.reserve(words);
      append_stack_records(first, words, kind, pending.packed_samples);
      if (pending.packed_samples.empty()) return false;
      pending.profile.period_ns = sampler->period_ns(kind);
      if (kind == ProfileKind::cpu) pending.profile.dropped_samples = dropped;
      return true;
    });
    if (result == HandOver::nothing_recorded) sampler->counters().add(Counter::spans_without_samples, 1);
  }
}

inline SpanIdentity GuardCore::identity() noexcept {
  if (SPANPROF_UNLIKELY(timed_ && !split_read_)) split_time_at_close();
  if (duration_ns_ < 0) duration_ns_ = monotonic_now_ns() - start_ns_;
  SpanIdentity identity{span_, std::string_view(name_, name_length_), reason_, realtime_now_ns() - duration_ns_,
                        duration_ns_};
  if (timed_) identity.time = closing_time_split;
  return identity;
}

SPANPROF_NOINLINE void GuardCore::open_classic() noexcept {
  switch (classic_engine_start()) {
    case ClassicStart::started:
      count(Counter::cpu_guards_opened);
      classic_cpu_ = true;
      return;
    case ClassicStart::busy:
      count(Counter::classic_busy);
      report_error(ErrorCode::profiler_busy, "the classic engine is profiling another scope; this one is not profiled");
      return;
    case ClassicStart::failed:
      return;
  }
}

// Hands this span's profile of `kind` over, `attach` adding what the engine
// recorded; false when it could not (out of memory, reported).
template <class Attach>
HandOver GuardCore::hand_over(ProfileKind kind, const char* engine, Attach&& attach) noexcept {
  const HandOver result = hand_over_profile(identity(), kind, engine, std::forward<Attach>(attach));
  if (result == HandOver::handed_over) handed_over_ = true;
  return result;
}

SPANPROF_NOINLINE void GuardCore::close_classic() noexcept {
  classic_cpu_ = false;
  classic_engine_stop([this](const char* file) noexcept {
    if (!keep_) {
      ::unlink(file);
      return;
    }
    const HandOver result = hand_over(ProfileKind::cpu, "classic", [file](CapturedProfile& pending) {
      pending.gperftools_cpu_file = file;
      return true;
    });
    if (result == HandOver::out_of_memory) ::unlink(file);
  });
}

SPANPROF_NOINLINE void GuardCore::open_heap(const RunningConfig& config) noexcept {
  if (config.heap_engine == HeapEngine::classic) {
    switch (classic_heap_start()) {
      case ClassicHeapStart::started:
        count(Counter::heap_guards_opened);
        heap_state_ = State::classic;
        return;
      case ClassicHeapStart::busy:
        count(Counter::classic_busy);
        report_error(ErrorCode::profiler_busy,
                     "gperftools' heap profiler is profiling another scope; this one gets no heap profile");
        return;
      case ClassicHeapStart::failed:
        return;
    }
  }
  if (open_heap_span(heap_record_, config.heap)) heap_state_ = State::sampling;
}

SPANPROF_NOINLINE void GuardCore::close_heap() noexcept {
  const State state = heap_state_;
  heap_state_ = State::idle;
  if (state == State::classic) {
    char* text = classic_heap_stop();
    if (text == nullptr) {
      if (keep_) report_error(ErrorCode::profiler_failed, "GetHeapProfile returned nothing");
      return;
    }
    if (!keep_) {
      std::free(text);
      return;
    }
    hand_over(ProfileKind::heap, "classic", [text](CapturedProfile& pending) {
      pending.gperftools_heap_text = text;
      return true;
    });
    std::free(text);
    return;
  }
  HeapSpanResult result;
  if (SPANPROF_UNLIKELY(!close_heap_span(heap_record_, result, keep_)))
    return moved(heap_record_.owner != &heap_thread
                     ? "a heap-profiled span closed on another thread than it opened (a coroutine resumed "
                       "elsewhere?): its samples are dropped (docs/async.md)"
                     : "a heap-profiled span closed before a span opened after it on its thread: its samples are "
                       "dropped (docs/async.md)");
  if (result.dropped != 0 && keep_)
    report_samples_dropped(result.dropped, "heap samples dropped: the per-thread heap log is full");
  if (!keep_ || result.records.empty()) return;  // discarded, or nothing allocated was sampled
  if (fragment_) return request_->add_heap_records(result);
  hand_over(ProfileKind::heap, sampling_heap_engine_name(), [&result](CapturedProfile& pending) {
    pending.profile.heap_interval_bytes = result.interval_bytes;
    pending.profile.dropped_samples = result.dropped;
    pending.packed_samples = std::move(result.records);
    return true;
  });
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME

#endif  // SPANPROF_DETAIL_GUARD_CORE_INL_HPP_
