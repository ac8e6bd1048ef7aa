#include "support/catch.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/base/clock.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/runtime/options.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using spanprof::AllOfSampler;
using spanprof::AlwaysSampler;
using spanprof::AnyOfSampler;
using spanprof::ErrorCode;
using spanprof::ManualClock;
using spanprof::NeverSampler;
using spanprof::ParentSampledSampler;
using spanprof::ProbabilitySampler;
using spanprof::RateLimitingSampler;
using spanprof::HeadSampler;
using spanprof::SpanContext;
using spanprof::SpanNameSampler;
using spanprof::TraceIdRatioSampler;

namespace {

using spanprof_test::CountingClock;
using spanprof_test::contains;

constexpr std::int64_t second = 1'000'000'000;
constexpr std::uint64_t two_to_56 = std::uint64_t{1} << 56;

// A span whose trace id ends in the 56-bit `randomness`; the other 9 bytes are
// `high`, which the ratio sampler must ignore.
SpanContext span_with_randomness(std::uint64_t randomness, std::uint8_t flags = 0x01, std::uint8_t high = 0xab) {
  std::array<std::uint8_t, 16> bytes{};
  for (std::size_t i = 0; i < 9; ++i) bytes[i] = high;
  for (std::size_t i = 0; i < 7; ++i) bytes[15 - i] = static_cast<std::uint8_t>(randomness >> (8 * i));
  SpanContext span;
  span.trace_id = spanprof::TraceId(bytes);
  span.span_id = spanprof::SpanId::from_hex("00f067aa0ba902b7");
  span.flags.value = flags;
  return span;
}

SpanContext random_span(std::mt19937_64& rng) {
  std::array<std::uint8_t, 16> bytes{};
  const std::uint64_t hi = rng();
  const std::uint64_t lo = rng();
  for (std::size_t i = 0; i < 8; ++i) {
    bytes[i] = static_cast<std::uint8_t>(hi >> (8 * i));
    bytes[8 + i] = static_cast<std::uint8_t>(lo >> (8 * i));
  }
  SpanContext span;
  span.trace_id = spanprof::TraceId(bytes);
  span.span_id = spanprof::SpanId::from_hex("00f067aa0ba902b7");
  span.flags.value = 0x01;
  return span;
}

const SpanContext any_span = span_with_randomness(0x123456789abcde);

int count_yes(HeadSampler& sampler, int calls, const SpanContext& span = any_span, std::string_view name = "span") {
  int yes = 0;
  for (int i = 0; i < calls; ++i) yes += sampler.should_profile(span, name) ? 1 : 0;
  return yes;
}

// Answers a fixed value and counts how often it was asked, to prove who was not.
class CountingSampler final : public HeadSampler {
 public:
  explicit CountingSampler(bool answer) : answer_(answer) {}
  bool should_profile(const SpanContext&, std::string_view) noexcept override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return answer_;
  }
  int calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  bool answer_;
  std::atomic<int> calls_{0};
};


// Calls `per_step` times at every step of `step` ns after the clock's current
// instant t0, and at t0 + duration itself; returns the yeses in (t0, t0 + duration].
int drive(HeadSampler& sampler, ManualClock& clock, std::int64_t step, std::int64_t duration, int per_step = 3) {
  const std::int64_t end = clock.now_ns() + duration;
  int yes = 0;
  while (clock.now_ns() < end) {
    clock.set(std::min(clock.now_ns() + step, end));
    yes += count_yes(sampler, per_step);
  }
  return yes;
}

// Saves and clears the sampler variables; puts them back as they were.
class ScopedSamplerEnvironment {
 public:
  ScopedSamplerEnvironment() {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (const char* value = std::getenv(names_[i])) saved_[i] = std::string(value);
      ::unsetenv(names_[i]);
    }
  }
  ~ScopedSamplerEnvironment() {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (saved_[i]) ::setenv(names_[i], saved_[i]->c_str(), 1);
      else ::unsetenv(names_[i]);
    }
  }
  ScopedSamplerEnvironment(const ScopedSamplerEnvironment&) = delete;
  ScopedSamplerEnvironment& operator=(const ScopedSamplerEnvironment&) = delete;

  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void unset(const char* name) { ::unsetenv(name); }

 private:
  std::array<const char*, 3> names_ = {"SPANPROF_SAMPLER", "SPANPROF_SAMPLER_ARG",
                                       "SPANPROF_MAX_PROFILES_PER_SECOND"};
  std::array<std::optional<std::string>, 3> saved_;
};

struct CapturedError {
  ErrorCode code;
  std::string message;
};

// Routes reported errors into a list; restores the default handler afterwards.
class ErrorCapture {
 public:
  ErrorCapture() {
    auto errors = errors_;
    spanprof::set_error_handler(
        [errors](const spanprof::Error& e) { errors->push_back({e.code, std::string(e.message)}); });
  }
  ~ErrorCapture() { spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{}); }
  ErrorCapture(const ErrorCapture&) = delete;
  ErrorCapture& operator=(const ErrorCapture&) = delete;

  const std::vector<CapturedError>& errors() const { return *errors_; }
  void clear() { errors_->clear(); }

 private:
  std::shared_ptr<std::vector<CapturedError>> errors_ = std::make_shared<std::vector<CapturedError>>();
};


}  // namespace

