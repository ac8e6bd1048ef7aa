// 64 threads of nested, failing, heap- and CPU-profiled spans while another
// thread restarts spanprof with random options, flushes and reads stats; then
// shutdown(deadline). Runs in a process of its own, for SPANPROF_STRESS_SECONDS
// (6 by default; `SPANPROF_STRESS_SECONDS=600 spanprof_tests "[stress]"` for ten
// minutes) and at least four restarts. Prints resident memory as it goes.
#include "support/catch.hpp"
#include "support/child_process.hpp"
#include "support/collector.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

using spanprof_test::span_number;

namespace {

// A sanitizer's shadow memory and quarantine make resident memory say nothing
// about spanprof's: memory is checked in the plain builds.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool stress_memory_measurable = false;
#else
constexpr bool stress_memory_measurable = true;
#endif

SPANPROF_TEST_HOT_FUNCTION(stress_leaf_work)

long stress_resident_kib() {
  long total = 0, resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return -1;
  const int read = std::fscanf(statm, "%ld %ld", &total, &resident);
  std::fclose(statm);
  return read == 2 ? resident * (::sysconf(_SC_PAGESIZE) / 1024) : -1;
}

// The heap the program really holds, as tcmalloc counts it (gperftools'
// MallocExtension C API, looked up so that builds without tcmalloc still link):
// -1 without tcmalloc. Beside resident memory it tells a leak (this grows) from
// an allocator keeping freed pages for reuse (only resident memory grows).
long tcmalloc_property_kib(const char* name) {
  using Property = int (*)(const char*, std::size_t*);
  static const auto property = reinterpret_cast<Property>(::dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
  std::size_t bytes = 0;
  if (property == nullptr || !property(name, &bytes)) return -1;
  return static_cast<long>(bytes / 1024);
}
long stress_live_heap_kib() { return tcmalloc_property_kib("generic.current_allocated_bytes"); }
// Free pages tcmalloc keeps mapped for reuse (returned to the system only slowly).
long stress_allocator_free_kib() { return tcmalloc_property_kib("tcmalloc.pageheap_free_bytes"); }

struct StressThread {
  std::mt19937_64 random;
  unsigned next_span = 0;
  unsigned id = 0;

  // Opens `depth` nested guards, the innermost working; may throw through them.
  void nested(int depth) {
    const unsigned kind_pick = static_cast<unsigned>(random() % 3);
    const spanprof::ProfileKinds kinds =
        kind_pick == 0 ? spanprof::cpu : kind_pick == 1 ? spanprof::heap : spanprof::cpu | spanprof::heap;
    spanprof::ScopedProfile guard(span_number(id * 10'000'000 + ++next_span), "stress", kinds);
    const unsigned roll = static_cast<unsigned>(random() % 100);
    if (roll < 5) guard.set_error();
    if (roll >= 95) guard.discard();
    if (depth > 1) {
      nested(depth - 1);
    } else {
      std::vector<char> allocation(1024 + random() % 65536, 'x');
      stress_leaf_work(0.00005 + static_cast<double>(allocation[0] == 'x') * 0.00005);
    }
    if (roll >= 5 && roll < 9) throw std::runtime_error("through the guards");
  }
};

// Under a sanitizer every instruction costs several times as much, the sender's
// encoding included: 16 threads leave it enough of the two cores to drain a
// restart's backlog (up to 512 profiles, now that every sample is cheap to take)
// within the flush deadline. 64 everywhere else.
#if defined(SPANPROF_TESTS_UNDER_TSAN) || defined(__SANITIZE_ADDRESS__)
constexpr unsigned stress_threads = 16;
#else
constexpr unsigned stress_threads = 64;
#endif

int stress_seconds() {
  const char* text = std::getenv("SPANPROF_STRESS_SECONDS");
  return text ? std::max(1, std::atoi(text)) : 6;
}

const spanprof_test::ChildScenario stress_scenario("stress", [] {
  spanprof::set_error_handler(nullptr);
  std::atomic<long> uploaded_by_callback{0};
  auto uploader = std::make_shared<spanprof::CallbackUploader>(
      [&uploaded_by_callback](const spanprof::EncodedProfile&, std::string_view) {
        uploaded_by_callback.fetch_add(1, std::memory_order_relaxed);
        return spanprof::UploadResult::ok();
      },
      "stress");
  std::atomic<bool> stop{false};
  std::atomic<long> spans{0}, exceptions{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < stress_threads; ++t) {
    threads.emplace_back([&, t] {
      StressThread self{std::mt19937_64(t * 7919 + 1), 0, t};
      while (!stop.load(std::memory_order_relaxed)) {
        try {
          self.nested(1 + static_cast<int>(self.random() % 4));
        } catch (const std::runtime_error&) {
          exceptions.fetch_add(1, std::memory_order_relaxed);
        }
        spans.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + std::chrono::seconds(stress_seconds());
  const auto report_every = stress_seconds() >= 120 ? std::chrono::seconds(60) : std::chrono::seconds(2);
  auto next_report = begin;
  std::mt19937_64 random(42);
  long restarts = 0, flush_failures = 0, warm_kib = 0, max_kib = 0;
  // How many restarts fit in the time depends on the build, not on spanprof: each
  // takes a fresh symbolizer, whose first profiles read every object's symbols
  // again, on a delivery thread that shares two cores with 64 busy ones, ten
  // times slower under ThreadSanitizer. The loop runs on until both kinds of
  // restart (drained, in flight) have happened twice.
  constexpr long minimum_restarts = 4;
  while (std::chrono::steady_clock::now() < end || restarts < minimum_restarts) {
    spanprof::Options options;
    options.frequency_hz = static_cast<int>(100 + random() % 900);
    options.queue_capacity = random() % 2 ? 16 : 512;
    options.queue_overflow = random() % 2 ? spanprof::OverflowPolicy::drop_newest : spanprof::OverflowPolicy::drop_oldest;
    options.heap_sample_interval_bytes = 64 * 1024;
    switch (random() % 4) {
      case 0: break;
      case 1: options.head_sampler = std::make_shared<spanprof::ProbabilitySampler>(0.3); break;
      case 2: options.head_sampler = std::make_shared<spanprof::NeverSampler>(); break;
      default: options.head_sampler = std::make_shared<spanprof::AlwaysSampler>(); break;
    }
    switch (random() % 3) {
      case 0: break;
      case 1: options.tail_policy = std::make_shared<spanprof::KeepErroredSpans>(); break;
      default: options.tail_policy = std::make_shared<spanprof::KeepSlowSpans>(std::chrono::microseconds(80)); break;
    }
    if (random() % 3 == 0) options.trigger = std::make_shared<spanprof::AdaptiveTrigger>();
    options.uploaders.push_back(uploader);
    // Names only: the memory bound below finds leaks, and DWARF kept for the
    // process grows by design with the code sampled (this binary's units are large:
    // +32-89 MB after the warm point with it, docs/source-lines.md).
    options.symbolizer = std::shared_ptr<spanprof::Symbolizer>(spanprof::make_elf_symbolizer(false));
    spanprof::start(std::move(options));
    ++restarts;
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      (void)spanprof::stats();
    }
    // Every other restart drains first; the others restart with profiles in flight.
    if (restarts % 2 == 0 && !spanprof::flush(std::chrono::seconds(10))) ++flush_failures;
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_report) {
      const long kib = stress_resident_kib();
      if (warm_kib == 0 && now - begin >= std::chrono::seconds(stress_seconds() >= 120 ? 60 : 2)) warm_kib = kib;
      if (warm_kib != 0) max_kib = std::max(max_kib, kib);
      std::printf("t=%llds rss_kib=%ld live_heap_kib=%ld allocator_free_kib=%ld restarts=%ld spans=%ld\n",
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now - begin).count()), kib,
                  stress_live_heap_kib(), stress_allocator_free_kib(), restarts, spans.load());
      std::fflush(stdout);
      next_report = now + report_every;
    }
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  const auto shutdown_begin = std::chrono::steady_clock::now();
  const bool drained = spanprof::shutdown(std::chrono::seconds(5)).is_ok();
  const auto shutdown_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - shutdown_begin).count();
  const spanprof::Stats s = spanprof::stats();
  const long long settled = static_cast<long long>(s.profiles_uploaded + s.upload_failures + s.profiles_spooled +
                                                   (s.profiles_dropped - s.profiles_refused));
  std::printf("done spans=%ld exceptions=%ld restarts=%ld flush_failures=%ld drained=%d shutdown_ms=%lld\n", spans.load(),
              exceptions.load(), restarts, flush_failures, drained, static_cast<long long>(shutdown_ms));
  std::printf("stats enqueued=%llu settled=%lld uploaded=%llu callback=%ld failures=%llu dropped=%llu refused=%llu "
              "queue=%llu\n",
              static_cast<unsigned long long>(s.profiles_enqueued), settled,
              static_cast<unsigned long long>(s.profiles_uploaded), uploaded_by_callback.load(),
              static_cast<unsigned long long>(s.upload_failures), static_cast<unsigned long long>(s.profiles_dropped),
              static_cast<unsigned long long>(s.profiles_refused), static_cast<unsigned long long>(s.queue_length));
  std::printf("memory warm_kib=%ld max_kib=%ld\n", warm_kib, max_kib);
  return 0;
});

}  // namespace

TEST_CASE("64 threads, nested failing guards, restarts, flushes and stats: counts add up, memory stays flat",
          "[stress]") {
  const auto result = spanprof_test::run_in_child("stress", stress_seconds() + 120);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  long spans = 0, exceptions = 0, restarts = 0, flush_failures = -1;
  int drained = 0;
  long long shutdown_ms = -1;
  const auto done_at = result.output.find("done spans=");
  REQUIRE(done_at != std::string::npos);
  REQUIRE(std::sscanf(result.output.c_str() + done_at,
                      "done spans=%ld exceptions=%ld restarts=%ld flush_failures=%ld drained=%d shutdown_ms=%lld", &spans,
                      &exceptions, &restarts, &flush_failures, &drained, &shutdown_ms) == 6);
  CHECK(spans > 1000);
  CHECK(exceptions > 0);
  CHECK(flush_failures == 0);
  CHECK(drained == 1);
  CHECK(shutdown_ms <= 5000 + 500);
  unsigned long long enqueued = 0, uploaded = 0, failures = 0, dropped = 0, refused = 0, queue = 0;
  long long settled = -1;
  long callback = 0;
  const auto stats_at = result.output.find("stats enqueued=");
  REQUIRE(stats_at != std::string::npos);
  REQUIRE(std::sscanf(result.output.c_str() + stats_at,
                      "stats enqueued=%llu settled=%lld uploaded=%llu callback=%ld failures=%llu dropped=%llu "
                      "refused=%llu queue=%llu",
                      &enqueued, &settled, &uploaded, &callback, &failures, &dropped, &refused, &queue) == 8);
  CHECK(enqueued > 0);
  CHECK(static_cast<long long>(enqueued) == settled);
  CHECK(failures == 0);
  CHECK(queue == 0);
  long warm = 0, max = 0;
  const auto memory_at = result.output.find("memory warm_kib=");
  REQUIRE(memory_at != std::string::npos);
  REQUIRE(std::sscanf(result.output.c_str() + memory_at, "memory warm_kib=%ld max_kib=%ld", &warm, &max) == 2);
  CHECK(warm > 0);
  if (stress_memory_measurable) CHECK(max - warm <= 64 * 1024);  // 64 threads' logs are allocated by then; growth is a leak
}
