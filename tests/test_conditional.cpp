// Conditional profiling end to end: tail policies deciding at guard close on
// profiles really recorded, exceptions and marked errors, the adaptive trigger
// profiling a name whose latency jumped, and the decision counters.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>
#include <type_traits>

using spanprof_test::Collector;
using spanprof_test::span_number;
using spanprof_test::thread_cpu_seconds;

namespace {

SPANPROF_TEST_HOT_FUNCTION(burn_cpu)

spanprof::Options options_with(std::shared_ptr<spanprof::TailPolicy> policy, int hz = 500) {
  spanprof::Options options;
  options.frequency_hz = hz;
  options.tail_policy = std::move(policy);
  options.queue_capacity = 4096;
  return options;
}

std::vector<spanprof_test::CollectedProfile> profiles_of(Collector& collector, const spanprof::SpanContext& span) {
  std::vector<spanprof_test::CollectedProfile> out;
  for (const auto& p : collector.profiles())
    if (p.meta.record.span.span_id == span.span_id) out.push_back(p);
  return out;
}

// Every sample of the span's profile carries this reason, and the metadata agrees.
void check_reason(const spanprof_test::CollectedProfile& p, const std::string& reason) {
  CHECK(spanprof::to_string(p.meta.record.reason) == reason);
  REQUIRE_FALSE(p.decoded.samples.empty());
  for (const auto& sample : p.decoded.samples) CHECK(pprof_test::labels_of(sample).at("profile_reason") == reason);
}

__attribute__((noinline)) void profiled_then_throw(const spanprof::SpanContext& span) {
  spanprof::ScopedProfile guard(span, "throws");
  burn_cpu(0.03);
  throw std::runtime_error("request failed");
}

// A span type whose adapter reports the tracer's status.
struct TracedSpan {
  spanprof::SpanContext context;
  bool error = false;
};

}  // namespace

template <>
struct spanprof::span_adapter<TracedSpan> {
  static SpanContext context(const TracedSpan& s) noexcept { return s.context; }
  static std::string_view name(const TracedSpan&) noexcept { return "traced"; }
  static bool failed(const TracedSpan& s) noexcept { return s.error; }
};

// Read at close: binding a temporary would leave the guard a dangling span. That is
// one compile error (a static_assert, checked by tests/consumers/temporary_span.cpp).
static_assert(std::is_constructible_v<spanprof::ScopedProfile, const TracedSpan&>);
static_assert(std::is_constructible_v<spanprof::ScopedProfile, spanprof::NamedSpan&&>);

TEST_CASE("tail policies: the slow threshold boundary, errors, and first-reason-wins", "[tail]") {
  const auto span = span_number(500);
  spanprof::KeepSlowSpans slow(std::chrono::milliseconds(250));
  CHECK_FALSE(slow.decide({span, "x", 249'999'999, false}).keep);
  const auto at = slow.decide({span, "x", 250'000'000, false});
  CHECK(at.keep);
  CHECK(at.reason == spanprof::ProfileReason::slow);
  CHECK(slow.decide({span, "x", 250'000'001, false}).keep);

  spanprof::KeepErroredSpans errors;
  CHECK_FALSE(errors.decide({span, "x", 1, false}).keep);
  CHECK(errors.decide({span, "x", 1, true}).reason == spanprof::ProfileReason::error);

  auto any = spanprof::keep_any_of({std::make_shared<spanprof::KeepErroredSpans>(), nullptr,
                                    std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(250))});
  CHECK(any->decide({span, "x", 300'000'000, true}).reason == spanprof::ProfileReason::error);
  CHECK(any->decide({span, "x", 300'000'000, false}).reason == spanprof::ProfileReason::slow);
  CHECK_FALSE(any->decide({span, "x", 1, false}).keep);

  spanprof::CallbackTailPolicy throwing([](const spanprof::SpanOutcome&) -> spanprof::TailDecision {
    throw std::runtime_error("policy bug");
  });
  CHECK_FALSE(throwing.decide({span, "x", 1, true}).keep);
}