// ---------------------------------------------------------------------------------
// Always, never, probability

TEST_CASE("always and never samplers answer the same for every span", "[samplers]") {
  AlwaysSampler always;
  NeverSampler never;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) {
    const auto span = random_span(rng);
    CHECK(always.should_profile(span, "a"));
    CHECK_FALSE(never.should_profile(span, "a"));
  }
  CHECK(always.should_profile(SpanContext{}, ""));
  CHECK_FALSE(never.should_profile(SpanContext{}, ""));
}

TEST_CASE("probability 0 never profiles and probability 1 always does", "[samplers]") {
  ProbabilitySampler zero(0.0);
  ProbabilitySampler one(1.0);
  CHECK(count_yes(zero, 100000) == 0);
  CHECK(count_yes(one, 100000) == 100000);
}

TEST_CASE("probability is clamped to [0, 1], NaN to 0", "[samplers]") {
  ProbabilitySampler below(-0.5);
  ProbabilitySampler above(7.0);
  ProbabilitySampler nan(std::numeric_limits<double>::quiet_NaN());
  CHECK(below.probability() == 0.0);
  CHECK(above.probability() == 1.0);
  CHECK(nan.probability() == 0.0);
  CHECK(count_yes(below, 10000) == 0);
  CHECK(count_yes(above, 10000) == 10000);
  CHECK(count_yes(nan, 10000) == 0);
}

TEST_CASE("probability 0.25 profiles a quarter of 200k spans, within 4 sigma", "[samplers]") {
  auto sampler = std::make_shared<ProbabilitySampler>(0.25);
  constexpr int n = 200000;
  const double expected = n * 0.25;
  const double sigma = std::sqrt(n * 0.25 * 0.75);
  const int yes = count_yes(*sampler, n);
  INFO("yes = " << yes << ", expected " << expected << " +- " << 4 * sigma);
  CHECK(std::abs(yes - expected) <= 4 * sigma);
}

TEST_CASE("probability draws come from a separate stream on each thread", "[samplers]") {
  ProbabilitySampler sampler(0.5);
  auto record = [&sampler](std::vector<bool>& out) {
    for (int i = 0; i < 128; ++i) out.push_back(sampler.should_profile(any_span, "x"));
  };
  std::vector<bool> a, b;
  std::thread ta(record, std::ref(a));
  ta.join();
  std::thread tb(record, std::ref(b));
  tb.join();
  REQUIRE(a.size() == 128);
  REQUIRE(b.size() == 128);
  // Equal by chance with probability 2^-128.
  CHECK(a != b);
}

// ---------------------------------------------------------------------------------
// Trace-id ratio

TEST_CASE("trace-id ratio reads the last 7 bytes of the trace id, big-endian", "[samplers]") {
  const auto parsed = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  REQUIRE(parsed);
  CHECK(TraceIdRatioSampler::randomness(parsed.context.trace_id) == 0xce929d0e0e4736ULL);
  // R / 2^56 = 0.8069...: profiled once 1 - ratio <= 0.8069, i.e. ratio >= 0.1931.
  CHECK(TraceIdRatioSampler(0.2).should_profile(parsed.context, "x"));
  CHECK_FALSE(TraceIdRatioSampler(0.19).should_profile(parsed.context, "x"));
}

TEST_CASE("trace-id ratio decides alike in separately constructed instances", "[samplers]") {
  for (double ratio : {0.001, 0.1, 0.37, 0.5, 0.9}) {
    INFO("ratio " << ratio);
    auto first = std::make_shared<TraceIdRatioSampler>(ratio);
    auto second_instance = std::make_shared<TraceIdRatioSampler>(ratio);
    CHECK(first->threshold() == second_instance->threshold());
    std::mt19937_64 rng(42);
    int disagreements = 0;
    int yes = 0;
    for (int i = 0; i < 10000; ++i) {
      const auto span = random_span(rng);
      const bool a = first->should_profile(span, "a");
      // The name and the ids outside the last 7 bytes do not matter, and asking
      // again gives the same answer.
      const bool b = second_instance->should_profile(span, "another name");
      const bool again = first->should_profile(span, "a");
      disagreements += (a != b || a != again) ? 1 : 0;
      yes += a ? 1 : 0;
    }
    CHECK(disagreements == 0);
    CHECK(yes > 0);
    CHECK(yes < 10000);
  }
}

TEST_CASE("trace-id ratio is monotonic: profiled at r means profiled at every r' >= r", "[samplers]") {
  const double ratios[] = {0.0, 0.001, 0.01, 0.1, 0.25, 0.3333, 0.5, 0.75, 0.9, 0.999, 1.0};
  std::vector<TraceIdRatioSampler> samplers;
  for (double r : ratios) samplers.emplace_back(r);
  for (std::size_t i = 1; i < samplers.size(); ++i) CHECK(samplers[i - 1].threshold() >= samplers[i].threshold());
  std::mt19937_64 rng(7);
  int violations = 0;
  for (int n = 0; n < 20000; ++n) {
    const auto span = random_span(rng);
    bool earlier = false;
    for (auto& sampler : samplers) {
      const bool now = sampler.should_profile(span, "x");
      if (earlier && !now) ++violations;
      earlier = earlier || now;
    }
  }
  CHECK(violations == 0);
}

