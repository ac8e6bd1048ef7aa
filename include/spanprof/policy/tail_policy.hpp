// Tail policies: decide, when a guard closes, whether the profile it recorded is
// kept. A request is only known to be slow or failing at its end, so the cheap
// recording runs for every head-sampled span and the tail policy throws away the
// uninteresting ones before they cost symbolization, encoding or upload.
//
//   options.tail_policy = spanprof::keep_any_of({
//       std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(250)),
//       std::make_shared<spanprof::KeepErroredSpans>()});
//
// A policy runs on the request thread at guard close: keep it a few comparisons.
#ifndef SPANPROF_POLICY_TAIL_POLICY_HPP_
#define SPANPROF_POLICY_TAIL_POLICY_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

// How the span ended, as the guard saw it.
struct SpanOutcome {
  SpanContext span;
  std::string_view span_name;
  std::int64_t duration_ns = 0;  // wall time the guard was open
  bool error = false;            // exception unwinding, set_error(), or the span adapter's status
  // Where the duration went (Options::time_split; not measured otherwise). A
  // request's is its fragments' that closed before it ended. (An initializer: an
  // outcome brace-initialized without it stays warning-free.)
  TimeSplit time{};
};

struct TailDecision {
  bool keep = true;
  ProfileReason reason = ProfileReason::sampled;

  static constexpr TailDecision keep_as(ProfileReason why) noexcept { return {true, why}; }
  static constexpr TailDecision discard() noexcept { return {false, ProfileReason::sampled}; }
};

class TailPolicy {
 public:
  virtual ~TailPolicy() = default;
  virtual TailDecision decide(const SpanOutcome& outcome) noexcept = 0;
};

class KeepAllSpans final : public TailPolicy {
 public:
  TailDecision decide(const SpanOutcome&) noexcept override { return TailDecision::keep_as(ProfileReason::sampled); }
};

// Keeps spans that lasted at least `threshold` (a span of exactly the threshold is slow).
class KeepSlowSpans final : public TailPolicy {
 public:
  explicit KeepSlowSpans(std::chrono::nanoseconds threshold) noexcept : threshold_ns_(threshold.count()) {}
  TailDecision decide(const SpanOutcome& outcome) noexcept override {
    return outcome.duration_ns >= threshold_ns_ ? TailDecision::keep_as(ProfileReason::slow) : TailDecision::discard();
  }
  std::int64_t threshold_ns() const noexcept { return threshold_ns_; }

 private:
  std::int64_t threshold_ns_;
};

class KeepErroredSpans final : public TailPolicy {
 public:
  TailDecision decide(const SpanOutcome& outcome) noexcept override {
    return outcome.error ? TailDecision::keep_as(ProfileReason::error) : TailDecision::discard();
  }
};

// Keeps a span if any policy keeps it, with the reason of the first that does: list
// the most telling reason first (an errored slow span is usually "error").
class KeepAnyOf final : public TailPolicy {
 public:
  explicit KeepAnyOf(std::vector<std::shared_ptr<TailPolicy>> policies) noexcept : policies_(std::move(policies)) {}
  TailDecision decide(const SpanOutcome& outcome) noexcept override {
    for (const auto& policy : policies_) {
      if (!policy) continue;
      const TailDecision decision = policy->decide(outcome);
      if (decision.keep) return decision;
    }
    return TailDecision::discard();
  }

 private:
  std::vector<std::shared_ptr<TailPolicy>> policies_;
};

inline std::shared_ptr<TailPolicy> keep_any_of(std::vector<std::shared_ptr<TailPolicy>> policies) {
  return std::make_shared<KeepAnyOf>(std::move(policies));
}

// For rules that fit in a lambda; an exception from it discards the profile.
class CallbackTailPolicy final : public TailPolicy {
 public:
  using Callback = std::function<TailDecision(const SpanOutcome&)>;
  explicit CallbackTailPolicy(Callback callback) : callback_(std::move(callback)) {}
  TailDecision decide(const SpanOutcome& outcome) noexcept override {
    SPANPROF_TRY {
      return callback_ ? callback_(outcome) : TailDecision::discard();
    } SPANPROF_CATCH_ALL {
      return TailDecision::discard();
    }
  }

 private:
  Callback callback_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_POLICY_TAIL_POLICY_HPP_