TEST_CASE("an exception leaving the scope keeps its profile as error; a clean span is discarded", "[tail]") {
  Collector collector(options_with(std::make_shared<spanprof::KeepErroredSpans>()));
  const auto before = spanprof::stats();
  const auto failing = span_number(510), clean = span_number(511);
  CHECK_THROWS_AS(profiled_then_throw(failing), std::runtime_error);
  {
    spanprof::ScopedProfile guard(clean, "clean");
    burn_cpu(0.03);
  }
  const auto kept = profiles_of(collector, failing);
  REQUIRE(kept.size() == 1);
  check_reason(kept[0], "error");
  CHECK(kept[0].decoded.duration_nanos >= 30'000'000);
  CHECK(profiles_of(collector, clean).empty());
  const auto after = spanprof::stats();
  CHECK(after.profiles_started - before.profiles_started == 2);
  CHECK(after.kept_error - before.kept_error == 1);
  CHECK(after.discarded_by_tail_policy - before.discarded_by_tail_policy == 1);
  // The discarded span cost no symbolization or upload: one profile enqueued.
  CHECK(after.profiles_enqueued - before.profiles_enqueued == 1);
}

TEST_CASE("nested guards and exceptions: each guard sees what crossed its own scope", "[tail]") {
  Collector collector(options_with(std::make_shared<spanprof::KeepErroredSpans>()));
  SECTION("an exception through both scopes marks both") {
    const auto outer = span_number(520), inner = span_number(521);
    try {
      spanprof::ScopedProfile outer_guard(outer, "outer");
      burn_cpu(0.02);
      spanprof::ScopedProfile inner_guard(inner, "inner");
      burn_cpu(0.02);
      throw std::runtime_error("both");
    } catch (const std::runtime_error&) {
    }
    REQUIRE(profiles_of(collector, inner).size() == 1);
    REQUIRE(profiles_of(collector, outer).size() == 1);
    check_reason(profiles_of(collector, inner)[0], "error");
    check_reason(profiles_of(collector, outer)[0], "error");
  }
  SECTION("an exception caught between them marks only the inner one") {
    const auto outer = span_number(522), inner = span_number(523);
    {
      spanprof::ScopedProfile outer_guard(outer, "outer");
      burn_cpu(0.02);
      try {
        spanprof::ScopedProfile inner_guard(inner, "inner");
        burn_cpu(0.02);
        throw std::runtime_error("inner only");
      } catch (const std::runtime_error&) {
      }
    }
    REQUIRE(profiles_of(collector, inner).size() == 1);
    check_reason(profiles_of(collector, inner)[0], "error");
    CHECK(profiles_of(collector, outer).empty());
  }
  SECTION("a guard opened during unwinding is not blamed for the exception already in flight") {
    const auto span = span_number(524);
    struct Cleanup {
      spanprof::SpanContext span;
      ~Cleanup() {
        spanprof::ScopedProfile guard(span, "cleanup");
        burn_cpu(0.02);
      }
    };
    try {
      Cleanup cleanup{span};
      throw std::runtime_error("unwinding");
    } catch (const std::runtime_error&) {
    }
    CHECK(profiles_of(collector, span).empty());
  }
}

TEST_CASE("set_error() and a span adapter's status mark a span as failed", "[tail]") {
  Collector collector(options_with(std::make_shared<spanprof::KeepErroredSpans>()));
  const auto marked = span_number(530), unmarked = span_number(531);
  {
    spanprof::ScopedProfile guard(marked, "marked");
    burn_cpu(0.02);
    guard.set_error();
  }
  {
    spanprof::ScopedProfile guard(unmarked, "unmarked");
    guard.set_error();
    burn_cpu(0.02);
    guard.set_error(false);  // recovered
  }
  REQUIRE(profiles_of(collector, marked).size() == 1);
  check_reason(profiles_of(collector, marked)[0], "error");
  CHECK(profiles_of(collector, unmarked).empty());

  TracedSpan traced{span_number(532), false};
  {
    spanprof::ScopedProfile guard(traced);
    burn_cpu(0.02);
    traced.error = true;  // the tracer records the failure before the scope ends
  }
  REQUIRE(profiles_of(collector, traced.context).size() == 1);
  check_reason(profiles_of(collector, traced.context)[0], "error");
}

TEST_CASE("a slow-span policy keeps the slow span, labelled slow, and discards the fast one", "[tail]") {
  Collector collector(options_with(std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(40))));
  const auto slow = span_number(540), fast = span_number(541);
  {
    spanprof::ScopedProfile guard(slow, "GET /slow");
    burn_cpu(0.08);
  }
  {
    spanprof::ScopedProfile guard(fast, "GET /fast");
    burn_cpu(0.005);
  }
  REQUIRE(profiles_of(collector, slow).size() == 1);
  check_reason(profiles_of(collector, slow)[0], "slow");
  CHECK(profiles_of(collector, fast).empty());
}

