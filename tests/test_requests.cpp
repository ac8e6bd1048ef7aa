// Requests made of fragments (request.hpp): one profile per request, whichever
// threads ran it, delivered once, when it ends or when its last handle goes.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>
#include <spanprof/detail/span/thread_context.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <future>
#include <thread>
#include <vector>

using spanprof_test::Collector;
using spanprof_test::span_number;

namespace {

SPANPROF_TEST_HOT_FUNCTION(request_stage_one)
SPANPROF_TEST_HOT_FUNCTION(request_stage_two)
SPANPROF_TEST_HOT_FUNCTION(request_stage_three)
SPANPROF_TEST_HOT_FUNCTION(request_outside)
SPANPROF_TEST_HOT_FUNCTION(request_inner_guard)

// Fragments are turns of a few ms on threads that switch between requests: the
// perf event samples at the sampling point, where the POSIX CPU timer's signal
// waits for the 4 ms scheduler tick and may land in the thread's next turn
// (docs/async.md). The first test runs long turns on the default source.
spanprof::Options requests_at_1khz(spanprof::CpuSampleSource source = spanprof::CpuSampleSource::perf_event) {
  spanprof::Options options;
  options.frequency_hz = 1000;
  options.cpu_sample_source = source;
  return options;
}

std::vector<const spanprof_test::CollectedProfile*> profiles_of(Collector& collector, unsigned span,
                                                                 std::vector<spanprof_test::CollectedProfile>& all) {
  all = collector.profiles();
  std::vector<const spanprof_test::CollectedProfile*> found;
  for (const auto& p : all)
    if (p.meta.record.span.span_id == span_number(span).span_id) found.push_back(&p);
  return found;
}

double sampled_cpu_seconds(const spanprof::Profile& profile) {
  return static_cast<double>(spanprof_test::value_total(profile, 1)) * 1e-9;
}

}  // namespace

TEST_CASE("a request run by three threads in turn is one profile with every turn's functions and CPU", "[requests]") {
  Collector collector(requests_at_1khz(spanprof::CpuSampleSource::automatic));
  spanprof::RequestProfile request(span_number(950), "GET /orders");
  REQUIRE(request.active());
  std::atomic<double> fragments_cpu{0};
  auto timed = [&](auto&& work) {
    const double before = spanprof_test::thread_cpu_seconds();
    work();
    fragments_cpu.store(fragments_cpu.load() + spanprof_test::thread_cpu_seconds() - before);
  };
  std::thread([&] {
    spanprof::Fragment fragment(request);
    CHECK(fragment.active());
    timed([] { request_stage_one(0.15); });
  }).join();
  // Wrapped callables, as handed to threads, executors and futures.
  std::thread(spanprof::bind(request, [&] { timed([] { request_stage_two(0.15); }); })).join();
  std::async(std::launch::async, spanprof::bind(request, [&] { timed([] { request_stage_three(0.15); }); })).get();
  request_outside(0.05);  // no fragment runs here: not the request's
  request.end();
  CHECK_FALSE(request.active());

  std::vector<spanprof_test::CollectedProfile> all;
  const auto found = profiles_of(collector, 950, all);
  REQUIRE(found.size() == 1);
  const auto& profile = found.front()->decoded;
  CHECK(found.front()->meta.record.kind == spanprof::ProfileKind::cpu);
  CHECK(found.front()->meta.record.span_name == "GET /orders");
  CHECK(spanprof_test::share_on_stack(profile, "request_outside") == 0.0);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
  for (const char* stage : {"request_stage_one", "request_stage_two", "request_stage_three"})
    CHECK(spanprof_test::share_on_stack(profile, stage) > 0.2);
  const double ratio = sampled_cpu_seconds(profile) / fragments_cpu.load();
  INFO("sampled " << sampled_cpu_seconds(profile) << " s of " << fragments_cpu.load() << " s in fragments");
  CHECK(ratio > 0.85);
  CHECK(ratio < 1.15);
#endif
}

