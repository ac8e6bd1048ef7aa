// Head sampling: decides, when a guard opens, whether this span is profiled.
// A "no" is the common answer in production, so it must cost next to nothing:
// samplers are called on the request thread and must not allocate, lock or block.
//
// The samplers here ("conditional profiling"), each final, thread-safe and cheap
// to turn a span down:
//   ProbabilitySampler(p)           a fresh coin per span
//   TraceIdRatioSampler(ratio)      a coin read from the trace id: every process
//                                   decides alike, so a trace is profiled whole
//   ParentSampledSampler            the spans of traces the tracer kept
//   RateLimitingSampler(rate, burst, clock)   at most `rate` spans a second
//   SpanNameSampler(rules, default) per-span-name rules
//   AllOfSampler / AnyOfSampler     composition
//   (SPANPROF_SAMPLER & co. build them from the environment: detail/runtime/environment.hpp)
#ifndef SPANPROF_POLICY_HEAD_SAMPLER_HPP_
#define SPANPROF_POLICY_HEAD_SAMPLER_HPP_

#include <spanprof/base/clock.hpp>
#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/span/span_context.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>


SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The trace id's last 7 bytes read big-endian: its randomness by W3C Trace Context
// level 2. One 8-byte load, on the guard's turned-down path.
inline std::uint64_t trace_id_randomness(const TraceId& trace_id) noexcept {
  std::uint64_t word = 0;
  std::memcpy(&word, trace_id.bytes().data() + TraceId::size - 8, sizeof word);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  word = __builtin_bswap64(word);
#endif
  return word & ((std::uint64_t{1} << 56) - 1);
}

}  // namespace detail

class HeadSampler {
 public:
  virtual ~HeadSampler() = default;
  virtual bool should_profile(const SpanContext& span, std::string_view span_name) noexcept = 0;

  // A sampler whose decision is "the trace id's randomness (its last 56 bits) is
  // at least T" says T here, and guards then decide inline instead of calling
  // should_profile: a span turned down is the common case and costs a few
  // nanoseconds, of which a virtual call is one or two. Read once, at start().
  static constexpr std::uint64_t decides_by_call = ~std::uint64_t{0};
  virtual std::uint64_t trace_id_threshold() const noexcept { return decides_by_call; }
};

class AlwaysSampler final : public HeadSampler {
 public:
  bool should_profile(const SpanContext&, std::string_view) noexcept override { return true; }
  std::uint64_t trace_id_threshold() const noexcept override { return 0; }
};

class NeverSampler final : public HeadSampler {
 public:
  bool should_profile(const SpanContext&, std::string_view) noexcept override { return false; }
  std::uint64_t trace_id_threshold() const noexcept override { return std::uint64_t{1} << 56; }  // beyond any
};

// For rules that fit in a lambda. The callback runs on the request thread.
class CallbackSampler final : public HeadSampler {
 public:
  using Callback = std::function<bool(const SpanContext&, std::string_view)>;
  explicit CallbackSampler(Callback callback) : callback_(std::move(callback)) {}
  bool should_profile(const SpanContext& span, std::string_view name) noexcept override {
    SPANPROF_TRY {
      return callback_ && callback_(span, name);
    } SPANPROF_CATCH_ALL {
      return false;
    }
  }

 private:
  Callback callback_;
};

namespace detail {

// NaN lands on 0: a probability nobody can read is safer as "never" than "always".
constexpr double clamp_unit_interval(double value) noexcept {
  return value > 0 ? (value < 1 ? value : 1.0) : 0.0;
}

constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One xorshift stream per thread, shared by every ProbabilitySampler: a constant
// initializer keeps the thread_local free of construction guards and TLS
// wrappers, and 0 doubles as "not seeded yet" since xorshift never reaches 0.
inline thread_local std::uint64_t probability_sampler_state = 0;
inline std::atomic<std::uint64_t> probability_sampler_seeds{0};

// Once per thread. The state's own address tells live threads apart, the sequence
// number tells apart threads that reuse a dead one's TLS block, and ASLR (of TLS
// and stack) makes processes differ. No syscall: seeding can happen on a "no".
SPANPROF_NOINLINE inline std::uint64_t seed_probability_sampler() noexcept {
  int stack_marker = 0;
  const auto tls = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&probability_sampler_state));
  const auto stack = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&stack_marker));
  const std::uint64_t sequence = probability_sampler_seeds.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t seed = splitmix64(tls ^ splitmix64(stack ^ splitmix64(sequence)));
  return seed != 0 ? seed : 0x9e3779b97f4a7c15ULL;
}

