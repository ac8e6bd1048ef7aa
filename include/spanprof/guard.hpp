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

#include <spanprof/config.hpp>
#include <spanprof/detail/guard_core.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_adapter.hpp>
#include <spanprof/span/span_context.hpp>

#include <atomic>
#include <cstddef>
#include <string_view>
#include <type_traits>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED

class ScopedProfile {
 public:
  // Longer span names are cut to this many bytes: the name is copied into the
  // guard so that nothing is allocated when the span ends without samples.
  static constexpr std::size_t max_span_name = detail::GuardCore::max_span_name;

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

  ~ScopedProfile() { core_.close(); }

  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;
  ScopedProfile(ScopedProfile&&) = delete;
  ScopedProfile& operator=(ScopedProfile&&) = delete;

  // True when this scope is being profiled (sampled in, an engine running).
  bool active() const noexcept { return core_.active(); }

  // True when closing this guard does something: it is active, or the adaptive
  // trigger is timing the span. A guard that is not may be destroyed at once.
  bool pending_close() const noexcept { return core_.pending_close(); }

  // Marks the span as failed, for tail policies that keep errored spans. An
  // exception leaving the scope marks it without this.
  void set_error(bool failed = true) noexcept { core_.set_error(failed); }

  // Drops whatever this scope recorded when it closes: nothing is kept, symbolized
  // or sent (counted in Stats::discarded_explicitly).
  void discard() noexcept { core_.discard(); }

  // Ends the profiled scope now rather than at the end of the C++ scope: decides,
  // hands the profile over, and leaves the guard inactive. Must run on the thread
  // that opened it, after every guard opened inside it has closed.
  void close() noexcept { core_.close(); }

  // After close() (or while the destructor runs a span adapter's hook): whether a
  // profile of this scope was handed to delivery. A scope that took no sample, or
  // that the tail policy discarded, hands nothing over.
  bool profile_handed_over() const noexcept { return core_.profile_handed_over(); }

  // While `flag` is set, samples that land in this scope are not recorded. For a
  // span whose end may come from another thread (the OpenTelemetry integration
  // sets it there): the flag must outlive the guard.
  void stop_sampling_when(const std::atomic<bool>& flag) noexcept { core_.stop_sampling_when(flag); }

 private:
  template <class Span>
  SPANPROF_ALWAYS_INLINE void start(const Span& span, std::string_view span_name, ProfileKinds kinds,
                                    bool configured) noexcept {
    core_.open(span_adapter<std::decay_t<Span>>::context(span), span_name, kinds, configured);
    core_.keep_span_for_close(span);
  }

  detail::GuardCore core_;
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
