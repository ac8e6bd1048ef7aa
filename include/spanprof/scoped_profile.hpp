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
// span's time includes its children's. A guard must be closed on the thread that
// opened it (it cannot be moved, and must not live across a coroutine suspension
// that resumes on another thread).
#ifndef SPANPROF_SCOPED_PROFILE_HPP_
#define SPANPROF_SCOPED_PROFILE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile.hpp>
#include <spanprof/span_adapter.hpp>
#include <spanprof/span_context.hpp>

#if SPANPROF_ENABLED
#include <spanprof/detail/classic_engine.hpp>
#include <spanprof/detail/classic_heap_engine.hpp>
#include <spanprof/detail/heap_sampler.hpp>
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

  // Records what spanprof::Options::profiles says (CPU unless configured).
  template <class Span, class = std::enable_if_t<is_span_v<Span>>>
  explicit ScopedProfile(const Span& span) noexcept {
    open(span_adapter<std::decay_t<Span>>::context(span), span_adapter<std::decay_t<Span>>::name(span), {}, true);
  }

  // Records the given profiles, e.g. `spanprof::cpu | spanprof::heap`.
  template <class Span, class = std::enable_if_t<is_span_v<Span>>>
  ScopedProfile(const Span& span, ProfileKinds kinds) noexcept {
    open(span_adapter<std::decay_t<Span>>::context(span), span_adapter<std::decay_t<Span>>::name(span), kinds, false);
  }

  ScopedProfile(const SpanContext& span, std::string_view span_name) noexcept { open(span, span_name, {}, true); }
  ScopedProfile(const SpanContext& span, std::string_view span_name, ProfileKinds kinds) noexcept {
    open(span, span_name, kinds, false);
  }

  ~ScopedProfile() {
    // Heap first: the CPU hand-over allocates, and those allocations are the SDK's.
    if (heap_state_ != State::idle) close_heap();
    if (state_ != State::idle) close();
  }

  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  ScopedProfile(ScopedProfile&&) = delete;
  ScopedProfile& operator=(ScopedProfile&&) = delete;

  // True when this scope is being profiled (sampled in, an engine running).
  bool active() const noexcept { return state_ != State::idle || heap_state_ != State::idle; }

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

  void open(const SpanContext& span, std::string_view span_name, ProfileKinds kinds, bool configured) noexcept {
    const detail::RunningConfig* config = detail::runtime().config_for_guard();
    if (SPANPROF_UNLIKELY(config == nullptr)) return;
    if (SPANPROF_UNLIKELY(!span.valid())) {
      report_error(ErrorCode::invalid_span_context, "a guard was given an invalid trace or span id; not profiled");
      return;
    }
    if (config->head_sampler && !config->head_sampler->should_profile(span, span_name)) return;
    begin(*config, span, span_name, configured ? config->profiles : kinds);
  }

  // Kept out of line so that the turned-down guard above stays a few instructions.
  SPANPROF_NOINLINE void begin(const detail::RunningConfig& config, const SpanContext& span,
                               std::string_view span_name, ProfileKinds kinds) noexcept {
    span_ = span;
    name_length_ = static_cast<std::uint8_t>(span_name.size() < max_span_name ? span_name.size() : max_span_name);
    if (name_length_ != 0) std::memcpy(name_, span_name.data(), name_length_);
    if (kinds.contains(ProfileKind::cpu)) {
      if (config.engine == Engine::classic) open_classic();
      else open_sampling(config);
    }
    if (SPANPROF_UNLIKELY(kinds.contains(ProfileKind::heap))) open_heap(config);
  }

  void open_sampling(const detail::RunningConfig& config) noexcept {
    detail::ThreadSampler* sampler = detail::current_thread_sampler;
    if (SPANPROF_UNLIKELY(sampler == nullptr || sampler->settings().generation != config.sampler.generation)) {
      // New settings (spanprof::start was called again) apply from this thread's
      // next outermost span: replacing the sampler now would free the log that
      // the open outer guards still read.
      if (sampler == nullptr || !sampler->has_open_span()) {
        if (config.sampler.signal_number == 0) return;
        sampler = detail::make_thread_sampler(config.sampler);
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
      fill_identity(pending->profile, ProfileKind::cpu, duration);
      pending->profile.period_ns = sampler->settings().period_ns;
      pending->profile.dropped_samples = dropped;
      pending->profile.engine = std::string("sampling:") + std::string(to_string(sampler->source()));
      pending->packed_samples.assign(sampler->words() + record_.log_start, sampler->words() + used);
      detail::runtime().submit(std::move(pending));
    } catch (...) {
      report_error(ErrorCode::internal, "out of memory handing over a profile; dropped");
    }
  }

  void fill_identity(RawProfile& profile, ProfileKind kind, std::int64_t duration) const {
    profile.kind = kind;
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
      fill_identity(pending->profile, ProfileKind::cpu, duration);
      pending->profile.engine = "classic";
      pending->legacy_file = classic_path_;
      detail::runtime().submit(std::move(pending));
    } catch (...) {
      ::unlink(classic_path_);
      report_error(ErrorCode::internal, "out of memory handing over a profile; dropped");
    }
  }

  SPANPROF_NOINLINE void open_heap(const detail::RunningConfig& config) noexcept {
    if (start_ns_ == 0) start_ns_ = monotonic_ns();
    if (config.heap_engine == HeapEngine::classic) {
      switch (detail::classic_heap_start(heap_prefix_)) {
        case detail::ClassicHeapStart::started:
          detail::heap_counters().guards_opened.fetch_add(1, std::memory_order_relaxed);
          heap_state_ = State::classic;
          return;
        case detail::ClassicHeapStart::busy:
          detail::runtime().count_classic_busy();
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
      char* text = detail::classic_heap_stop(heap_prefix_);
      const std::int64_t duration = monotonic_ns() - start_ns_;
      if (text == nullptr) {
        report_error(ErrorCode::profiler_failed, "GetHeapProfile returned nothing");
        return;
      }
      try {
        auto pending = std::make_unique<detail::PendingProfile>();
        fill_identity(pending->profile, ProfileKind::heap, duration);
        pending->profile.engine = "classic";
        pending->legacy_heap_text = text;
        std::free(text);
        text = nullptr;
        detail::runtime().submit(std::move(pending));
      } catch (...) {
        std::free(text);
        report_error(ErrorCode::internal, "out of memory handing over a heap profile; dropped");
      }
      return;
    }
    detail::HeapSpanResult result;
    detail::close_heap_span(heap_record_, result);
    const std::int64_t duration = monotonic_ns() - start_ns_;
    if (result.dropped != 0) {
      char message[128];
      std::snprintf(message, sizeof message, "%llu heap samples dropped: the per-thread heap log is full",
                    static_cast<unsigned long long>(result.dropped));
      report_error(ErrorCode::sample_buffer_full, message);
    }
    if (result.records.empty()) return;  // nothing allocated was sampled: no profile
    try {
      auto pending = std::make_unique<detail::PendingProfile>();
      fill_identity(pending->profile, ProfileKind::heap, duration);
      pending->profile.heap_interval_bytes = result.interval_bytes;
      pending->profile.dropped_samples = result.dropped;
      pending->profile.engine = "sampling:tcmalloc_hooks";
      pending->packed_samples = std::move(result.records);
      detail::runtime().submit(std::move(pending));
    } catch (...) {
      report_error(ErrorCode::internal, "out of memory handing over a heap profile; dropped");
    }
  }

  State state_ = State::idle;
  State heap_state_ = State::idle;
  std::uint8_t name_length_ = 0;
  detail::ThreadSampler* sampler_ = nullptr;
  std::int64_t start_ns_ = 0;
  detail::ActiveSpan record_;
  detail::HeapActiveSpan heap_record_;
  SpanContext span_;
  char name_[max_span_name];
  char classic_path_[256];
  char heap_prefix_[256];
};

#else  // SPANPROF_ENABLED == 0: every guard is an empty object.

class ScopedProfile {
 public:
  template <class Span>
  explicit ScopedProfile(const Span&) noexcept {}
  template <class Span>
  ScopedProfile(const Span&, ProfileKinds) noexcept {}
  ScopedProfile(const SpanContext&, std::string_view) noexcept {}
  ScopedProfile(const SpanContext&, std::string_view, ProfileKinds) noexcept {}
  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  bool active() const noexcept { return false; }
};

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SCOPED_PROFILE_HPP_