TEST_CASE("trace-id ratio profiles the configured fraction of random traces, within 4 sigma", "[samplers]") {
  for (double ratio : {0.1, 0.5}) {
    INFO("ratio " << ratio);
    TraceIdRatioSampler sampler(ratio);
    std::mt19937_64 rng(2024);
    constexpr int n = 100000;
    int yes = 0;
    for (int i = 0; i < n; ++i) yes += sampler.should_profile(random_span(rng), "x") ? 1 : 0;
    const double sigma = std::sqrt(n * ratio * (1 - ratio));
    INFO("yes = " << yes);
    CHECK(std::abs(yes - n * ratio) <= 4 * sigma);
  }
}

TEST_CASE("trace-id ratio boundary: R = T - 1 is not profiled, R = T is", "[samplers]") {
  struct Case {
    double ratio;
    std::uint64_t threshold;
  };
  const Case cases[] = {
      {0.25, 54043195528445952ULL},  // 0.75 * 2^56, exact
      {0.5, two_to_56 / 2},
      {0.1, 0xe6666666666668ULL},  // round(0.9 * 2^56) with 0.9 as binary64 holds it
  };
  for (const auto& c : cases) {
    INFO("ratio " << c.ratio);
    TraceIdRatioSampler sampler(c.ratio);
    CHECK(sampler.threshold() == c.threshold);
    for (std::uint8_t high : {std::uint8_t{0x00}, std::uint8_t{0xff}}) {
      CHECK_FALSE(sampler.should_profile(span_with_randomness(c.threshold - 1, 0x01, high), "x"));
      CHECK(sampler.should_profile(span_with_randomness(c.threshold, 0x01, high), "x"));
    }
    // The sampled flag is the tracer's business, not this sampler's.
    CHECK(sampler.should_profile(span_with_randomness(c.threshold, 0x00), "x"));
  }
}

TEST_CASE("trace-id ratio 0 never profiles, 1 always does, out of range is clamped", "[samplers]") {
  TraceIdRatioSampler zero(0.0);
  TraceIdRatioSampler negative(-3.0);
  TraceIdRatioSampler nan(std::numeric_limits<double>::quiet_NaN());
  TraceIdRatioSampler one(1.0);
  TraceIdRatioSampler above(2.5);
  CHECK(zero.threshold() == two_to_56);
  CHECK(negative.threshold() == two_to_56);
  CHECK(nan.threshold() == two_to_56);
  CHECK(one.threshold() == 0);
  CHECK(above.threshold() == 0);
  CHECK(above.ratio() == 1.0);
  const auto highest = span_with_randomness(two_to_56 - 1);
  const auto lowest = span_with_randomness(0);
  CHECK_FALSE(zero.should_profile(highest, "x"));
  CHECK_FALSE(negative.should_profile(highest, "x"));
  CHECK_FALSE(nan.should_profile(highest, "x"));
  CHECK(one.should_profile(lowest, "x"));
  CHECK(above.should_profile(lowest, "x"));
}

// ---------------------------------------------------------------------------------
// Parent sampled

TEST_CASE("parent-sampled follows the sampled bit of the trace flags", "[samplers]") {
  ParentSampledSampler sampler;
  CHECK_FALSE(sampler.should_profile(span_with_randomness(1, 0x00), "x"));
  CHECK(sampler.should_profile(span_with_randomness(1, 0x01), "x"));
  CHECK(sampler.should_profile(span_with_randomness(1, 0x03), "x"));
  CHECK_FALSE(sampler.should_profile(span_with_randomness(1, 0x02), "x"));
  const auto parsed = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  REQUIRE(parsed);
  CHECK_FALSE(sampler.should_profile(parsed.context, "x"));
}

// ---------------------------------------------------------------------------------
// Rate limiting

TEST_CASE("rate limiter: a burst at one instant gets exactly floor(burst) yeses", "[samplers]") {
  struct Case {
    double burst;
    std::int64_t expected;
  };
  for (const auto& c : {Case{1, 1}, Case{2.7, 2}, Case{5, 5}, Case{0.3, 1}, Case{100, 100}}) {
    INFO("burst " << c.burst);
    auto clock = std::make_shared<ManualClock>();
    auto limiter = std::make_shared<RateLimitingSampler>(10.0, c.burst, clock);
    CHECK(limiter->burst() == c.expected);
    CHECK(count_yes(*limiter, 1000) == c.expected);
    // Time frozen: nothing more, however often it is asked.
    CHECK(count_yes(*limiter, 1000) == 0);
  }
}

TEST_CASE("rate limiter: floor(T * rate) more over T seconds, clock stepped by a divisor of I", "[samplers]") {
  SECTION("10/s, burst 1, 1 ms steps, 10 s") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(10.0, 1, clock);
    CHECK(count_yes(limiter, 50) == 1);
    CHECK(drive(limiter, *clock, 1'000'000, 10 * second) == 100);
  }
  SECTION("10/s, burst 5, 1 ms steps, 10 s") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(10.0, 5, clock);
    CHECK(count_yes(limiter, 50) == 5);
    CHECK(drive(limiter, *clock, 1'000'000, 10 * second) == 100);
  }
  SECTION("1000/s, burst 1, 250 us steps, 3 s") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(1000.0, 1, clock);
    CHECK(count_yes(limiter, 50) == 1);
    CHECK(drive(limiter, *clock, 250'000, 3 * second) == 3000);
  }
}

