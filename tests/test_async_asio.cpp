// A plain ScopedProfile held across co_await in Boost.Asio C++20 coroutines on a
// thread pool: the coroutine resumes on any thread, so the guard may end on
// another thread than it began, and its storage (the coroutine frame) dies there
// while the thread that opened it keeps running and keeps being sampled. The
// sample handler must never read it again: this suite runs in the AddressSanitizer
// and ThreadSanitizer builds too. Each such span is counted (Stats::spans_moved)
// and reported once per span; nothing else is lost.
#include <utility>  // before Asio: Boost 1.74's coroutine support needs std::exchange with GCC 12

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/asio.hpp>
#include <spanprof/spanprof.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using spanprof_test::Collector;
using spanprof_test::span_number;

namespace {

SPANPROF_TEST_HOT_FUNCTION(async_burn)
SPANPROF_TEST_HOT_FUNCTION(async_parse_stage)
SPANPROF_TEST_HOT_FUNCTION(async_query_stage)
SPANPROF_TEST_HOT_FUNCTION(async_render_stage)

struct RequestTrace {
  std::thread::id opened_on, closed_on;
  std::set<std::thread::id> ran_on;
};

asio::awaitable<void> handle_request(unsigned number, RequestTrace& trace) {
  {
    spanprof::ScopedProfile guard(span_number(number), "async_request");
    trace.opened_on = std::this_thread::get_id();
    trace.ran_on.insert(trace.opened_on);
    async_burn(0.002);
    for (int wait = 0; wait < 3; ++wait) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
      co_await timer.async_wait(asio::use_awaitable);
      trace.ran_on.insert(std::this_thread::get_id());
      async_burn(0.002);
    }
    trace.closed_on = std::this_thread::get_id();
  }
  co_return;
}

// One request in three stages, each after a timer wait (resumed on any thread of
// the request's pool); the query stage runs on the backend's pool, a coroutine of
// its own the request awaits, so every request runs on two threads at least,
// whatever Asio's scheduling does under load. The CPU each stage used is kept as
// it runs. A stage computes until its thread's CPU clock has advanced 8 ms, and
// reads it every few microseconds: a reading above 9 ms means the clock jumped
// inside the stage. A KVM guest charges a stall of the whole VM to the thread that
// ran (one stage read 102.7 ms; a stall of 561 ms charged 100 ms to a thread that
// computed 0.4 ms of it, measured beside busy processes), and a jump is no CPU the
// stage's code spent: a request with one is left out of the CPU checks, counted.
enum Stage : unsigned { parsing, querying, rendering, stages };
constexpr const char* stage_functions[stages] = {"async_parse_stage", "async_query_stage", "async_render_stage"};
constexpr double stage_cpu = 0.008, stage_cpu_after_a_jump = 0.009;

struct StagedRequest {
  std::set<std::thread::id> ran_on;
  double stage_cpu_seconds[stages] = {};
  double cpu_seconds() const { return stage_cpu_seconds[0] + stage_cpu_seconds[1] + stage_cpu_seconds[2]; }
  bool clock_jumped() const {
    for (double seconds : stage_cpu_seconds)
      if (seconds > stage_cpu_after_a_jump) return true;
    return false;
  }
};

template <class StageFunction>
void run_stage(StagedRequest& request, Stage index, StageFunction stage) {
  request.ran_on.insert(std::this_thread::get_id());
  const double before = spanprof_test::thread_cpu_seconds();
  stage(stage_cpu);
  request.stage_cpu_seconds[index] = spanprof_test::thread_cpu_seconds() - before;
}

asio::awaitable<void> query_stage(StagedRequest& request) {
  run_stage(request, querying, async_query_stage);
  co_return;
}

asio::awaitable<void> handle_staged(StagedRequest& request, spanprof::RequestProfile profile,
                                    asio::thread_pool::executor_type backend) {
  run_stage(request, parsing, async_parse_stage);
  asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
  co_await timer.async_wait(asio::use_awaitable);
  co_await asio::co_spawn(spanprof::asio::request_executor(backend, profile), query_stage(request), asio::use_awaitable);
  timer.expires_after(std::chrono::milliseconds(1));
  co_await timer.async_wait(asio::use_awaitable);
  run_stage(request, rendering, async_render_stage);
}

}  // namespace

