// One profile per request, for a handler that hops threads: Boost.Asio C++20
// coroutines on a pool of 4 threads. Each request parses, awaits its backend (a
// timer: the coroutine resumes on whichever pool thread is free) and renders; each
// stage burns CPU under its own name. spanprof::asio::co_spawn runs every turn of
// the coroutine inside a fragment of the request, so each request's profile has
// all three stages, whichever threads ran them:
//
//   go tool pprof -tagfocus='span_id=^<id>$' -top profiles/*.pb.gz
//
// Profiles go to SPANPROF_OUTPUT_DIR (default ./profiles). Output, one line per
// request, then the CPU its stages used (what the profile's samples should add up to):
//   request span_id=<16 hex> threads=<distinct threads it ran on>
//   stages span_id=<16 hex> cpu_ns=<CPU time of its three stages>
#include <utility>  // before Asio: Boost 1.74's coroutines need std::exchange with GCC 12

#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/asio.hpp>
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;

namespace {

constexpr std::int64_t stage_cpu_ns = 10'000'000;  // each stage: 10 ms of CPU

// What one request saw: the threads it ran on, the CPU its stages used.
struct RequestLog {
  std::string span_id;
  std::set<std::thread::id> threads;
  std::int64_t cpu_ns = 0;
  std::uint64_t response = 0;
};

__attribute__((noinline)) std::uint64_t burn(std::int64_t cpu_ns, std::uint64_t seed) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  std::uint64_t x = seed | 1;
  while (example::thread_cpu_ns() < end)
    for (int i = 0; i < 2000; ++i) x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return x;
}

// The stages call burn() and then use its result: not a tail call, so each stage
// keeps its own frame on the sampled stacks.
__attribute__((noinline)) std::uint64_t parse_request(std::uint64_t seed) {
  const std::uint64_t query = burn(stage_cpu_ns, seed);
  return query ^ (query >> 11);
}
__attribute__((noinline)) std::uint64_t render_response(std::uint64_t rows) {
  const std::uint64_t body = burn(stage_cpu_ns, rows);
  return body ^ (body >> 17);
}

// Awaits the backend (resumed on any pool thread), then decodes its answer.
asio::awaitable<std::uint64_t> query_backend(std::uint64_t query, RequestLog& log) {
  asio::steady_timer backend(co_await asio::this_coro::executor, std::chrono::milliseconds(2));
  co_await backend.async_wait(asio::use_awaitable);
  log.threads.insert(std::this_thread::get_id());
  const std::int64_t start = example::thread_cpu_ns();
  const std::uint64_t rows = burn(stage_cpu_ns, query);
  log.cpu_ns += example::thread_cpu_ns() - start;
  co_return rows;
}

asio::awaitable<void> handle_request(RequestLog& log) {
  log.threads.insert(std::this_thread::get_id());
  std::int64_t start = example::thread_cpu_ns();
  const std::uint64_t query = parse_request(std::hash<std::string>{}(log.span_id));
  log.cpu_ns += example::thread_cpu_ns() - start;

  const std::uint64_t rows = co_await query_backend(query, log);

  // One more hop before rendering, as a handler that yields to the pool would.
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  log.threads.insert(std::this_thread::get_id());
  start = example::thread_cpu_ns();
  log.response = render_response(rows);
  log.cpu_ns += example::thread_cpu_ns() - start;
}

}  // namespace

int main() {
  spanprof::Options options;
  auto files = example::file_uploader(options);  // $SPANPROF_OUTPUT_DIR or ./profiles
  // Every stage is a short turn on some thread: the perf event samples at its
  // sampling point, where the POSIX CPU timer waits for the 4 ms scheduler tick,
  // which may fall in the next request's turn (docs/async.md).
  if (!std::getenv("SPANPROF_SOURCE")) options.cpu_sample_source = spanprof::CpuSampleSource::perf_event;
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 4000;  // ~120 samples per request
  spanprof::start(options);

  constexpr int requests = 12;
  std::mt19937_64 rng(2026);
  std::vector<RequestLog> logs(requests);
  {
    asio::thread_pool pool(4);
    for (auto& log : logs) {
      const spanprof::SpanContext span = example::random_span(rng);
      log.span_id = span.span_id.to_hex();
      spanprof::RequestProfile request(span, "GET /orders");
      spanprof::asio::co_spawn(pool.get_executor(), std::move(request), handle_request(log), asio::detached);
    }
    pool.join();
  }
  spanprof::flush();

  for (const auto& log : logs) std::printf("request span_id=%s threads=%zu\n", log.span_id.c_str(), log.threads.size());
  for (const auto& log : logs)
    std::printf("stages span_id=%s cpu_ns=%" PRId64 "\n", log.span_id.c_str(), log.cpu_ns);
  std::printf("profiles in %s: go tool pprof -tagfocus='span_id=^%s$' -top %s/*.pb.gz\n", files->directory().c_str(),
              logs.front().span_id.c_str(), files->directory().c_str());
  spanprof::shutdown();
  return 0;
}