// xorshift64*: its high bits are the good ones, so callers take those.
inline std::uint64_t next_probability_random() noexcept {
  std::uint64_t x = probability_sampler_state;
  if (SPANPROF_UNLIKELY(x == 0)) x = seed_probability_sampler();
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  probability_sampler_state = x;
  return x * 0x2545f4914f6cdd1dULL;
}

}  // namespace detail

// Profiles each span with probability p, independently of every other span, so
// one trace's spans are profiled piecemeal; use TraceIdRatioSampler to keep or
// drop whole traces. p is clamped to [0, 1]; 0 never profiles and 1 always does.
class ProbabilitySampler final : public HeadSampler {
 public:
  explicit ProbabilitySampler(double p) noexcept
      : probability_(detail::clamp_unit_interval(p)),
        threshold_(probability_ >= 1 ? one_ : static_cast<std::uint64_t>(probability_ * 0x1p53)) {}

  bool should_profile(const SpanContext&, std::string_view) noexcept override {
    // p = 0 answers without touching the thread's stream at all.
    if (threshold_ == 0) return false;
    // A 53-bit draw against p scaled by 2^53: exact for p = 1 (every draw is
    // below 2^53), and p is honoured to within 2^-53 in between.
    return (detail::next_probability_random() >> 11) < threshold_;
  }

  double probability() const noexcept { return probability_; }

 private:
  static constexpr std::uint64_t one_ = std::uint64_t{1} << 53;
  double probability_;
  std::uint64_t threshold_;
};

// Decides from the trace id alone, so every process and every instance that uses
// the same ratio makes the same decision for a trace, and a trace profiled at some
// ratio is profiled at every higher one. The algorithm is OpenTelemetry's
// consistent-probability sampling, so it also agrees with OpenTelemetry SDKs that
// implement it:
//   randomness R = the trace id's least-significant 56 bits (its last 7 bytes,
//                  read big-endian), random by W3C Trace Context level 2;
//   threshold  T = (1 - ratio) * 2^56, rounded to the nearest integer, computed
//                  once here;
//   profile iff R >= T.
// ratio <= 0 (or NaN) gives T = 2^56, which no R reaches; ratio >= 1 gives T = 0.
class TraceIdRatioSampler final : public HeadSampler {
 public:
  static constexpr std::uint64_t max_threshold = std::uint64_t{1} << 56;

  explicit TraceIdRatioSampler(double ratio) noexcept
      : ratio_(detail::clamp_unit_interval(ratio)), threshold_(threshold_for(ratio_)) {}

  bool should_profile(const SpanContext& span, std::string_view) noexcept override {
    return randomness(span.trace_id) >= threshold_;
  }
  std::uint64_t trace_id_threshold() const noexcept override { return threshold_; }

  static std::uint64_t randomness(const TraceId& trace_id) noexcept { return detail::trace_id_randomness(trace_id); }

  double ratio() const noexcept { return ratio_; }
  std::uint64_t threshold() const noexcept { return threshold_; }

 private:
  static std::uint64_t threshold_for(double ratio) noexcept {
    if (ratio <= 0) return max_threshold;
    if (ratio >= 1) return 0;
    return static_cast<std::uint64_t>(std::llround((1.0 - ratio) * 0x1p56));
  }

  double ratio_;
  std::uint64_t threshold_;
};

// Profiles the spans of traces the tracer decided to keep (the sampled bit of the
// trace flags), so every profile has a trace to be opened from.
class ParentSampledSampler final : public HeadSampler {
 public:
  bool should_profile(const SpanContext& span, std::string_view) noexcept override { return span.flags.sampled(); }
};