TEST_CASE("spanprof::asio::co_spawn: one profile per request with every stage, whichever pool threads ran it",
          "[async][asio][requests]") {
  spanprof::Options options;
  options.frequency_hz = 1000;
  // Each turn is 8 ms of CPU: the POSIX CPU timer's signal comes at the 4 ms
  // scheduler tick, often in the next turn on the thread (another request's); the
  // perf event's comes at the sampling point.
  options.cpu_sample_source = spanprof::CpuSampleSource::perf_event;
  Collector collector(options);
  const auto before = spanprof::stats();
  constexpr unsigned requests = 24;
  std::vector<StagedRequest> staged(requests);
  {
    asio::thread_pool pool(4), backend(2);
    for (unsigned i = 0; i < requests; ++i) {
      spanprof::RequestProfile request(span_number(6000 + i), "GET /staged");
      spanprof::asio::co_spawn(pool.get_executor(), request, handle_staged(staged[i], request, backend.get_executor()),
                               asio::detached);
    }
    pool.join();
    backend.join();
  }
  const auto profiles = collector.profiles();
  double sampled = 0, used = 0;
  unsigned multi_thread = 0, clock_jumped = 0;
  for (unsigned i = 0; i < requests; ++i) {
    std::vector<const spanprof_test::CollectedProfile*> mine;
    for (const auto& p : profiles)
      if (p.meta.record.span.span_id == span_number(6000 + i).span_id) mine.push_back(&p);
    INFO("request " << i << " ran on " << staged[i].ran_on.size() << " threads");
    REQUIRE(mine.size() == 1);  // one profile, not one per thread or per turn
    if (staged[i].ran_on.size() > 1) ++multi_thread;
    if (staged[i].clock_jumped()) {
      ++clock_jumped;
      continue;
    }
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call (1 run in 150: 0.07)
    for (unsigned stage = 0; stage < stages; ++stage) {
      // Each stage's CPU in the profile, against the share of the request's CPU it
      // used: at least half of it (a sixth for equal stages). By CPU, not by samples: the
      // periods are random, and an 8 ms stage at 1 kHz gets 2 of them now and then
      // (one period of 5.4 ms, one of 2.1 ms: 7.5 ms of its 8.0 in 2 samples).
      const double cpu_share = staged[i].stage_cpu_seconds[stage] / staged[i].cpu_seconds();
      INFO(stage_functions[stage] << " used " << cpu_share << " of the request's CPU");
      INFO(spanprof_test::stacks_without(mine.front()->decoded, stage_functions[stage]));
      CHECK(spanprof_test::share_on_stack(mine.front()->decoded, stage_functions[stage], 1) > 0.5 * cpu_share);
    }
#endif
    sampled += static_cast<double>(spanprof_test::value_total(mine.front()->decoded, 1)) * 1e-9;
    used += staged[i].cpu_seconds();
  }
  CHECK(multi_thread == requests);  // the query stage ran on the backend's pool
  CHECK(spanprof::stats().spans_moved == before.spans_moved);
  CHECK(spanprof::stats().requests_abandoned == before.requests_abandoned);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
  // A stall of the VM jumps the clocks of the threads running then: two at most
  // here, so that the CPU checks above leave out few requests. Under TSan those
  // checks are not made, and a stage's clock also jumps by 1-10 ms between two reads
  // a few microseconds apart: the runtime's own work, and the handlers it deferred,
  // run inside the stage.
  CHECK(clock_jumped <= 2);
  INFO("sampled " << sampled << " s of the " << used << " s the requests' stages used");
  CHECK(sampled / used > 0.85);
  CHECK(sampled / used < 1.15);
#endif
}

namespace {

// Computes, waits 1 ms (resumed on any thread of the pool), computes again.
asio::awaitable<void> orders_request(double cpu_seconds_per_turn) {
  async_burn(cpu_seconds_per_turn);
  asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
  co_await timer.async_wait(asio::use_awaitable);
  async_burn(cpu_seconds_per_turn);
}

}  // namespace

