// Internal. The decisions every way to open a span makes, a guard's
// (guard_core-inl.hpp) and a request's (request-inl.hpp, request_state.hpp)
// alike: what the adaptive trigger makes of a span the head sampler declined,
// and what a span's end decides of its profile.
#ifndef SPANPROF_DETAIL_SPAN_DECISION_HPP_
#define SPANPROF_DETAIL_SPAN_DECISION_HPP_

#include <spanprof/config.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>

#if SPANPROF_ENABLED

#include <cstdint>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Declined spans of this thread left before one is timed for the adaptive trigger.
inline thread_local std::uint32_t trigger_observe_countdown = 0;

enum class TriggerVerdict : std::uint8_t {
  none,     // not profiled, not timed
  profile,  // its name is armed: profiled as triggered
  observe,  // timed for the trigger only: one declined span in observe_one_in per thread
};

// What the adaptive trigger makes of a span the head sampler declined; `name_hash`
// is the name's hash when the verdict is not none.
inline TriggerVerdict trigger_verdict(AdaptiveTrigger& trigger, const SpanContext& span, std::string_view name,
                                      std::uint64_t& name_hash) noexcept {
  name_hash = 0;
  if (trigger.any_armed() && span.valid()) {
    name_hash = AdaptiveTrigger::hash_name(name);
    if (trigger.take(name_hash)) return TriggerVerdict::profile;
  }
  std::uint32_t& countdown = trigger_observe_countdown;
  if (countdown > 1) {
    --countdown;
    return TriggerVerdict::none;
  }
  countdown = trigger.options().observe_one_in;
  if (name_hash == 0) name_hash = AdaptiveTrigger::hash_name(name);
  return TriggerVerdict::observe;
}

// What a profiled span's end decides: the tail policy's verdict (none: kept as
// sampled); kept anyway when the trigger asked for the span, under the more
// telling reason if any; and the trigger, if any, learns the span's latency
// (`name_hash` 0: hashed here).
inline TailDecision decide_at_end(TailPolicy* policy, AdaptiveTrigger* trigger, bool triggered,
                                  std::uint64_t name_hash, SpanOutcome& outcome) noexcept {
  TailDecision decision = TailDecision::keep_as(ProfileReason::sampled);
  if (policy != nullptr) decision = policy->decide(outcome);
  if (triggered && (!decision.keep || decision.reason == ProfileReason::sampled))
    decision = TailDecision::keep_as(ProfileReason::triggered);
  if (trigger != nullptr)
    trigger->observe(name_hash != 0 ? name_hash : AdaptiveTrigger::hash_name(outcome.span_name), outcome.duration_ns);
  return decision;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_SPAN_DECISION_HPP_