// At most `burst` spans at once and `per_second` sustained: a token bucket kept as
// GCRA (generic cell rate algorithm), i.e. one "theoretical arrival time" (TAT)
// advanced by a CAS loop, so it is lock-free and a "no" is one clock read, one
// load and a compare. The clock is read only inside should_profile.
//
// Exactness contract. Time is counted in whole units of 1/q ns, with q the
// smallest of 1..16 that makes the emission interval I = 1e9/per_second ns a
// whole number of units, so I is exact for 0.5/s, 1/s, 3/s, 7/s, 10/s, 1000/s and
// every other rate with such a q. (Other rates get I rounded down to a multiple of
// 1/16 ns, so they run fast by under one part in 16*I/ns.) burst is taken as
// B = max(1, floor(burst)). Then:
//   * calls at one instant, with the limiter fresh or idle since its TAT, get
//     exactly B yeses however many threads make them;
//   * no window of length D holds more than B + floor(D/I) yeses;
//   * after B yeses at t0, the calls in (t0, t0 + D] get exactly floor(D/I) =
//     floor(D * per_second / 1e9) yeses when every permit instant t0 + k*I up to
//     t0 + D sees a call (as a ManualClock stepped by a divisor of I gives), or
//     when B >= 2, calls are less than I apart and one comes at t0 + D.
// With B = 1 a call that comes after its permit was due pushes the schedule back
// (the bucket holds one token and the excess spills), so the sustained rate falls
// short of per_second under jittered traffic; use B >= 2 where that matters.
// State is kept modulo 2^64 units, so the limiter must be asked at least once
// every 2^63/q ns (18 years at q = 16); longer idle periods misread the past as
// the future. Rates under one per 2^60 units are treated as one per 2^60 units.
// per_second <= 0 (or NaN) never profiles and never reads the clock.
class RateLimitingSampler final : public HeadSampler {
 public:
  explicit RateLimitingSampler(double per_second, double burst = 1,
                               std::shared_ptr<const Clock> clock = default_clock()) noexcept
      : clock_(std::move(clock)), per_second_(per_second > 0 ? per_second : 0.0) {
    if (!clock_) {
      SPANPROF_TRY {
        clock_ = default_clock();
      } SPANPROF_CATCH_ALL {
      }
    }
    configure(burst);
  }

  bool should_profile(const SpanContext&, std::string_view) noexcept override {
    if (never_) return false;
    const std::uint64_t now = static_cast<std::uint64_t>(clock_->now_ns()) * scale_;
    std::int64_t observed = tat_.load(std::memory_order_relaxed);
    for (;;) {
      std::uint64_t start = now;
      if (observed != fresh_) {
        const std::uint64_t tat = static_cast<std::uint64_t>(observed);
        const std::int64_t ahead = to_signed(tat - now);
        if (ahead > tolerance_) return false;
        if (ahead > 0) start = tat;  // permits still owed: queue behind them
      }
      std::int64_t next = to_signed(start + interval_);
      // One unit later rather than be taken for a fresh bucket (1 in 2^64).
      if (SPANPROF_UNLIKELY(next == fresh_)) ++next;
      if (tat_.compare_exchange_weak(observed, next, std::memory_order_relaxed, std::memory_order_relaxed))
        return true;
    }
  }

  double per_second() const noexcept { return per_second_; }
  std::int64_t burst() const noexcept { return burst_; }

 private:
  static constexpr std::int64_t fresh_ = std::numeric_limits<std::int64_t>::min();
  static constexpr std::int64_t max_scale_ = 16;
  static constexpr double max_interval_ = 0x1p60;

  // Two's complement by arithmetic, not by an implementation-defined cast.
  static constexpr std::int64_t to_signed(std::uint64_t bits) noexcept {
    return bits <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
               ? static_cast<std::int64_t>(bits)
               : -static_cast<std::int64_t>(~bits) - 1;
  }

  void configure(double burst) noexcept {
    if (!(per_second_ > 0) || !clock_) {
      never_ = true;
      return;
    }
    std::int64_t scale = 0;
    double interval = 0;
    for (std::int64_t q = 1; q <= max_scale_ && scale == 0; ++q) {
      const double units = 1e9 * static_cast<double>(q) / per_second_;
      if (units >= max_interval_) {
        scale = q;
        interval = max_interval_;
      } else if (units >= 1 && std::fabs(units - std::nearbyint(units)) <= 1e-6) {
        // The tolerance absorbs the binary rounding of 1e9*q/per_second; a
        // millionth of a unit is far below anything a nanosecond clock can show.
        scale = q;
        interval = std::nearbyint(units);
      }
    }
    if (scale == 0) {
      scale = max_scale_;
      interval = std::max(1.0, std::floor(1e9 * static_cast<double>(max_scale_) / per_second_));
    }
    // B*I stays under 2^62, so every difference the CAS loop takes fits an int64.
    const double max_burst = std::floor(0x1p62 / interval);
    double b = burst >= 1 ? std::floor(burst) : 1.0;  // NaN lands on 1
    if (b > max_burst) b = max_burst;
    scale_ = static_cast<std::uint64_t>(scale);
    interval_ = static_cast<std::uint64_t>(interval);
    burst_ = static_cast<std::int64_t>(b);
    tolerance_ = (burst_ - 1) * static_cast<std::int64_t>(interval_);
  }