// A coroutine's request is admitted and decided as a guard is: the trigger times
// the requests the head sampler declines, and profiles the next ones of a name
// whose latency jumped.
TEST_CASE("spanprof::asio::co_spawn: the adaptive trigger profiles the next requests of a name whose latency jumped",
          "[async][asio][requests][trigger]") {
  spanprof::Options options;
  options.frequency_hz = 1000;
  auto trigger = spanprof_test::profile_only_when_triggered(options);  // nothing profiled unless triggered
  Collector collector(options);
  asio::thread_pool pool(2);
  // One at a time: a request's latency is its own, not the queue's.
  const auto run_request = [&](unsigned number, double cpu_seconds_per_turn) {
    spanprof::RequestProfile request(span_number(number), "GET /orders");
    spanprof::asio::co_spawn(pool.get_executor(), request, orders_request(cpu_seconds_per_turn), asio::use_future).get();
  };
  for (unsigned i = 0; i < 40; ++i) run_request(6100 + i, 0.0005);
  spanprof::flush();
  CHECK(collector.profiles().empty());
  CHECK(trigger->counters().observed == 40);
  for (unsigned i = 0; i < 10; ++i) run_request(6150 + i, 0.03);  // 30x slower than its baseline
  pool.join();
  spanprof::flush();
  const auto profiles = collector.profiles();
  REQUIRE(profiles.size() == 3);  // exactly N requests, then it stands down
  for (const auto& p : profiles) {
    CHECK(p.meta.record.reason == spanprof::ProfileReason::triggered);
    CHECK(p.meta.record.span_name == "GET /orders");
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
    CHECK(spanprof_test::share_on_stack(p.decoded, "async_burn", 1) > 0.9);  // both turns, whichever threads ran them
#endif
  }
  CHECK(trigger->counters().spans_triggered == 3);
}

TEST_CASE("spanprof::asio::bind: a completion handler runs inside a fragment of its request", "[async][asio][requests]") {
  Collector collector;
  asio::thread_pool pool(2);
  spanprof::RequestProfile request(span_number(6100), "GET /callback");
  asio::steady_timer timer(pool, std::chrono::milliseconds(1));
  timer.async_wait(spanprof::asio::bind(request, pool.get_executor(), [](boost::system::error_code) {
    async_render_stage(0.1);
  }));
  pool.join();
  request.end();
  const auto* profile = collector.profile_for(span_number(6100).span_id, spanprof::ProfileKind::cpu);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call: maybe none in 0.1 s
  REQUIRE(profile != nullptr);
  CHECK(spanprof_test::share_on_stack(profile->decoded, "async_render_stage") > 0.8);
#else
  if (profile != nullptr) CHECK(spanprof_test::share_on_stack(profile->decoded, "async_render_stage") > 0.5);
#endif
}

TEST_CASE("a ScopedProfile held across co_await on a 4-thread Asio pool at 1 kHz: never a dangling span",
          "[async][asio]") {
  spanprof::Options options;
  options.frequency_hz = 1000;
  Collector collector(options);
  const auto before = spanprof::stats();
  constexpr unsigned requests = 40;
  std::vector<RequestTrace> traces(requests);
  {
    asio::thread_pool pool(4);
    for (unsigned i = 0; i < requests; ++i)
      asio::co_spawn(pool, handle_request(5000 + i, traces[i]), asio::detached);
    pool.join();
  }
  spanprof::flush(std::chrono::seconds(30));
  const auto after = spanprof::stats();

  unsigned moved = 0, multi_thread = 0;
  for (const auto& trace : traces) {
    if (trace.opened_on != trace.closed_on) ++moved;
    if (trace.ran_on.size() > 1) ++multi_thread;
  }
  INFO(moved << " of " << requests << " requests ended on another thread than they began; " << multi_thread
             << " ran on more than one");
  CHECK(after.guards_opened - before.guards_opened == requests);
  // Every span that ended elsewhere is counted; so may be a few that ended on their
  // own thread after a later span opened there (interleaved coroutines).
  CHECK(after.spans_moved - before.spans_moved >= moved);
  CHECK(after.spans_moved - before.spans_moved <= requests);
  // The 4 threads kept their samplers: nothing made them look like they block the
  // sample signal, and no sampler was disarmed for it.
  CHECK_FALSE(collector.has_error(spanprof::ErrorCode::sampler_failed));
  // A span that stayed on its thread, after all this, is profiled as usual.
  std::thread([&] {
    spanprof::ScopedProfile guard(span_number(5999), "after_the_pool");
    async_burn(0.05);
  }).join();
  const auto* profile = collector.profile_for(span_number(5999).span_id, spanprof::ProfileKind::cpu);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call: maybe none in 0.05 s
  REQUIRE(profile != nullptr);
  CHECK(spanprof_test::sample_count(profile->decoded) > 25);
#endif
}
