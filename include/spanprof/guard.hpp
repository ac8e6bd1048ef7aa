// ScopedProfile: profiles exactly the scope it lives in and labels the profile
// with the span it was given.
//
//   void handle(Request& r, const Span& span) {
//     spanprof::ScopedProfile guard(span);
//     ...
//   }  // samples handed to the background worker; nothing else happens here
//
// Cost on the request thread (bench/): a guard the head sampler turns down costs a
// few nanoseconds; a profiled span that took no sample costs a few dozen
// nanoseconds (two clock reads and a thread-local push and pop). Only a span that
// took samples copies them out and hands them over.
//
// With `spanprof::heap` (or Options::profiles) the guard also records what the
// scope allocated, through tcmalloc's hooks (docs/heap.md); that adds a lock-free
// counter update at open and close.
//
// Guards nest: a parent's profile includes its children's samples, as a parent
// span's time includes its children's. A guard profiles the thread that opened it:
// one closed on another thread (a coroutine resumed elsewhere) is safe, but its
// samples are dropped and counted (docs/async.md). A request that hops threads is
// profiled with spanprof::RequestProfile and its fragments (request.hpp).
#ifndef SPANPROF_GUARD_HPP_
#define SPANPROF_GUARD_HPP_

#include <spanprof/base/counters.hpp>
#include <spanprof/capture/captured_profile.hpp>
#include <spanprof/capture/classic_cpu_engine.hpp>
#include <spanprof/capture/classic_heap_engine.hpp>
#include <spanprof/capture/stack_sampler.hpp>
#include <spanprof/capture/heap_sampler.hpp>
#include <spanprof/capture/wall_ticker.hpp>
#include <spanprof/config.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/request_state.hpp>
#include <spanprof/runtime/guard_host.hpp>
#include <spanprof/span/span_adapter.hpp>
#include <spanprof/span/span_context.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <string_view>
#include <type_traits>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED

namespace detail {
// Turned-down guards of this thread left before one is timed for the adaptive trigger.
inline thread_local std::uint32_t trigger_observe_countdown = 0;
}  // namespace detail

class ScopedProfile {
 public:
  // Longer span names are cut to this many bytes: the name is copied into the
  // guard so that nothing is allocated when the span ends without samples.
  static constexpr std::size_t max_span_name = 127;