  std::shared_ptr<const Clock> clock_;
  double per_second_;
  bool never_ = false;
  std::uint64_t scale_ = 1;     // clock units per nanosecond
  std::uint64_t interval_ = 1;  // I, in clock units
  std::int64_t burst_ = 1;
  std::int64_t tolerance_ = 0;  // (B - 1) * I: how far ahead of now the TAT may run
  std::atomic<std::int64_t> tat_{fresh_};
};

// Per-span-name rules: the first rule whose pattern matches the span name decides,
// through its sampler; a span no rule matches goes to the default sampler. Order
// is the caller's and is kept, so list specific names before the prefixes that
// would also match them ("GET /health" before "GET /*"). A pattern is an exact
// span name, or a prefix followed by one '*' ("*" alone matches every name); a
// '*' anywhere else is an ordinary character. A null sampler, in a rule or as the
// default, means "not profiled". Lookup compares string_views and allocates
// nothing; it is linear in the rules, which suits the handful a service has.
class SpanNameSampler final : public HeadSampler {
 public:
  struct Rule {
    std::string pattern;
    std::shared_ptr<HeadSampler> sampler;
  };

  explicit SpanNameSampler(std::vector<Rule> rules, std::shared_ptr<HeadSampler> default_sampler = nullptr) noexcept
      : rules_(std::move(rules)), default_(std::move(default_sampler)) {}

  bool should_profile(const SpanContext& span, std::string_view span_name) noexcept override {
    for (const Rule& rule : rules_) {
      if (matches(rule.pattern, span_name)) return rule.sampler && rule.sampler->should_profile(span, span_name);
    }
    return default_ && default_->should_profile(span, span_name);
  }

  static bool matches(std::string_view pattern, std::string_view name) noexcept {
    if (!pattern.empty() && pattern.back() == '*') {
      const std::string_view prefix = pattern.substr(0, pattern.size() - 1);
      return name.substr(0, prefix.size()) == prefix;
    }
    return pattern == name;
  }

 private:
  std::vector<Rule> rules_;
  std::shared_ptr<HeadSampler> default_;
};

// Yes iff every sampler says yes, asked in order and stopping at the first no.
// Put rate limiters last: a limiter spends a permit on every yes it gives, and
// one placed before a sampler that then says no would spend it on a span that is
// not profiled. Null entries are dropped; no samplers at all means yes.
class AllOfSampler final : public HeadSampler {
 public:
  explicit AllOfSampler(std::vector<std::shared_ptr<HeadSampler>> samplers) noexcept : samplers_(std::move(samplers)) {
    samplers_.erase(std::remove(samplers_.begin(), samplers_.end(), nullptr), samplers_.end());
  }

  bool should_profile(const SpanContext& span, std::string_view span_name) noexcept override {
    for (const auto& sampler : samplers_)
      if (!sampler->should_profile(span, span_name)) return false;
    return true;
  }

  const std::vector<std::shared_ptr<HeadSampler>>& samplers() const noexcept { return samplers_; }

 private:
  std::vector<std::shared_ptr<HeadSampler>> samplers_;
};

// Yes iff some sampler says yes, asked in order and stopping at the first yes (so
// a rate limiter here is only charged when everything before it said no). Null
// entries are dropped; no samplers at all means no.
class AnyOfSampler final : public HeadSampler {
 public:
  explicit AnyOfSampler(std::vector<std::shared_ptr<HeadSampler>> samplers) noexcept : samplers_(std::move(samplers)) {
    samplers_.erase(std::remove(samplers_.begin(), samplers_.end(), nullptr), samplers_.end());
  }

  bool should_profile(const SpanContext& span, std::string_view span_name) noexcept override {
    for (const auto& sampler : samplers_)
      if (sampler->should_profile(span, span_name)) return true;
    return false;
  }

  const std::vector<std::shared_ptr<HeadSampler>>& samplers() const noexcept { return samplers_; }

 private:
  std::vector<std::shared_ptr<HeadSampler>> samplers_;
};

// The name of 0.1, kept for one release.
using Sampler [[deprecated("renamed spanprof::HeadSampler")]] = HeadSampler;

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_POLICY_HEAD_SAMPLER_HPP_