TEST_CASE("a span kept as slow with not one sample is counted and said, never silently missing", "[tail]") {
  Collector collector(options_with(std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(20))));
  const auto before = spanprof::stats();
  const auto waiting = span_number(545);
  {
    spanprof::ScopedProfile guard(waiting, "GET /waits");
    std::this_thread::sleep_for(std::chrono::milliseconds(40));  // slow, and no CPU to sample
  }
  spanprof::flush();
  const auto after = spanprof::stats();
  CHECK(profiles_of(collector, waiting).empty());
  CHECK(after.kept_slow - before.kept_slow == 1);
  CHECK(after.kept_without_samples - before.kept_without_samples == 1);
  CHECK(collector.has_error(spanprof::ErrorCode::no_samples, "kept as slow"));
}

// Out of line, so that the compiler cannot see the memory under the fragment.
__attribute__((noinline)) spanprof::Fragment* open_fragment_in(unsigned char* storage,
                                                               const spanprof::RequestProfile& request) {
  return new (storage) spanprof::Fragment(request);
}
__attribute__((noinline)) void close_fragment(spanprof::Fragment* fragment) { fragment->~Fragment(); }

TEST_CASE("a request kept as slow whose one fragment had no sample is not counted as kept without samples",
          "[tail]") {
  Collector collector(options_with(std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(20))));
  const auto before = spanprof::stats();
  const auto span = span_number(546);
  {
    spanprof::RequestProfile request(span, "GET /split");
    {
      // Built over dirty memory, as a fragment in an adapter's slot is (the
      // OpenTelemetry processor's): what the fragment does not set must not be read.
      alignas(spanprof::Fragment) unsigned char storage[sizeof(spanprof::Fragment)];
      std::memset(storage, 0xa5, sizeof storage);
      spanprof::Fragment* waits = open_fragment_in(storage, request);  // no CPU: no sample of its own
      CHECK(waits->active());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      close_fragment(waits);
    }
    spanprof::Fragment computes(request);
    burn_cpu(0.06);
  }
  spanprof::flush();
  const auto after = spanprof::stats();
  CHECK(profiles_of(collector, span).size() == 1);
  CHECK(after.kept_slow - before.kept_slow == 1);
  // A fragment is not a span: only its request, at its end, may say it kept nothing.
  CHECK(after.kept_without_samples - before.kept_without_samples == 0);
}

TEST_CASE("the adaptive trigger profiles the next spans of a name whose latency jumped", "[trigger]") {
  spanprof::Options options = options_with(nullptr, 1000);
  auto trigger = spanprof_test::profile_only_when_triggered(options);  // nothing profiled unless triggered
  Collector collector(options);
  const auto before = spanprof::stats();
  for (unsigned i = 0; i < 40; ++i) {
    spanprof::ScopedProfile guard(span_number(600 + i), "GET /orders");
    burn_cpu(0.001);
  }
  CHECK(collector.profiles().empty());
  for (unsigned i = 0; i < 10; ++i) {
    spanprof::ScopedProfile guard(span_number(700 + i), "GET /orders");
    burn_cpu(0.03);  // 30x slower than its baseline
  }
  const auto profiles = collector.profiles();
  REQUIRE(profiles.size() == 3);  // exactly N spans, then it stands down
  for (const auto& p : profiles) {
    check_reason(p, "triggered");
    CHECK(p.meta.record.span_name == "GET /orders");
  }
  const auto after = spanprof::stats();
  CHECK(after.kept_triggered - before.kept_triggered == 3);
  CHECK(after.triggers_armed == 1);
  CHECK(after.head_declined - before.head_declined == 50);
  CHECK(trigger->counters().spans_triggered == 3);
}