TEST_CASE("rate limiter: a fractional rate such as 0.5/s is exact", "[samplers]") {
  auto clock = std::make_shared<ManualClock>();
  RateLimitingSampler limiter(0.5, 1, clock);
  CHECK(count_yes(limiter, 20) == 1);
  // Not one more until the full 2 s have passed...
  CHECK(drive(limiter, *clock, 1'000'000, 2 * second - 1'000'000) == 0);
  clock->advance(999'999);
  CHECK(count_yes(limiter, 20) == 0);
  clock->advance(1);
  CHECK(count_yes(limiter, 20) == 1);
  // ...and floor(T * 0.5) over the next T = 9 s.
  CHECK(drive(limiter, *clock, 1'000'000, 9 * second) == 4);
}

TEST_CASE("rate limiter: with burst >= 2, jittered calls still get exactly floor(T * rate)", "[samplers]") {
  SECTION("3/s (I = 1/3 s, not a whole number of ns), burst 2, steps of 999983 ns") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(3.0, 2, clock);
    CHECK(count_yes(limiter, 10) == 2);
    CHECK(drive(limiter, *clock, 999'983, 10 * second, 1) == 30);
  }
  SECTION("7/s, burst 3, steps of 1234567 ns") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(7.0, 3, clock);
    CHECK(count_yes(limiter, 10) == 3);
    CHECK(drive(limiter, *clock, 1'234'567, 9 * second, 1) == 63);
  }
  SECTION("3e6/s (I = 333.33 ns, where rounding I to whole ns would grant 0.1% too many), burst 2") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(3e6, 2, clock);
    CHECK(count_yes(limiter, 10) == 2);
    CHECK(drive(limiter, *clock, 97, second / 100, 1) == 30000);
  }
  SECTION("10/s, burst 4, random steps shorter than I") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(10.0, 4, clock);
    CHECK(count_yes(limiter, 10) == 4);
    std::mt19937_64 rng(99);
    std::uniform_int_distribution<std::int64_t> step(1, second / 10 - 1);
    const std::int64_t end = clock->now_ns() + 20 * second;
    int yes = 0;
    while (clock->now_ns() < end) {
      clock->set(std::min(clock->now_ns() + step(rng), end));
      yes += count_yes(limiter, 1);
    }
    CHECK(yes == 200);
  }
}

TEST_CASE("rate limiter: no window of length D holds more than burst + floor(D / I) yeses", "[samplers]") {
  for (std::int64_t burst : {1, 3}) {
    INFO("burst " << burst);
    auto clock = std::make_shared<ManualClock>();
    constexpr std::int64_t interval = second / 4;  // 4/s
    RateLimitingSampler limiter(4.0, static_cast<double>(burst), clock);
    std::mt19937_64 rng(static_cast<std::uint64_t>(burst));
    std::uniform_int_distribution<std::int64_t> step(0, 3 * interval);
    std::uniform_int_distribution<int> calls(1, 4);
    std::vector<std::int64_t> granted;
    for (int i = 0; i < 2000; ++i) {
      clock->advance(step(rng));
      const int n = calls(rng);
      for (int k = 0; k < n; ++k)
        if (limiter.should_profile(any_span, "x")) granted.push_back(clock->now_ns());
    }
    REQUIRE(granted.size() > 100);
    int violations = 0;
    for (std::size_t i = 0; i < granted.size(); ++i)
      for (std::size_t j = i; j < granted.size(); ++j) {
        const auto allowed = burst + (granted[j] - granted[i]) / interval;
        if (static_cast<std::int64_t>(j - i + 1) > allowed) ++violations;
      }
    CHECK(violations == 0);
  }
}

TEST_CASE("rate limiter: after a long idle period only burst again, not what accrued", "[samplers]") {
  auto clock = std::make_shared<ManualClock>();
  RateLimitingSampler limiter(10.0, 5, clock);
  CHECK(count_yes(limiter, 100) == 5);
  clock->advance(3600 * second);
  CHECK(count_yes(limiter, 100000) == 5);
  clock->advance(second / 10);
  CHECK(count_yes(limiter, 100) == 1);
}

TEST_CASE("rate limiter: 4 threads at one frozen instant get exactly floor(burst) yeses in total", "[samplers]") {
  // All four threads call at the same frozen instant; the total must be exact
  // however their CAS attempts interleave.
  auto race = [](RateLimitingSampler& limiter, int calls_per_thread) {
    std::atomic<int> ready{0};
    std::atomic<int> total{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < 4) {
        }
        int yes = 0;
        for (int i = 0; i < calls_per_thread; ++i) yes += limiter.should_profile(any_span, "x") ? 1 : 0;
        total.fetch_add(yes);
      });
    }
    for (auto& thread : threads) thread.join();
    return total.load();
  };

  SECTION("a small burst, then one interval, then a long idle") {
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(10.0, 7.9, clock);
    CHECK(race(limiter, 20000) == 7);
    clock->advance(second / 10);  // exactly one interval: one permit
    CHECK(race(limiter, 20000) == 1);
    clock->advance(3600 * second);
    CHECK(race(limiter, 20000) == 7);
  }
  SECTION("a large burst, so the threads contend for every permit, many rounds") {
    // 50000 permits keep the threads racing for milliseconds; a round starts a
    // full second after the last, longer than B * I = 50 ms, so the bucket is full.
    auto clock = std::make_shared<ManualClock>();
    RateLimitingSampler limiter(1e6, 50000, clock);
    int wrong_rounds = 0;
    for (int round = 0; round < 20; ++round) {
      clock->advance(second);
      if (race(limiter, 50000) != 50000) ++wrong_rounds;
    }
    CHECK(wrong_rounds == 0);
  }
}