  // Records what spanprof::Options::profiles says (CPU unless configured).
  template <class Span>
  SPANPROF_ALWAYS_INLINE explicit ScopedProfile(const Span& span) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>) start(span, span_adapter<std::decay_t<Span>>::name(span), {}, true);
  }

  // Records the given profiles, e.g. `spanprof::cpu | spanprof::heap`.
  template <class Span>
  SPANPROF_ALWAYS_INLINE ScopedProfile(const Span& span, ProfileKinds kinds) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>) start(span, span_adapter<std::decay_t<Span>>::name(span), kinds, false);
  }

  // With the span's name given here: for span types that cannot tell it (an
  // OpenTelemetry span, a bare SpanContext), or to name it differently.
  template <class Span>
  SPANPROF_ALWAYS_INLINE ScopedProfile(const Span& span, std::string_view span_name) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>) start(span, span_name, {}, true);
  }
  template <class Span>
  SPANPROF_ALWAYS_INLINE ScopedProfile(const Span& span, std::string_view span_name, ProfileKinds kinds) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>) start(span, span_name, kinds, false);
  }

  // A span the guard reads again when it closes (its status, or to link it to its
  // profile) must outlive the guard: a temporary would be gone by then.
  template <class Span, class = std::enable_if_t<detail::reads_span_at_close_v<Span>>>
  explicit ScopedProfile(const Span&&) noexcept {
    detail::require_lasting_span<Span>();
  }
  template <class Span, class Second, class = std::enable_if_t<detail::reads_span_at_close_v<Span>>>
  ScopedProfile(const Span&&, Second&&) noexcept {
    detail::require_lasting_span<Span>();
  }
  template <class Span, class = std::enable_if_t<detail::reads_span_at_close_v<Span>>>
  ScopedProfile(const Span&&, std::string_view, ProfileKinds) noexcept {
    detail::require_lasting_span<Span>();
  }

  ~ScopedProfile() {
    if (SPANPROF_UNLIKELY(state_ != State::idle || heap_state_ != State::idle || classic_cpu_ || observe_only_))
      finish();
  }

  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  ScopedProfile(ScopedProfile&&) = delete;
  ScopedProfile& operator=(ScopedProfile&&) = delete;

  // True when this scope is being profiled (sampled in, an engine running).
  bool active() const noexcept { return state_ != State::idle || heap_state_ != State::idle || classic_cpu_; }

  // True when closing this guard does something: it is active, or the adaptive
  // trigger is timing the span. A guard that is not may be destroyed at once.
  bool pending_close() const noexcept { return active() || observe_only_; }

  // Marks the span as failed, for tail policies that keep errored spans. An
  // exception leaving the scope marks it without this.
  void set_error(bool failed = true) noexcept { errored_ = failed; }

  // Drops whatever this scope recorded when it closes: nothing is kept, symbolized
  // or sent (counted in Stats::discarded_explicitly).
  void discard() noexcept { discarded_ = true; }

  // Ends the profiled scope now rather than at the end of the C++ scope: decides,
  // hands the profile over, and leaves the guard inactive. Must run on the thread
  // that opened it, after every guard opened inside it has closed.
  void close() noexcept {
    if (pending_close()) finish();
  }

  // After close() (or while the destructor runs a span adapter's hook): whether a
  // profile of this scope was handed to delivery. A scope that took no sample, or
  // that the tail policy discarded, hands nothing over.
  bool profile_handed_over() const noexcept { return handed_over_; }

  // While `flag` is set, samples that land in this scope are not recorded. For a
  // span whose end may come from another thread (the OpenTelemetry integration
  // sets it there): the flag must outlive the guard.
  void stop_sampling_when(const std::atomic<bool>& flag) noexcept {
    if (state_ != State::idle) sampler_->span(ticket_).stop = &flag;
  }

 private:
  friend class Fragment;
  enum class State : std::uint8_t { idle, sampling, classic };

  // A fragment of `request` (request.hpp): records what this thread runs of it, and
  // hands the samples to the request when it closes. Null: records nothing.
  explicit ScopedProfile(detail::RequestState* request) noexcept {
    if (request != nullptr) open_fragment(*request);
  }
  void open_fragment(detail::RequestState& request) noexcept {
    detail::ThreadCounters* thread = detail::guard_thread();
    if (SPANPROF_UNLIKELY(thread == nullptr)) return;
    detail::ConfigReader& reader = thread->config_reader;
    std::uint64_t inside;
    const detail::RunningConfig* config = detail::enter_config_section(reader, inside);
    // Restarted since the request began: its samples would not be comparable.
    if (SPANPROF_LIKELY(config != nullptr && config->sampler.generation == request.generation()))
      begin_fragment(*config, request, request.kinds());
    reader.leave(inside);
  }

  static std::int64_t monotonic_ns() noexcept { return detail::monotonic_now_ns(); }
  static std::int64_t realtime_ns() noexcept { return detail::realtime_now_ns(); }

  // Inlined into the guard's constructor: the turned-down guard is the common case
  // and must stay a few instructions.
  SPANPROF_ALWAYS_INLINE void open(const SpanContext& span, std::string_view span_name, ProfileKinds kinds,
                                   bool configured) noexcept {
    detail::ThreadCounters* thread = detail::guard_thread();
    if (SPANPROF_UNLIKELY(thread == nullptr)) return;
    detail::ConfigReader& reader = thread->config_reader;
    std::uint64_t inside;
    const detail::RunningConfig* config = detail::enter_config_section(reader, inside);
    if (SPANPROF_UNLIKELY(config == nullptr)) {
      reader.leave(inside);
      return;
    }
    // The head sampler sees every span (a ratio sampler reads the trace id as it
    // is); ids are checked only for a span about to be profiled.
    if (detail::head_declines(*config, span, span_name)) {
      thread->add(detail::Counter::head_declined, 1);
      if (SPANPROF_UNLIKELY(config->trigger != nullptr)) declined(*config, reader, span, span_name, kinds, configured);
      reader.leave(inside);
      return;
    }
    if (SPANPROF_UNLIKELY(!span.valid())) {
      reader.leave(inside);
      report_error(ErrorCode::invalid_span_context, "a guard was given an invalid trace or span id; not profiled");
      return;
    }
    prepare(*config, reader);
    reader.leave(inside);
    begin(*config, span, span_name, configured ? config->profiles : kinds, false);
  }

  // The members a guard that opened nothing never touches are set here rather than
  // by initializers, so that the turned-down guard writes only its few state bytes.
  // Pins the configuration until unpin(): a restart does not free it under us.
  void prepare(const detail::RunningConfig& config, detail::ConfigReader& reader) noexcept {
    reader.pin(config.sampler.generation);
    pins_ = &reader;
    config_ = &config;
    triggered_ = false;
    errored_ = false;
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
    span_failed_ = nullptr;
    profile_kept_ = nullptr;
    ticket_ = detail::SpanSlotTicket{};
    heap_record_ = detail::HeapActiveSpan{};
    span_ = SpanContext{};
    request_ = nullptr;
  }

  // The head sampler said no; the adaptive trigger may still want this span, and
  // feeds on the latency of one span in `observe_one_in` per thread.
  SPANPROF_NOINLINE void declined(const detail::RunningConfig& config, detail::ConfigReader& reader,
                                  const SpanContext& span, std::string_view span_name, ProfileKinds kinds,
                                  bool configured) noexcept {
    AdaptiveTrigger& trigger = *config.trigger;
    std::uint64_t name_hash = 0;
    if (trigger.any_armed() && span.valid()) {
      name_hash = AdaptiveTrigger::hash_name(span_name);
      if (trigger.take(name_hash)) {
        prepare(config, reader);
        name_hash_ = name_hash;
        begin(config, span, span_name, configured ? config.profiles : kinds, true);
        return;
      }
    }
    std::uint32_t& countdown = detail::trigger_observe_countdown;
    if (countdown > 1) {
      --countdown;
      return;
    }
    countdown = trigger.options().observe_one_in;
    prepare(config, reader);
    name_hash_ = name_hash != 0 ? name_hash : AdaptiveTrigger::hash_name(span_name);
    observe_only_ = true;
    start_ns_ = monotonic_ns();
  }

  // Span names are a few bytes: copied in overlapping words. std::memcpy of a size
  // only known to be below max_span_name compiles to `rep movs`, whose start-up was
  // most of the opening guard's own time in a busy server (perf).
  static void copy_name(char* to, const char* from, std::size_t n) noexcept {
    if (n >= 16) {
      for (std::size_t at = 0; at + 16 <= n; at += 16) std::memcpy(to + at, from + at, 16);
      std::memcpy(to + n - 16, from + n - 16, 16);
    } else if (n >= 8) {
      std::memcpy(to, from, 8);
      std::memcpy(to + n - 8, from + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(to, from, 4);
      std::memcpy(to + n - 4, from + n - 4, 4);
    } else {
      for (std::size_t at = 0; at < n; ++at) to[at] = from[at];
    }
  }

  SPANPROF_NOINLINE void begin(const detail::RunningConfig& config, const SpanContext& span,
                               std::string_view span_name, ProfileKinds kinds, bool triggered) noexcept {
    span_ = span;
    triggered_ = triggered;
    uncaught_at_open_ = std::uncaught_exceptions();
    name_length_ = static_cast<std::uint8_t>(span_name.size() < max_span_name ? span_name.size() : max_span_name);
    copy_name(name_, span_name.data(), name_length_);
    const bool classic_cpu = kinds.contains(ProfileKind::cpu) && config.cpu_engine == CpuEngine::classic;
    if (SPANPROF_UNLIKELY(classic_cpu)) open_classic();
    // The thread's stack sampler records CPU ticks (sampling engine) and wall ticks.
    ProfileKinds sampled;
    if (kinds.contains(ProfileKind::cpu) && !classic_cpu) sampled = sampled | cpu;
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall))) sampled = sampled | wall;
    if (!sampled.empty()) open_sampling(config, sampled);
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::heap))) open_heap(config);
    if (active()) {
      detail::count(detail::Counter::profiles_started);
      start_ns_ = monotonic_ns();  // after the engines started: the classic ones take milliseconds
    } else {
      unpin();  // nothing to close: the destructor will not look at the configuration
    }
  }

  void unpin() noexcept { pins_->unpin(config_->sampler.generation); }

  template <class Span>
  SPANPROF_ALWAYS_INLINE void start(const Span& span, std::string_view span_name, ProfileKinds kinds,
                                    bool configured) noexcept {
    using Adapter = span_adapter<std::decay_t<Span>>;
    open(Adapter::context(span), span_name, kinds, configured);
    if constexpr (detail::reads_span_at_close_v<Span>) {
      if (!active()) return;
      user_span_ = &span;
      if constexpr (detail::has_span_status_v<Span>)
        span_failed_ = [](const void* s) noexcept { return Adapter::failed(*static_cast<const Span*>(s)); };
      if constexpr (detail::has_profile_kept_hook_v<Span>)
        profile_kept_ = [](const void* s) noexcept { Adapter::profile_kept(*static_cast<const Span*>(s)); };
    }
  }

  bool failed() const noexcept {
    return errored_ || std::uncaught_exceptions() > uncaught_at_open_ ||
           (span_failed_ != nullptr && span_failed_(user_span_));
  }

  // What a fragment records: the request's kinds, with the sampling engines only
  // (the classic ones profile the whole process, not one thread's turn). It reads
  // the configuration only here, inside the thread's reading section, and nothing of
  // it at close: unlike a guard's, its configuration is not pinned. It sets only
  // what its close reads: a turn of an async request costs a few dozen nanoseconds.
  void begin_fragment(const detail::RunningConfig& config, detail::RequestState& request, ProfileKinds kinds) noexcept {
    request_ = &request;
    pins_ = nullptr;
    config_ = nullptr;
    keep_ = true;
    moved_ = false;
    reason_ = ProfileReason::sampled;  // the request decides, and says if it is kept without a sample
    duration_ns_ = -1;
    ProfileKinds sampled;
    if (kinds.contains(ProfileKind::cpu) && config.cpu_engine == CpuEngine::sampling) sampled = sampled | cpu;
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall))) sampled = sampled | wall;
    if (!sampled.empty()) open_sampling(config, sampled);
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::heap)) && config.heap_engine == HeapEngine::sampling)
      open_heap(config);
  }

  SPANPROF_NOINLINE void finish() noexcept {
    decide_and_close();
    // Closed on another thread (a coroutine resumed elsewhere): the pin is the
    // opening thread's, which only that thread may change, and it may have exited.
    // It stays, and keeps that configuration alive for good: a few hundred bytes
    // per restart of spanprof, against a configuration freed under a reader.
    if (SPANPROF_LIKELY(pins_ == &detail::thread_counters.config_reader)) unpin();
  }

  // The span ended: decide whether to keep what it recorded, then close the engines.
  void decide_and_close() noexcept {
    if (request_ != nullptr) {
      // A fragment: the request decides when it ends, with all its fragments.
      close_engines();
      return;
    }
    const detail::RunningConfig& config = *config_;
    if (observe_only_) {
      observe_only_ = false;
      config.trigger->observe(name_hash_, monotonic_ns() - start_ns_);
      return;
    }
    if (SPANPROF_UNLIKELY(discarded_)) {
      detail::count(detail::Counter::discarded_explicitly);
      keep_ = false;
      close_engines();
      return;
    }
    if (!config.tail_policy && !config.trigger && !triggered_) {
      // Nothing to decide: kept as sampled; the duration is read only if there is
      // a profile to hand over.
      detail::count(detail::kept_counter(ProfileReason::sampled));
      close_engines();
      return;
    }
    const std::int64_t duration = monotonic_ns() - start_ns_;
    const std::string_view name(name_, name_length_);
    TailDecision decision = TailDecision::keep_as(ProfileReason::sampled);
    if (config.tail_policy) decision = config.tail_policy->decide(SpanOutcome{span_, name, duration, failed()});
    // A span the trigger asked for is kept, under the more telling reason if any.
    if (triggered_ && (!decision.keep || decision.reason == ProfileReason::sampled))
      decision = TailDecision::keep_as(ProfileReason::triggered);
    if (config.trigger) config.trigger->observe(name_hash_ ? name_hash_ : AdaptiveTrigger::hash_name(name), duration);
    if (decision.keep) detail::count(detail::kept_counter(decision.reason));
    else detail::count(detail::Counter::discarded_by_tail_policy);
    keep_ = decision.keep;
    reason_ = decision.reason;
    duration_ns_ = duration;
    close_engines();
  }

  void close_engines() noexcept {
    // Heap first: the CPU hand-over allocates, and those allocations are the SDK's.
    if (heap_state_ != State::idle) close_heap();
    if (classic_cpu_) close_classic();
    if (state_ != State::idle) close_sampling();
    // The span learns of its profile before the guard returns, so it can carry the
    // link (pyroscope.profile.id) when it is exported after.
    if (handed_over_ && profile_kept_ != nullptr) profile_kept_(user_span_);
  }

  void open_sampling(const detail::RunningConfig& config, ProfileKinds kinds) noexcept {
    detail::ThreadStackSampler* sampler = detail::current_stack_sampler;
    if (SPANPROF_UNLIKELY(sampler == nullptr || sampler->settings().generation != config.sampler.generation)) {
      // New settings (spanprof::start was called again) apply from this thread's
      // next outermost span: replacing the sampler now would free the log that
      // the open outer guards still read.
      if (sampler == nullptr || !sampler->has_open_span()) {
        if (config.sampler.signal_number == 0) return;
        sampler = detail::make_stack_sampler(config.sampler);
        if (sampler == nullptr) return;
      }
    }
    if (kinds.contains(ProfileKind::cpu) && SPANPROF_UNLIKELY(!sampler->armed())) {
      if (!sampler->has_source() || !sampler->arm()) kinds = kinds.contains(ProfileKind::wall) ? wall : ProfileKinds{};
      if (kinds.empty()) return;
    }
    sampler_ = sampler;
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall))) open_wall(*sampler, config);
    ticket_ = sampler->push(kinds);
    if (SPANPROF_UNLIKELY(!ticket_.valid())) return too_deep(*sampler, kinds);
    if (kinds.contains(ProfileKind::cpu)) {
      sampler->counters().add(detail::Counter::cpu_guards_opened, 1);
      // The ticker watches POSIX-timer threads for points the kernel is late with.
      // The sampler's own flag first: with the watch off (the default) the guard reads
      // nothing shared.
      if (SPANPROF_UNLIKELY(sampler->settings().watch_cpu) &&
          detail::ticker_parked().load(std::memory_order_relaxed) && sampler->source() == CpuSampleSource::posix_timer)
        detail::wall_ticker().watch_cpu();
    }
    state_ = State::sampling;
  }

  SPANPROF_NOINLINE void too_deep(detail::ThreadStackSampler& sampler, ProfileKinds kinds) noexcept {
    if (kinds.contains(ProfileKind::wall) && sampler.wall_span_closed(monotonic_ns()))
      detail::wall_ticker().thread_ended_wall_span();
    report_error(ErrorCode::sample_buffer_full, "more than 32 profiled spans open on one thread; this one is not profiled");
  }

  SPANPROF_NOINLINE void open_wall(detail::ThreadStackSampler& sampler, const detail::RunningConfig& config) noexcept {
    if (sampler.wall_span_opened(monotonic_ns()))
      detail::wall_ticker().thread_started_wall_span(config.sampler.wall_period_ns);
    sampler.counters().add(detail::Counter::wall_guards_opened, 1);
  }

  void close_sampling() noexcept {
    detail::ThreadStackSampler* sampler = sampler_;
    state_ = State::idle;
    if (SPANPROF_UNLIKELY(detail::current_stack_sampler != sampler)) return close_sampling_elsewhere(sampler);
    const detail::ActiveSpan& span = sampler->span(ticket_);
    const ProfileKinds kinds = span.kinds;
    const std::size_t log_start = span.log_start;
    const std::uint64_t dropped_at_start = span.dropped_at_start;
    // The wall time since the last sample goes to it before the span leaves.
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::wall)) && sampler->wall_span_closed(monotonic_ns()))
      detail::wall_ticker().thread_ended_wall_span();
    if (SPANPROF_UNLIKELY(!sampler->pop(ticket_)))
      return moved("a profiled span closed before a span opened after it on its thread (interleaved coroutines?): "
                   "its samples are dropped (docs/async.md)");
    const std::size_t used = sampler->used_words();
    const std::uint64_t dropped = sampler->dropped() - dropped_at_start;
    if (!keep_) {
      // Discarded by the tail policy: nothing is copied, symbolized or sent.
    } else if (used > log_start || dropped != 0) {
      hand_over(sampler, used, dropped, kinds, log_start);
    } else {
      sampler->counters().add(detail::Counter::spans_without_samples, 1);
      // A fragment's request counts its own when it ends, over all its fragments.
      if (SPANPROF_UNLIKELY(reason_ != ProfileReason::sampled) && request_ == nullptr)
        detail::kept_without_samples(reason_, duration_ns_);
    }
    sampler->span_closed();
  }

  // A fragment whose request ended on another thread, copied from that thread while
  // the fragment stays open on its own (which holds the slot, so the log is neither
  // reset nor freed under the copy): its records go to the request now, and its
  // close on its own thread only frees the slot. False, touching nothing, when it
  // records more than the thread's stack log (heap, or the classic engine).
  SPANPROF_NOINLINE bool take_records_elsewhere() noexcept {
    if (request_ == nullptr || heap_state_ != State::idle || classic_cpu_) return false;
    if (state_ == State::sampling) {
      detail::ThreadStackSampler* sampler = sampler_;
      const detail::ActiveSpan& span = sampler->span(ticket_);
      const std::size_t used = sampler->used_words_published();
      const std::uint64_t dropped = sampler->dropped() - span.dropped_at_start;
      if (used > span.log_start || dropped != 0) hand_over(sampler, used, dropped, span.kinds, span.log_start);
    }
    keep_ = false;
    return true;
  }

  // The guard ends on another thread than it began (a coroutine resumed on another
  // thread of a pool): that thread's samples are its own to read, so this span's
  // are dropped. Its slot is marked dead, the last thing done to the sampler: the
  // opening thread frees it, and never reads this guard again.
  SPANPROF_NOINLINE void close_sampling_elsewhere(detail::ThreadStackSampler* sampler) noexcept {
    if (sampler->span(ticket_).kinds.contains(ProfileKind::wall) && sampler->wall_span_closed_elsewhere())
      detail::wall_ticker().thread_ended_wall_span();
    sampler->close_elsewhere(ticket_);
    moved("a profiled span closed on another thread than it opened (a coroutine resumed elsewhere?): its samples "
          "are dropped (docs/async.md)");
  }

  void moved(const char* what) noexcept {
    if (moved_) return;  // one span, counted once (its CPU and heap parts both moved)
    moved_ = true;
    detail::count(detail::Counter::spans_moved);
    report_error(ErrorCode::span_moved, what);
  }

  // Copies this span's records out of the log, one profile per kind it asked for
  // (a fragment's go to its request).
  SPANPROF_NOINLINE void hand_over(detail::ThreadStackSampler* sampler, std::size_t used, std::uint64_t dropped,
                                   ProfileKinds kinds, std::size_t log_start) noexcept {
    if (dropped != 0) {
      char message[128];
      std::snprintf(message, sizeof message, "%llu samples dropped: the per-thread sample buffer is full",
                    static_cast<unsigned long long>(dropped));
      report_error(ErrorCode::sample_buffer_full, message);
    }
    if (request_ != nullptr)
      return request_->add_stack_records(*sampler, sampler->words() + log_start, used - log_start, kinds, dropped);
    if (used <= log_start) return;
    const std::uint64_t* first = sampler->words() + log_start;
    const std::size_t words = used - log_start;
    // The log holds what the spans around this one (and inside it) asked for too:
    // each profile takes the records of its kind.
    for (const ProfileKind kind : {ProfileKind::cpu, ProfileKind::wall}) {
      if (!kinds.contains(kind)) continue;
      SPANPROF_TRY {
        auto pending = detail::captured_profile_pool().acquire();
        pending->packed_samples.reserve(words);
        detail::append_stack_records(first, words, kind, pending->packed_samples);
        if (pending->packed_samples.empty()) {
          sampler->counters().add(detail::Counter::spans_without_samples, 1);
          detail::captured_profile_pool().release(std::move(pending));
          continue;
        }
        fill_identity(pending->profile, kind);
        pending->profile.period_ns = sampler->period_ns(kind);
        if (kind == ProfileKind::cpu) pending->profile.dropped_samples = dropped;
        pending->engine = sampler->engine_name(kind);
        handed_over_ = detail::submit_captured(std::move(pending)) || handed_over_;
      } SPANPROF_CATCH_ALL {
        report_error(ErrorCode::internal, "out of memory handing over a profile; dropped");
      }
    }
  }

  void fill_identity(RawProfile& profile, ProfileKind kind) {
    if (duration_ns_ < 0) duration_ns_ = monotonic_ns() - start_ns_;
    profile.kind = kind;
    profile.span = span_;
    profile.span_name.assign(name_, name_length_);
    profile.start_unix_ns = realtime_ns() - duration_ns_;
    profile.duration_ns = duration_ns_;
    profile.reason = reason_;
  }

  SPANPROF_NOINLINE void open_classic() noexcept {
    switch (detail::classic_engine_start()) {
      case detail::ClassicStart::started:
        detail::count(detail::Counter::cpu_guards_opened);
        classic_cpu_ = true;
        return;
      case detail::ClassicStart::busy:
        detail::count(detail::Counter::classic_busy);
        report_error(ErrorCode::profiler_busy, "the classic engine is profiling another scope; this one is not profiled");
        return;
      case detail::ClassicStart::failed:
        return;
    }
  }

  SPANPROF_NOINLINE void close_classic() noexcept {
    classic_cpu_ = false;
    detail::classic_engine_stop([this](const char* file) noexcept {
      if (!keep_) {
        ::unlink(file);
        return;
      }
      if (!hand_over(ProfileKind::cpu, "classic",
                     [file](detail::CapturedProfile& pending) { pending.gperftools_cpu_file = file; }))
        ::unlink(file);
    });
  }

  SPANPROF_NOINLINE void open_heap(const detail::RunningConfig& config) noexcept {
    if (config.heap_engine == HeapEngine::classic) {
      switch (detail::classic_heap_start()) {
        case detail::ClassicHeapStart::started:
          detail::count(detail::Counter::heap_guards_opened);
          heap_state_ = State::classic;
          return;
        case detail::ClassicHeapStart::busy:
          detail::count(detail::Counter::classic_busy);
          report_error(ErrorCode::profiler_busy,
                       "gperftools' heap profiler is profiling another scope; this one gets no heap profile");
          return;
        case detail::ClassicHeapStart::failed:
          return;
      }
    }
    if (detail::open_heap_span(heap_record_, config.heap)) heap_state_ = State::sampling;
  }

  SPANPROF_NOINLINE void close_heap() noexcept {
    const State state = heap_state_;
    heap_state_ = State::idle;
    if (state == State::classic) {
      char* text = detail::classic_heap_stop();
      if (text == nullptr) {
        if (keep_) report_error(ErrorCode::profiler_failed, "GetHeapProfile returned nothing");
        return;
      }
      if (!keep_) {
        std::free(text);
        return;
      }
      hand_over(ProfileKind::heap, "classic",
                [text](detail::CapturedProfile& pending) { pending.gperftools_heap_text = text; });
      std::free(text);
      return;
    }
    detail::HeapSpanResult result;
    if (SPANPROF_UNLIKELY(!detail::close_heap_span(heap_record_, result, keep_)))
      return moved(heap_record_.owner != &detail::heap_thread
                       ? "a heap-profiled span closed on another thread than it opened (a coroutine resumed "
                         "elsewhere?): its samples are dropped (docs/async.md)"
                       : "a heap-profiled span closed before a span opened after it on its thread: its samples are "
                         "dropped (docs/async.md)");
    if (result.dropped != 0 && keep_) {
      char message[128];
      std::snprintf(message, sizeof message, "%llu heap samples dropped: the per-thread heap log is full",
                    static_cast<unsigned long long>(result.dropped));
      report_error(ErrorCode::sample_buffer_full, message);
    }
    if (!keep_ || result.records.empty()) return;  // discarded, or nothing allocated was sampled
    if (request_ != nullptr) return request_->add_heap_records(result);
    hand_over(ProfileKind::heap, detail::sampling_heap_engine_name(), [&result](detail::CapturedProfile& pending) {
      pending.profile.heap_interval_bytes = result.interval_bytes;
      pending.profile.dropped_samples = result.dropped;
      pending.packed_samples = std::move(result.records);
    });
  }

  // Hands this span's profile of `kind` over, `attach` adding what the engine
  // recorded; false when it could not (out of memory, reported).
  template <class Attach>
  bool hand_over(ProfileKind kind, const char* engine, Attach&& attach) noexcept {
    SPANPROF_TRY {
      auto pending = detail::captured_profile_pool().acquire();
      fill_identity(pending->profile, kind);
      pending->engine = engine;
      attach(*pending);
      handed_over_ = detail::submit_captured(std::move(pending)) || handed_over_;
      return true;
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, kind == ProfileKind::heap
                                            ? "out of memory handing over a heap profile; dropped"
                                            : "out of memory handing over a profile; dropped");
    }
    return false;
  }

  // What every guard sets: the destructor and the public queries read only these.
  State state_ = State::idle;       // sampling: ticket_ holds a slot of sampler_ (CPU and/or wall)
  State heap_state_ = State::idle;
  bool classic_cpu_ = false;        // gperftools' CPU profiler runs for this scope
  bool observe_only_ = false;  // not profiled; timed for the adaptive trigger only
  bool handed_over_ = false;
  // Set by prepare(), for guards that open something or are timed for the trigger.
  bool triggered_;
  bool errored_;
  bool keep_;
  ProfileReason reason_;
  std::uint8_t name_length_;
  int uncaught_at_open_;
  const detail::RunningConfig* config_;  // pinned in pins_ until unpin()
  detail::ConfigReader* pins_;
  detail::ThreadStackSampler* sampler_;
  std::int64_t start_ns_;
  std::int64_t duration_ns_;  // -1: not read yet
  std::uint64_t name_hash_;
  bool discarded_;
  bool moved_;  // closed elsewhere or out of order: counted, samples dropped
  detail::RequestState* request_;  // a fragment's request (request.hpp); null: a span's own profile
  const void* user_span_;  // the user's span, for the adapter's hooks at close
  bool (*span_failed_)(const void*) noexcept;
  void (*profile_kept_)(const void*) noexcept;
  // Members of anonymous unions are left uninitialized by the constructors (their
  // types zero themselves otherwise); prepare() assigns them.
  union {
    detail::SpanSlotTicket ticket_;  // the span's slot in sampler_ (capture/thread_stack_sampler.hpp)
  };
  union {
    detail::HeapActiveSpan heap_record_;
  };
  union {
    SpanContext span_;
  };
  char name_[max_span_name];
};

