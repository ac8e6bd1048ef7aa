// Internal. The one way a closing span hands a profile over, for a guard
// (guard_core-inl.hpp) and for a request when it is delivered (request_state.hpp):
// a record from the pool, what the engine recorded, the span's identity, then the
// runtime's queue. Never throws, never blocks.
#ifndef SPANPROF_DETAIL_HAND_OVER_HPP_
#define SPANPROF_DETAIL_HAND_OVER_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/runtime/running_config.hpp>
#include <spanprof/span/span_context.hpp>

#if SPANPROF_ENABLED

#include <cstdint>
#include <cstdio>
#include <string_view>
#include <utility>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What every profile of a span says about the span.
struct SpanIdentity {
  SpanContext span;
  std::string_view name;
  ProfileReason reason = ProfileReason::sampled;
  std::int64_t start_unix_ns = 0;
  std::int64_t duration_ns = 0;
  TimeSplit time{};  // (an initializer: brace-initialized records without it stay warning-free)
};

enum class HandOver : std::uint8_t {
  handed_over,      // queued for delivery
  nothing_recorded, // attach found nothing of this kind: no profile
  dropped,          // the queue refused it (counted by the runtime)
  out_of_memory,    // reported; the engine's output is the caller's to clean up
};

// `attach(CapturedProfile&)` moves what the engine recorded into the record and
// returns false when that is nothing.
template <class Attach>
HandOver hand_over_profile(const SpanIdentity& identity, ProfileKind kind, const char* engine,
                           Attach&& attach) noexcept {
  SPANPROF_TRY {
    auto pending = captured_profile_pool().acquire();
    if (!attach(*pending)) {
      captured_profile_pool().release(std::move(pending));
      return HandOver::nothing_recorded;
    }
    RawProfile& profile = pending->profile;
    profile.kind = kind;
    profile.span = identity.span;
    profile.span_name.assign(identity.name.data(), identity.name.size());
    profile.reason = identity.reason;
    profile.start_unix_ns = identity.start_unix_ns;
    profile.duration_ns = identity.duration_ns;
    profile.time = identity.time;
    pending->engine = engine;
    return submit_captured(std::move(pending)) ? HandOver::handed_over : HandOver::dropped;
  } SPANPROF_CATCH_ALL {
    report_error(ErrorCode::internal, kind == ProfileKind::heap ? "out of memory handing over a heap profile; dropped"
                                                                : "out of memory handing over a profile; dropped");
  }
  return HandOver::out_of_memory;
}

// Says that `count` samples were lost to a full per-thread buffer (`what`: which,
// after the count).
SPANPROF_NOINLINE inline void report_samples_dropped(std::uint64_t count, const char* what) noexcept {
  char message[160];
  std::snprintf(message, sizeof message, "%llu %s", static_cast<unsigned long long>(count), what);
  report_error(ErrorCode::sample_buffer_full, message);
}

// The engine a lock profile names (SpanRecord::engine).
inline constexpr const char* lock_engine_name = "lock_hooks";

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_HAND_OVER_HPP_