TEST_CASE("rate limiter reads the clock only when asked; a rate <= 0 never profiles", "[samplers]") {
  auto clock = std::make_shared<CountingClock>();
  RateLimitingSampler limiter(100.0, 2, clock);
  CHECK(clock->reads() == 0);
  CHECK(count_yes(limiter, 5) == 2);
  CHECK(clock->reads() == 5);

  for (double rate : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    INFO("rate " << rate);
    auto idle_clock = std::make_shared<CountingClock>();
    RateLimitingSampler never(rate, 10, idle_clock);
    CHECK(count_yes(never, 1000) == 0);
    CHECK(idle_clock->reads() == 0);
    CHECK(never.per_second() == 0.0);
  }
}

// ---------------------------------------------------------------------------------
// Span-name rules

TEST_CASE("span-name rules: exact names, prefixes and the default", "[samplers]") {
  auto checkout = std::make_shared<CountingSampler>(true);
  SpanNameSampler sampler({{"GET /health", std::make_shared<NeverSampler>()},
                           {"GET /*", std::make_shared<AlwaysSampler>()},
                           {"POST /checkout", checkout}});
  CHECK_FALSE(sampler.should_profile(any_span, "GET /health"));
  CHECK(sampler.should_profile(any_span, "GET /users/42"));
  CHECK(sampler.should_profile(any_span, "GET /"));
  CHECK(sampler.should_profile(any_span, "GET /health/deep"));  // not the exact name: the prefix rule
  CHECK_FALSE(sampler.should_profile(any_span, "GET"));          // shorter than the prefix: default
  CHECK(sampler.should_profile(any_span, "POST /checkout"));
  CHECK(checkout->calls() == 1);
  CHECK_FALSE(sampler.should_profile(any_span, "POST /checkout/confirm"));  // exact means exact
  CHECK_FALSE(sampler.should_profile(any_span, "DELETE /cart"));            // null default: no
  CHECK(checkout->calls() == 1);
}

TEST_CASE("span-name rules: the first matching rule wins and later ones are not asked", "[samplers]") {
  auto later = std::make_shared<CountingSampler>(false);
  auto fallback = std::make_shared<CountingSampler>(false);
  SpanNameSampler sampler({{"GET /*", std::make_shared<AlwaysSampler>()}, {"GET /health", later}}, fallback);
  CHECK(sampler.should_profile(any_span, "GET /health"));
  CHECK(later->calls() == 0);
  CHECK(fallback->calls() == 0);
  CHECK_FALSE(sampler.should_profile(any_span, "PUT /x"));
  CHECK(fallback->calls() == 1);
}

TEST_CASE("span-name rules: the default sampler decides unmatched names", "[samplers]") {
  auto fallback = std::make_shared<CountingSampler>(true);
  SpanNameSampler sampler({{"internal.*", std::make_shared<NeverSampler>()}}, fallback);
  CHECK_FALSE(sampler.should_profile(any_span, "internal.flush"));
  CHECK(fallback->calls() == 0);
  CHECK(sampler.should_profile(any_span, "handle"));
  CHECK(fallback->calls() == 1);
  SpanNameSampler no_rules({}, std::make_shared<AlwaysSampler>());
  CHECK(no_rules.should_profile(any_span, "anything"));
  SpanNameSampler nothing({});
  CHECK_FALSE(nothing.should_profile(any_span, "anything"));
}

TEST_CASE("span-name patterns: '*' alone matches all, elsewhere it is literal; null rule sampler is no",
          "[samplers]") {
  CHECK(SpanNameSampler::matches("*", ""));
  CHECK(SpanNameSampler::matches("*", "anything"));
  CHECK(SpanNameSampler::matches("a*b", "a*b"));
  CHECK_FALSE(SpanNameSampler::matches("a*b", "axxb"));
  CHECK(SpanNameSampler::matches("", ""));
  CHECK_FALSE(SpanNameSampler::matches("", "x"));
  CHECK(SpanNameSampler::matches("db.*", "db."));
  CHECK_FALSE(SpanNameSampler::matches("db.*", "db"));

  auto fallback = std::make_shared<CountingSampler>(true);
  SpanNameSampler sampler({{"quiet", nullptr}}, fallback);
  CHECK_FALSE(sampler.should_profile(any_span, "quiet"));
  CHECK(fallback->calls() == 0);
}

// ---------------------------------------------------------------------------------
// Composition