TEST_CASE("end() while a fragment runs elsewhere: the request is delivered when that fragment closes, with its samples",
          "[requests]") {
  Collector collector(requests_at_1khz());
  const std::uint64_t abandoned_before = spanprof::stats().requests_abandoned;  // counted across restarts
  spanprof::RequestProfile request(span_number(951), "GET /late");
  std::atomic<int> phase{0};
  std::thread late([&, handle = request] {
    spanprof::Fragment fragment(handle);
    request_stage_one(0.05);
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
    request_stage_two(0.1);
  });
  while (phase.load() != 1) std::this_thread::yield();
  request.end();
  std::vector<spanprof_test::CollectedProfile> all;
  CHECK(profiles_of(collector, 951, all).empty());  // still running on the other thread
  phase.store(2);
  late.join();
  const auto found = profiles_of(collector, 951, all);
  REQUIRE(found.size() == 1);
  CHECK(spanprof_test::share_on_stack(found.front()->decoded, "request_stage_two") > 0.4);
  // A fragment after the end records nothing.
  CHECK(spanprof::stats().requests_abandoned == abandoned_before);
}

// A span adapter whose fragment outlives its turn (an OpenTelemetry span started on
// one thread, ended on another): the ending thread takes the records over, and the
// request is delivered at end(), though its first thread idles with the fragment open.
TEST_CASE("take_records_over: a fragment left open on an idle thread is delivered at end() from another thread",
          "[requests]") {
  Collector collector(requests_at_1khz(spanprof::CpuSampleSource::automatic));
  const auto before = spanprof::stats();
  spanprof::RequestProfile request(span_number(953), "GET /taken");
  std::atomic<bool> stopped{false};
  std::atomic<int> phase{0};
  spanprof::Fragment* open = nullptr;
  std::thread idle([&, handle = request] {
    spanprof::Fragment fragment(handle);
    fragment.stop_sampling_when(stopped);
    open = &fragment;
    request_stage_one(0.15);
    phase.store(1);
    // Busy while the records are copied: its samples stop at the flag.
    while (phase.load() != 2) request_inner_guard(0.001);
    request_stage_two(0.05);  // after the end: the request's no more
  });
  while (phase.load() != 1) std::this_thread::yield();
  stopped.store(true);
  const bool taken = open->take_records_over();
  request.end();
  std::vector<spanprof_test::CollectedProfile> all;
  const std::size_t delivered_before_close = profiles_of(collector, 953, all).size();
  phase.store(2);
  idle.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  CHECK(taken);
  CHECK(delivered_before_close == 1);
  const auto found = profiles_of(collector, 953, all);
  REQUIRE(found.size() == 1);
  CHECK(spanprof_test::share_on_stack(found.front()->decoded, "request_stage_two") == 0.0);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
  CHECK(spanprof_test::share_on_stack(found.front()->decoded, "request_stage_one") > 0.8);
  // What the take-over copies is what was recorded: a point the kernel delivers
  // after the stop flag (late, under load) is not, so only a loose lower bound.
  const double sampled = sampled_cpu_seconds(found.front()->decoded);
  CHECK(sampled > 0.15 * 0.6);
  CHECK(sampled < 0.15 * 1.15 + 0.01);
#endif
  CHECK(spanprof::stats().requests_abandoned == before.requests_abandoned);
}

TEST_CASE("a request whose handles all go without end() is delivered once, as it was, and counted", "[requests]") {
  Collector collector(requests_at_1khz());
  const auto before = spanprof::stats();
  {
    spanprof::RequestProfile request(span_number(952), "GET /abandoned");
    auto copy = request;
    std::thread([task = spanprof::bind(copy, [] { request_stage_one(0.1); })] { task(); }).join();
  }
  std::vector<spanprof_test::CollectedProfile> all;
  const auto found = profiles_of(collector, 952, all);
  REQUIRE(found.size() == 1);
  CHECK(spanprof_test::share_on_stack(found.front()->decoded, "request_stage_one") > 0.5);
  CHECK(spanprof::stats().requests_abandoned - before.requests_abandoned == 1);
}

