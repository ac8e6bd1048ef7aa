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

#include "support/catch.hpp"
#include "support/collector.hpp"

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

}  // namespace

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
  REQUIRE(profile != nullptr);
  CHECK(spanprof_test::sample_count(profile->decoded) > 25);
}