TEST_CASE("all-of stops at the first no", "[samplers]") {
  auto first = std::make_shared<CountingSampler>(true);
  auto refuses = std::make_shared<CountingSampler>(false);
  auto never_asked = std::make_shared<CountingSampler>(true);
  AllOfSampler sampler({first, nullptr, refuses, never_asked});
  CHECK(sampler.samplers().size() == 3);
  CHECK_FALSE(sampler.should_profile(any_span, "x"));
  CHECK(first->calls() == 1);
  CHECK(refuses->calls() == 1);
  CHECK(never_asked->calls() == 0);

  auto a = std::make_shared<CountingSampler>(true);
  auto b = std::make_shared<CountingSampler>(true);
  AllOfSampler agree({a, b});
  CHECK(agree.should_profile(any_span, "x"));
  CHECK(a->calls() == 1);
  CHECK(b->calls() == 1);
}

TEST_CASE("any-of stops at the first yes", "[samplers]") {
  auto refuses = std::make_shared<CountingSampler>(false);
  auto accepts = std::make_shared<CountingSampler>(true);
  auto never_asked = std::make_shared<CountingSampler>(false);
  AnyOfSampler sampler({nullptr, refuses, accepts, never_asked});
  CHECK(sampler.samplers().size() == 3);
  CHECK(sampler.should_profile(any_span, "x"));
  CHECK(refuses->calls() == 1);
  CHECK(accepts->calls() == 1);
  CHECK(never_asked->calls() == 0);

  auto a = std::make_shared<CountingSampler>(false);
  auto b = std::make_shared<CountingSampler>(false);
  AnyOfSampler disagree({a, b});
  CHECK_FALSE(disagree.should_profile(any_span, "x"));
  CHECK(a->calls() == 1);
  CHECK(b->calls() == 1);
}

TEST_CASE("composition: empty and all-null lists, nesting", "[samplers]") {
  CHECK(AllOfSampler({}).should_profile(any_span, "x"));
  CHECK(AllOfSampler({nullptr, nullptr}).should_profile(any_span, "x"));
  CHECK_FALSE(AnyOfSampler({}).should_profile(any_span, "x"));
  CHECK_FALSE(AnyOfSampler({nullptr}).should_profile(any_span, "x"));

  // Profile traces the tracer kept, plus every checkout.
  AnyOfSampler nested({std::make_shared<ParentSampledSampler>(),
                       std::make_shared<SpanNameSampler>(std::vector<SpanNameSampler::Rule>{
                           {"POST /checkout", std::make_shared<AlwaysSampler>()}})});
  CHECK(nested.should_profile(span_with_randomness(1, 0x01), "GET /"));
  CHECK(nested.should_profile(span_with_randomness(1, 0x00), "POST /checkout"));
  CHECK_FALSE(nested.should_profile(span_with_randomness(1, 0x00), "GET /"));
}

TEST_CASE("all-of with the rate limiter last charges it only for accepted spans", "[samplers]") {
  auto clock = std::make_shared<ManualClock>();
  auto limiter = std::make_shared<RateLimitingSampler>(1.0, 2, clock);
  AllOfSampler sampler({std::make_shared<ParentSampledSampler>(), limiter});
  const auto unsampled = span_with_randomness(5, 0x00);
  const auto sampled = span_with_randomness(5, 0x01);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(sampler.should_profile(unsampled, "x"));
  CHECK(count_yes(sampler, 100, sampled) == 2);
}

// ---------------------------------------------------------------------------------
// Environment

TEST_CASE("head_sampler_from_environment: unset means null, every span", "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;
  CHECK(spanprof::head_sampler_from_environment() == nullptr);
  env.set("SPANPROF_SAMPLER", "");
  env.set("SPANPROF_SAMPLER_ARG", "");
  env.set("SPANPROF_MAX_PROFILES_PER_SECOND", "");
  CHECK(spanprof::head_sampler_from_environment() == nullptr);
  CHECK(capture.errors().empty());
}