TEST_CASE("fragments nest: the same request's inner fragment counts once, a guard inside gets its own profile too",
          "[requests]") {
  Collector collector(requests_at_1khz());
  spanprof::RequestProfile request(span_number(953), "GET /nested");
  {
    spanprof::Fragment outer(request);
    request_stage_one(0.1);
    {
      spanprof::Fragment again(request);  // e.g. a handler dispatched inline
      CHECK_FALSE(again.active());
      spanprof::ScopedProfile guard(span_number(954), "render");
      request_inner_guard(0.1);
    }
  }
  request.end();
  {
    spanprof::Fragment after_end(request);  // an empty handle now
    CHECK_FALSE(after_end.active());
  }
  std::vector<spanprof_test::CollectedProfile> all;
  const auto found = profiles_of(collector, 953, all);
  REQUIRE(found.size() == 1);
  const auto& profile = found.front()->decoded;
  CHECK(spanprof_test::share_on_stack(profile, "request_inner_guard") > 0.3);
  CHECK(spanprof_test::share_on_stack(profile, "request_stage_one") > 0.3);
#ifndef SPANPROF_TESTS_UNDER_TSAN
  CHECK(sampled_cpu_seconds(profile) < 0.23);  // 0.2 s of CPU, counted once
#endif
  const auto* guard = collector.profile_for(span_number(954).span_id);
  REQUIRE(guard != nullptr);
  CHECK(spanprof_test::share_on_stack(guard->decoded, "request_inner_guard") > 0.8);
}

TEST_CASE("a request fans out: fragments on two threads at once go into its one profile", "[requests]") {
  Collector collector(requests_at_1khz());
  spanprof::RequestProfile request(span_number(955), "GET /fan-out");
  std::thread a(spanprof::bind(request, [] { request_stage_one(0.1); }));
  std::thread b(spanprof::bind(request, [] { request_stage_two(0.1); }));
  a.join();
  b.join();
  request.end();
  std::vector<spanprof_test::CollectedProfile> all;
  const auto found = profiles_of(collector, 955, all);
  REQUIRE(found.size() == 1);
  CHECK(spanprof_test::share_on_stack(found.front()->decoded, "request_stage_one") > 0.3);
  CHECK(spanprof_test::share_on_stack(found.front()->decoded, "request_stage_two") > 0.3);
}

TEST_CASE("requests follow the samplers: turned down at the head, kept or discarded by the tail policy at the end",
          "[requests]") {
  auto options = requests_at_1khz();
  options.tail_policy = std::make_shared<spanprof::KeepErroredSpans>();
  Collector collector(options);
  spanprof::RequestProfile failed(span_number(956), "GET /failed");
  spanprof::RequestProfile fine(span_number(957), "GET /fine");
  std::thread([&] {
    spanprof::Fragment one(failed);
    request_stage_one(0.05);
    spanprof::Fragment two(fine);
    request_stage_two(0.05);
  }).join();
  failed.set_error();
  failed.end();
  fine.end();
  std::vector<spanprof_test::CollectedProfile> all;
  const auto kept = profiles_of(collector, 956, all);
  REQUIRE(kept.size() == 1);
  CHECK(kept.front()->meta.record.reason == spanprof::ProfileReason::error);
  CHECK(profiles_of(collector, 957, all).empty());

  auto never = requests_at_1khz();
  never.head_sampler = std::make_shared<spanprof::NeverSampler>();
  collector.restart(never);
  spanprof::RequestProfile declined(span_number(958), "GET /declined");
  CHECK_FALSE(declined.active());
  spanprof::Fragment nothing(declined);
  CHECK_FALSE(nothing.active());
}

TEST_CASE("a request records wall samples from its fragments too", "[requests]") {
  Collector collector(requests_at_1khz());
  spanprof::RequestProfile request(span_number(959), "GET /wall", spanprof::cpu | spanprof::wall);
  double turns_seconds = 0;  // the turns' wall time, as the threads that ran them saw it
  for (int turn = 0; turn < 3; ++turn) {
    std::thread(spanprof::bind(request, [&turns_seconds] {
      const auto start = std::chrono::steady_clock::now();
      request_stage_one(0.03);
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      turns_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    })).join();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // between turns: not the request's
  }
  request.end();
  const auto* wall = collector.profile_for(span_number(959).span_id, spanprof::ProfileKind::wall);
  REQUIRE(wall != nullptr);
  // Three turns of ~90 ms each (longer on a loaded machine): the wall time of the
  // fragments, not of the 50 ms gaps between them.
  const double wall_seconds = static_cast<double>(spanprof_test::value_total(wall->decoded, 1)) * 1e-9;
  INFO("wall samples " << wall_seconds << " s, turns " << turns_seconds << " s");
  CHECK(wall_seconds > 0.7 * turns_seconds);
  CHECK(wall_seconds < 1.1 * turns_seconds + 0.02);
  CHECK(collector.profile_for(span_number(959).span_id, spanprof::ProfileKind::cpu) != nullptr);
}

