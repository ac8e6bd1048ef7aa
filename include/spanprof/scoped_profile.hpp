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
// Guards nest: a parent's profile includes its children's samples, as a parent
// span's time includes its children's. A guard must be closed on the thread that
// opened it (it cannot be moved, and must not live across a coroutine suspension
// that resumes on another thread).
#ifndef SPANPROF_SCOPED_PROFILE_HPP_
#define SPANPROF_SCOPED_PROFILE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span_adapter.hpp>
#include <spanprof/span_context.hpp>

#if SPANPROF_ENABLED
#include <spanprof/detail/classic_engine.hpp>
#include <spanprof/detail/thread_sampler.hpp>
#include <spanprof/runtime.hpp>

#include <chrono>
#include <cstring>
#include <ctime>
#endif

#include <string_view>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED

class ScopedProfile {
 public:
  // Longer span names are cut to this many bytes: the name is copied into the
  // guard so that nothing is allocated when the span ends without samples.
  static constexpr std::size_t max_span_name = 127;

  template <class Span, class = std::enable_if_t<is_span_v<Span>>>
  explicit ScopedProfile(const Span& span) noexcept
      : ScopedProfile(span_adapter<std::decay_t<Span>>::context(span), span_adapter<std::decay_t<Span>>::name(span)) {
  }

  ScopedProfile(const SpanContext& span, std::string_view span_name) noexcept { open(span, span_name); }

  ~ScopedProfile() {
    if (state_ != State::idle) close();
  }

  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  ScopedProfile(ScopedProfile&&) = delete;
  ScopedProfile& operator=(ScopedProfile&&) = delete;

  // True when this scope is being profiled (sampled in, engine running).
  bool active() const noexcept { return state_ != State::idle; }

 private:
  enum class State : std::uint8_t { idle, sampling, classic };

  static std::int64_t monotonic_ns() noexcept {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
  static std::int64_t realtime_ns() noexcept {
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  void open(const SpanContext& span, std::string_view span_name) noexcept {
    const detail::RunningConfig* config = detail::runtime().config_for_guard();
    if (SPANPROF_UNLIKELY(config == nullptr)) return;
    if (SPANPROF_UNLIKELY(!span.valid())) {
      report_error(ErrorCode::invalid_span_context, "a guard was given an invalid trace or span id; not profiled");
      return;
    }
    if (config->head_sampler && !config->head_sampler->should_profile(span, span_name)) return;

    span_ = span;
    name_length_ = static_cast<std::uint8_t>(span_name.size() < max_span_name ? span_name.size() : max_span_name);
    if (name_length_ != 0) std::memcpy(name_, span_name.data(), name_length_);

    if (config->engine == Engine::classic) {
      open_classic();
      return;
    }
    detail::ThreadSampler* sampler = detail::current_thread_sampler;
    if (SPANPROF_UNLIKELY(sampler == nullptr || sampler->settings().generation != config->sampler.generation)) {
      // New settings (spanprof::start was called again) apply from this thread's
      // next outermost span: replacing the sampler now would free the log that
      // the open outer guards still read.
      if (sampler == nullptr || !sampler->has_open_span()) {
        if (config->sampler.signal_number == 0) return;
        sampler = detail::make_thread_sampler(config->sampler);
        if (sampler == nullptr) return;
      }
    }
    if (SPANPROF_UNLIKELY(!sampler->armed())) {
      if (!sampler->has_source() || !sampler->arm()) return;
    }
    sampler_ = sampler;
    start_ns_ = monotonic_ns();
    sampler->push(record_);
    detail::ThreadSampler::bump(sampler->counters().guards_opened);
    state_ = State::sampling;
  }

  void close() noexcept {
    if (state_ == State::classic) {
      close_classic();
      return;
    }
    detail::ThreadSampler* sampler = sampler_;
    sampler->pop(record_);
    const std::size_t used = sampler->used_words();
    const std::uint64_t dropped = sampler->dropped() - record_.dropped_at_start;
    if (used > record_.log_start || dropped != 0) {
      hand_over(sampler, used, dropped);
    } else {
      detail::ThreadSampler::bump(sampler->counters().spans_without_samples);
    }
    if (record_.parent == nullptr) sampler->reset_log();
    state_ = State::idle;
  }

  SPANPROF_NOINLINE void hand_over(detail::ThreadSampler* sampler, std::size_t used, std::uint64_t dropped) noexcept {
    const std::int64_t duration = monotonic_ns() - start_ns_;
    if (dropped != 0) {
      char message[128];
      std::snprintf(message, sizeof message, "%llu samples dropped: the per-thread sample buffer is full",
                    static_cast<unsigned long long>(dropped));
      report_error(ErrorCode::sample_buffer_full, message);
    }
    if (used <= record_.log_start) return;
    try {
      auto pending = std::make_unique<detail::PendingProfile>();
      fill_identity(pending->profile, duration);
      pending->profile.period_ns = sampler->settings().period_ns;
      pending->profile.dropped_samples = dropped;
      pending->profile.engine = std::string("sampling:") + std::string(to_string(sampler->source()));
      pending->packed_samples.assign(sampler->words() + record_.log_start, sampler->words() + used);
      detail::runtime().submit(std::move(pending));
    } catch (...) {
      report_error(ErrorCode::internal, "out of memory handing over a profile; dropped");
    }
  }

  void fill_identity(RawProfile& profile, std::int64_t duration) const {
    profile.kind = ProfileKind::cpu;
    profile.span = span_;
    profile.span_name.assign(name_, name_length_);
    profile.start_unix_ns = realtime_ns() - duration;
    profile.duration_ns = duration;
  }

  SPANPROF_NOINLINE void open_classic() noexcept {
    switch (detail::classic_engine_start(classic_path_)) {
      case detail::ClassicStart::started:
        detail::runtime().count_classic_guard();
        start_ns_ = monotonic_ns();
        state_ = State::classic;
        return;
      case detail::ClassicStart::busy:
        detail::runtime().count_classic_busy();
        report_error(ErrorCode::profiler_busy, "the classic engine is profiling another scope; this one is not profiled");
        return;
      case detail::ClassicStart::failed:
        return;
    }
  }

  SPANPROF_NOINLINE void close_classic() noexcept {
    detail::classic_engine_stop();
    const std::int64_t duration = monotonic_ns() - start_ns_;
    state_ = State::idle;
    try {
      auto pending = std::make_unique<detail::PendingProfile>();
      fill_identity(pending->profile, duration);
      pending->profile.engine = "classic";
      pending->legacy_file = classic_path_;
      detail::runtime().submit(std::move(pending));
    } catch (...) {
      ::unlink(classic_path_);
      report_error(ErrorCode::internal, "out of memory handing over a profile; dropped");
    }
  }

  State state_ = State::idle;
  std::uint8_t name_length_ = 0;
  detail::ThreadSampler* sampler_ = nullptr;
  std::int64_t start_ns_ = 0;
  detail::ActiveSpan record_;
  SpanContext span_;
  char name_[max_span_name];
  char classic_path_[256];
};

#else  // SPANPROF_ENABLED == 0: every guard is an empty object.

class ScopedProfile {
 public:
  template <class Span>
  explicit ScopedProfile(const Span&) noexcept {}
  ScopedProfile(const SpanContext&, std::string_view) noexcept {}
  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  bool active() const noexcept { return false; }
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SCOPED_PROFILE_HPP_