TEST_CASE("head_sampler_from_environment: every sampler name", "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;

  SECTION("always_on") {
    env.set("SPANPROF_SAMPLER", "always_on");
    auto sampler = spanprof::head_sampler_from_environment();
    REQUIRE(dynamic_cast<AlwaysSampler*>(sampler.get()) != nullptr);
    CHECK(count_yes(*sampler, 100, span_with_randomness(0, 0x00)) == 100);
  }
  SECTION("always_off") {
    env.set("SPANPROF_SAMPLER", "always_off");
    auto sampler = spanprof::head_sampler_from_environment();
    REQUIRE(dynamic_cast<NeverSampler*>(sampler.get()) != nullptr);
    CHECK(count_yes(*sampler, 100, span_with_randomness(two_to_56 - 1)) == 0);
  }
  SECTION("traceidratio with an argument") {
    env.set("SPANPROF_SAMPLER", "traceidratio");
    env.set("SPANPROF_SAMPLER_ARG", "0.25");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* ratio = dynamic_cast<TraceIdRatioSampler*>(sampler.get());
    REQUIRE(ratio != nullptr);
    CHECK(ratio->ratio() == 0.25);
    CHECK_FALSE(sampler->should_profile(span_with_randomness(54043195528445952ULL - 1), "x"));
    CHECK(sampler->should_profile(span_with_randomness(54043195528445952ULL), "x"));
  }
  SECTION("traceidratio without an argument is 1.0") {
    env.set("SPANPROF_SAMPLER", "traceidratio");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* ratio = dynamic_cast<TraceIdRatioSampler*>(sampler.get());
    REQUIRE(ratio != nullptr);
    CHECK(ratio->ratio() == 1.0);
    CHECK(sampler->should_profile(span_with_randomness(0), "x"));
  }
  SECTION("probability") {
    env.set("SPANPROF_SAMPLER", "probability");
    env.set("SPANPROF_SAMPLER_ARG", "0");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* probability = dynamic_cast<ProbabilitySampler*>(sampler.get());
    REQUIRE(probability != nullptr);
    CHECK(probability->probability() == 0.0);
    CHECK(count_yes(*sampler, 10000) == 0);
    env.set("SPANPROF_SAMPLER_ARG", "0.25");
    auto quarter = spanprof::head_sampler_from_environment();
    REQUIRE(dynamic_cast<ProbabilitySampler*>(quarter.get()) != nullptr);
    CHECK(dynamic_cast<ProbabilitySampler*>(quarter.get())->probability() == 0.25);
  }
  SECTION("parentbased_always_on") {
    env.set("SPANPROF_SAMPLER", "parentbased_always_on");
    auto sampler = spanprof::head_sampler_from_environment();
    REQUIRE(dynamic_cast<ParentSampledSampler*>(sampler.get()) != nullptr);
    CHECK(sampler->should_profile(span_with_randomness(0, 0x01), "x"));
    CHECK_FALSE(sampler->should_profile(span_with_randomness(two_to_56 - 1, 0x00), "x"));
  }
  SECTION("parentbased_traceidratio: parent sampled AND ratio") {
    env.set("SPANPROF_SAMPLER", "parentbased_traceidratio");
    env.set("SPANPROF_SAMPLER_ARG", "0.5");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* all = dynamic_cast<AllOfSampler*>(sampler.get());
    REQUIRE(all != nullptr);
    REQUIRE(all->samplers().size() == 2);
    CHECK(dynamic_cast<ParentSampledSampler*>(all->samplers()[0].get()) != nullptr);
    CHECK(dynamic_cast<TraceIdRatioSampler*>(all->samplers()[1].get()) != nullptr);
    const std::uint64_t half = two_to_56 / 2;
    CHECK(sampler->should_profile(span_with_randomness(half, 0x01), "x"));
    CHECK_FALSE(sampler->should_profile(span_with_randomness(half - 1, 0x01), "x"));
    CHECK_FALSE(sampler->should_profile(span_with_randomness(half, 0x00), "x"));
    CHECK_FALSE(sampler->should_profile(span_with_randomness(half - 1, 0x00), "x"));
  }
  SECTION("names ignore ASCII case and surrounding blanks, as does the argument") {
    env.set("SPANPROF_SAMPLER", "  TraceIdRatio\t");
    env.set("SPANPROF_SAMPLER_ARG", " 0.5 ");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* ratio = dynamic_cast<TraceIdRatioSampler*>(sampler.get());
    REQUIRE(ratio != nullptr);
    CHECK(ratio->ratio() == 0.5);
  }
  SECTION("an argument is ignored by samplers that take none") {
    env.set("SPANPROF_SAMPLER", "always_on");
    env.set("SPANPROF_SAMPLER_ARG", "not a number");
    CHECK(dynamic_cast<AlwaysSampler*>(spanprof::head_sampler_from_environment().get()) != nullptr);
  }
  CHECK(capture.errors().empty());
}

TEST_CASE("head_sampler_from_environment: the rate limit is ANDed last", "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;

  SECTION("alone: a limiter with burst max(1, rate)") {
    env.set("SPANPROF_MAX_PROFILES_PER_SECOND", "0.001");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* limiter = dynamic_cast<RateLimitingSampler*>(sampler.get());
    REQUIRE(limiter != nullptr);
    CHECK(limiter->per_second() == 0.001);
    CHECK(limiter->burst() == 1);
    // One permit, then none for 1000 s of the real clock.
    CHECK(count_yes(*sampler, 1000) == 1);
  }
  SECTION("after a sampler") {
    env.set("SPANPROF_SAMPLER", "parentbased_traceidratio");
    env.set("SPANPROF_SAMPLER_ARG", "0.5");
    env.set("SPANPROF_MAX_PROFILES_PER_SECOND", "20");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* all = dynamic_cast<AllOfSampler*>(sampler.get());
    REQUIRE(all != nullptr);
    REQUIRE(all->samplers().size() == 3);
    CHECK(dynamic_cast<ParentSampledSampler*>(all->samplers()[0].get()) != nullptr);
    CHECK(dynamic_cast<TraceIdRatioSampler*>(all->samplers()[1].get()) != nullptr);
    auto* limiter = dynamic_cast<RateLimitingSampler*>(all->samplers()[2].get());
    REQUIRE(limiter != nullptr);
    CHECK(limiter->per_second() == 20.0);
    CHECK(limiter->burst() == 20);
  }
  SECTION("after always_on: the limiter alone, burst floored") {
    env.set("SPANPROF_SAMPLER", "always_on");
    env.set("SPANPROF_MAX_PROFILES_PER_SECOND", "2.5");
    auto sampler = spanprof::head_sampler_from_environment();
    auto* limiter = dynamic_cast<RateLimitingSampler*>(sampler.get());
    REQUIRE(limiter != nullptr);
    CHECK(limiter->per_second() == 2.5);
    CHECK(limiter->burst() == 2);
  }
  SECTION("after always_off: still never") {
    env.set("SPANPROF_SAMPLER", "always_off");
    env.set("SPANPROF_MAX_PROFILES_PER_SECOND", "5");
    auto sampler = spanprof::head_sampler_from_environment();
    REQUIRE(dynamic_cast<NeverSampler*>(sampler.get()) != nullptr);
  }
  CHECK(capture.errors().empty());
}