TEST_CASE("a pool thread that alternates between requests gives each its own samples", "[requests]") {
  Collector collector(requests_at_1khz());
  spanprof::RequestProfile first(span_number(960), "GET /first");
  spanprof::RequestProfile second(span_number(961), "GET /second");
  double first_cpu = 0, second_cpu = 0;
  std::thread([&] {
    for (int turn = 0; turn < 25; ++turn) {
      {
        spanprof::Fragment fragment(first);
        const double before = spanprof_test::thread_cpu_seconds();
        request_stage_one(0.004);
        first_cpu += spanprof_test::thread_cpu_seconds() - before;
      }
      {
        spanprof::Fragment fragment(second);
        const double before = spanprof_test::thread_cpu_seconds();
        request_stage_two(0.004);
        second_cpu += spanprof_test::thread_cpu_seconds() - before;
      }
    }
  }).join();
  first.end();
  second.end();
  const auto* one = collector.profile_for(span_number(960).span_id, spanprof::ProfileKind::cpu);
  const auto* two = collector.profile_for(span_number(961).span_id, spanprof::ProfileKind::cpu);
  REQUIRE(one != nullptr);
  REQUIRE(two != nullptr);
  CHECK(spanprof_test::share_on_stack(one->decoded, "request_stage_one") > 0.95);
  CHECK(spanprof_test::share_on_stack(two->decoded, "request_stage_two") > 0.95);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
  INFO("first: " << sampled_cpu_seconds(one->decoded) << " s sampled of " << first_cpu << " s; second: "
                 << sampled_cpu_seconds(two->decoded) << " s of " << second_cpu << " s");
  CHECK(sampled_cpu_seconds(one->decoded) / first_cpu > 0.8);
  CHECK(sampled_cpu_seconds(one->decoded) / first_cpu < 1.2);
  CHECK(sampled_cpu_seconds(two->decoded) / second_cpu > 0.8);
  CHECK(sampled_cpu_seconds(two->decoded) / second_cpu < 1.2);
#endif
}

TEST_CASE("while a fragment runs, otel_thread_ctx_v1 points at its request's ids and name (OTEP 4947)", "[requests]") {
  Collector collector(requests_at_1khz());
  const auto span = span_number(962);
  spanprof::RequestProfile request(span, "GET /published");
  std::thread([&] {
    CHECK(otel_thread_ctx_v1 == nullptr);
    {
      spanprof::Fragment fragment(request);
      REQUIRE(otel_thread_ctx_v1 != nullptr);
      const auto* bytes = static_cast<const std::uint8_t*>(otel_thread_ctx_v1);
      CHECK(std::memcmp(bytes, span.trace_id.bytes().data(), 16) == 0);
      CHECK(std::memcmp(bytes + 16, span.span_id.bytes().data(), 8) == 0);
      CHECK(bytes[24] == 1);     // valid
      CHECK(bytes[25] == 0x01);  // sampled
      CHECK((bytes[26] | bytes[27] << 8) == 2 + 14);
      CHECK(bytes[28] == 0);  // key index 0: span_name
      CHECK(std::string(reinterpret_cast<const char*>(bytes + 30), bytes[29]) == "GET /published");
      spanprof::RequestProfile other(span_number(963), "GET /other");
      {
        spanprof::Fragment inner(other);
        CHECK(std::memcmp(static_cast<const std::uint8_t*>(otel_thread_ctx_v1) + 16,
                          span_number(963).span_id.bytes().data(), 8) == 0);
      }
      CHECK(otel_thread_ctx_v1 == bytes);  // the outer request's again
      other.discard();
    }
    CHECK(otel_thread_ctx_v1 == nullptr);
  }).join();
  request.discard();
}