#else  // SPANPROF_ENABLED == 0: every guard is an empty object.

class ScopedProfile {
 public:
  // The same checks as the real guard, so code that compiles one way compiles both.
  template <class Span>
  explicit ScopedProfile(const Span&) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span>
  ScopedProfile(const Span&, ProfileKinds) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span>
  ScopedProfile(const Span&, std::string_view) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span>
  ScopedProfile(const Span&, std::string_view, ProfileKinds) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span, class = std::enable_if_t<detail::reads_span_at_close_v<Span>>>
  explicit ScopedProfile(const Span&&) noexcept {
    detail::require_lasting_span<Span>();
  }
  template <class Span, class Second, class = std::enable_if_t<detail::reads_span_at_close_v<Span>>>
  ScopedProfile(const Span&&, Second&&) noexcept {
    detail::require_lasting_span<Span>();
  }
  template <class Span, class = std::enable_if_t<detail::reads_span_at_close_v<Span>>>
  ScopedProfile(const Span&&, std::string_view, ProfileKinds) noexcept {
    detail::require_lasting_span<Span>();
  }
  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  bool active() const noexcept { return false; }
  bool pending_close() const noexcept { return false; }
  void set_error(bool = true) noexcept {}
  void discard() noexcept {}
  void close() noexcept {}
  bool profile_handed_over() const noexcept { return false; }
  void stop_sampling_when(const std::atomic<bool>&) noexcept {}
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_GUARD_HPP_