TEST_CASE("head_sampler_from_environment: an unknown name is reported once and every span is profiled", "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;
  env.set("SPANPROF_SAMPLER", "sometimes");
  env.set("SPANPROF_SAMPLER_ARG", "0.5");
  CHECK(spanprof::head_sampler_from_environment() == nullptr);
  REQUIRE(capture.errors().size() == 1);
  CHECK(capture.errors()[0].code == ErrorCode::invalid_configuration);
  CHECK(contains(capture.errors()[0].message, "SPANPROF_SAMPLER="));
  CHECK(contains(capture.errors()[0].message, "sometimes"));

  // OTEL's own name for its default is not one of ours either.
  capture.clear();
  env.set("SPANPROF_SAMPLER", "parentbased_always_off");
  CHECK(spanprof::head_sampler_from_environment() == nullptr);
  CHECK(capture.errors().size() == 1);
}

TEST_CASE("head_sampler_from_environment: a bad argument is reported once and read as 1.0", "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;
  const char* bad[] = {"abc", "0.5x", "1.5", "-0.1", "nan", "NaN", "inf", "0x1p-2", "0,5", "1e999", ".", "--1"};
  for (const char* sampler_name : {"traceidratio", "probability", "parentbased_traceidratio"}) {
    for (const char* value : bad) {
      INFO(sampler_name << " with SPANPROF_SAMPLER_ARG=" << value);
      capture.clear();
      env.set("SPANPROF_SAMPLER", sampler_name);
      env.set("SPANPROF_SAMPLER_ARG", value);
      auto sampler = spanprof::head_sampler_from_environment();
      REQUIRE(sampler != nullptr);
      REQUIRE(capture.errors().size() == 1);
      CHECK(capture.errors()[0].code == ErrorCode::invalid_configuration);
      CHECK(contains(capture.errors()[0].message, "SPANPROF_SAMPLER_ARG="));
      CHECK(contains(capture.errors()[0].message, value));
      // 1.0: even the lowest trace id of a kept trace is profiled.
      CHECK(count_yes(*sampler, 100, span_with_randomness(0, 0x01)) == 100);
    }
  }
}

TEST_CASE("head_sampler_from_environment: a bad rate is reported once and nothing is rate limited", "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;
  const char* bad[] = {"-5", "0", "fast", "10/s", "nan", "inf", "1e999", "5 5", "-0"};
  for (const char* value : bad) {
    INFO("SPANPROF_MAX_PROFILES_PER_SECOND=" << value);
    capture.clear();
    env.unset("SPANPROF_SAMPLER");
    env.set("SPANPROF_MAX_PROFILES_PER_SECOND", value);
    CHECK(spanprof::head_sampler_from_environment() == nullptr);
    REQUIRE(capture.errors().size() == 1);
    CHECK(capture.errors()[0].code == ErrorCode::invalid_configuration);
    CHECK(contains(capture.errors()[0].message, "SPANPROF_MAX_PROFILES_PER_SECOND="));
    CHECK(contains(capture.errors()[0].message, value));

    capture.clear();
    env.set("SPANPROF_SAMPLER", "traceidratio");
    env.set("SPANPROF_SAMPLER_ARG", "0.5");
    auto sampler = spanprof::head_sampler_from_environment();
    CHECK(dynamic_cast<TraceIdRatioSampler*>(sampler.get()) != nullptr);
    CHECK(capture.errors().size() == 1);
  }
}

TEST_CASE("head_sampler_from_environment: each bad variable is reported once per call, values truncated",
          "[samplers]") {
  ScopedSamplerEnvironment env;
  ErrorCapture capture;
  const std::string long_value(1000, 'x');
  env.set("SPANPROF_SAMPLER", long_value);
  env.set("SPANPROF_MAX_PROFILES_PER_SECOND", "lots");
  CHECK(spanprof::head_sampler_from_environment() == nullptr);
  REQUIRE(capture.errors().size() == 2);
  const auto& name_error = capture.errors()[0].message;
  CHECK(contains(name_error, "SPANPROF_SAMPLER=\"" + std::string(64, 'x') + "...\""));
  CHECK_FALSE(contains(name_error, std::string(65, 'x')));
  CHECK(name_error.size() < 400);
  CHECK(contains(capture.errors()[1].message, "SPANPROF_MAX_PROFILES_PER_SECOND=\"lots\""));
  for (const auto& e : capture.errors()) CHECK(e.code == ErrorCode::invalid_configuration);

  // A second call reports again, once each.
  capture.clear();
  CHECK(spanprof::head_sampler_from_environment() == nullptr);
  CHECK(capture.errors().size() == 2);
}