// A request (RequestProfile) is admitted and decided as a guard is: the trigger
// times the requests the head sampler declines, and profiles the next ones of a
// name whose latency jumped, whichever threads run them.
TEST_CASE("the adaptive trigger profiles the next requests of a name whose latency jumped", "[trigger][requests]") {
  spanprof::Options options = options_with(nullptr, 1000);
  auto trigger = spanprof_test::profile_only_when_triggered(options);  // nothing profiled unless triggered
  Collector collector(options);
  const auto before = spanprof::stats();
  const auto run_request = [](unsigned number, double cpu_seconds) {
    spanprof::RequestProfile request(span_number(number), "GET /orders");
    std::thread([&] {
      spanprof::Fragment fragment(request);
      burn_cpu(cpu_seconds);
    }).join();
    request.end();
  };
  for (unsigned i = 0; i < 40; ++i) run_request(900 + i, 0.001);
  spanprof::flush();
  CHECK(collector.profiles().empty());
  CHECK(trigger->counters().observed == 40);
  for (unsigned i = 0; i < 10; ++i) run_request(950 + i, 0.03);  // 30x slower than its baseline
  spanprof::flush();
  const auto profiles = collector.profiles();
  REQUIRE(profiles.size() == 3);  // exactly N requests, then it stands down
  for (const auto& p : profiles) {
    check_reason(p, "triggered");
    CHECK(p.meta.record.span_name == "GET /orders");
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
    CHECK(spanprof_test::share_on_stack(p.decoded, "burn_cpu", 1) > 0.9);  // what the fragment's thread ran
#endif
  }
  const auto after = spanprof::stats();
  CHECK(after.kept_triggered - before.kept_triggered == 3);
  CHECK(after.triggers_armed == 1);
  CHECK(after.head_declined - before.head_declined == 50);
  CHECK(after.profiles_started - before.profiles_started == 3);
  CHECK(after.discarded_by_tail_policy - before.discarded_by_tail_policy == 0);
  CHECK(trigger->counters().spans_triggered == 3);
}

TEST_CASE("decision counters add up", "[tail]") {
  auto policy = std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(15));
  spanprof::Options options = options_with(policy);
  std::atomic<int> calls{0};
  options.head_sampler = std::make_shared<spanprof::CallbackSampler>(
      [&](const spanprof::SpanContext&, std::string_view) { return calls.fetch_add(1) % 2 == 0; });
  Collector collector(options);
  const auto before = spanprof::stats();
  for (unsigned i = 0; i < 6; ++i) {
    spanprof::ScopedProfile guard(span_number(800 + i), "mixed");
    burn_cpu(i < 2 ? 0.03 : 0.001);  // spans 0 and 1 slow; only even spans are head-sampled
  }
  const auto after = spanprof::stats();
  CHECK(after.head_declined - before.head_declined == 3);
  CHECK(after.profiles_started - before.profiles_started == 3);
  CHECK(after.kept_slow - before.kept_slow == 1);  // span 0 (span 1 was declined)
  CHECK(after.discarded_by_tail_policy - before.discarded_by_tail_policy == 2);
  CHECK(collector.profiles().size() == 1);
}

namespace {

// A span whose trace id's last 7 bytes hold `randomness`; the 9 before are 0xff,
// which no ratio decision may read.
spanprof::SpanContext span_with_trace_randomness(std::uint64_t randomness, unsigned span_number_value) {
  std::array<std::uint8_t, 16> bytes{};
  for (std::size_t i = 0; i < 9; ++i) bytes[i] = 0xff;
  for (std::size_t i = 0; i < 7; ++i) bytes[15 - i] = static_cast<std::uint8_t>(randomness >> (8 * i));
  spanprof::SpanContext span = span_number(span_number_value);
  span.trace_id = spanprof::TraceId(bytes);
  return span;
}

}  // namespace

// Guards decide a trace-id ratio, always or never inline (HeadSampler::trace_id_threshold),
// without calling the sampler: the decision must still be the sampler's own.
TEST_CASE("guards turn spans down inline exactly as the trace-id ratio sampler would", "[tail]") {
  const std::uint64_t half = std::uint64_t{1} << 55;  // the threshold of ratio 0.5
  struct Case {
    std::shared_ptr<spanprof::HeadSampler> sampler;
    int declined;  // of the three spans below
  };
  const Case cases[] = {{std::make_shared<spanprof::TraceIdRatioSampler>(0.5), 1},
                        {std::make_shared<spanprof::NeverSampler>(), 3},
                        {std::make_shared<spanprof::AlwaysSampler>(), 0},
                        {nullptr, 0}};
  for (const Case& c : cases) {
    spanprof::Options options = options_with(nullptr);
    options.head_sampler = c.sampler;
    Collector collector(options);
    const auto before = spanprof::stats();
    int asked_no = 0;
    unsigned n = 900;
    for (const std::uint64_t randomness : {half - 1, half, (std::uint64_t{1} << 56) - 1}) {
      const spanprof::SpanContext span = span_with_trace_randomness(randomness, ++n);
      if (c.sampler && !c.sampler->should_profile(span, "GET /")) ++asked_no;
      spanprof::ScopedProfile guard(span, "GET /");
    }
    const auto after = spanprof::stats();
    CHECK(asked_no == c.declined);
    CHECK(after.head_declined - before.head_declined == static_cast<std::uint64_t>(c.declined));
    CHECK(after.guards_opened - before.guards_opened == static_cast<std::uint64_t>(3 - c.declined));
  }
}
