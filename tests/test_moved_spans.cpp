// Guards that do not end where they began: a coroutine that resumes on another
// thread of a pool, a scope whose storage dies while its thread keeps running,
// guards of interleaved coroutines closing out of order on one thread. The signal
// handler must never read such a guard's memory again (AddressSanitizer and
// ThreadSanitizer builds run these), the span is counted and reported, and the
// threads' other spans are profiled as before.
#include "support/catch.hpp"
#include "support/collector.hpp"

#include <spanprof/spanprof.hpp>

#include <atomic>
#include <memory>
#include <thread>

using spanprof_test::Collector;
using spanprof_test::span_number;

namespace {

SPANPROF_TEST_HOT_FUNCTION(moved_spans_burn)

spanprof::Options at_1khz() {
  spanprof::Options options;
  options.frequency_hz = 1000;
  return options;
}

// The guard lives on the heap, as in a coroutine frame: after it closes elsewhere
// its memory is freed at once, so any later read of it is a use-after-free.
using HeapGuard = std::unique_ptr<spanprof::ScopedProfile>;

}  // namespace

TEST_CASE("a guard that ends on another thread is never read again, and its thread's later spans are profiled",
          "[moved]") {
  Collector collector(at_1khz());
  const auto before = spanprof::stats();
  HeapGuard guard;
  std::atomic<int> phase{0};
  std::thread opener([&] {
    guard = std::make_unique<spanprof::ScopedProfile>(span_number(900), "moved");
    moved_spans_burn(0.03);
    phase.store(1);
    // Sampled at 1 kHz while the guard ends and is freed on the other thread.
    while (phase.load() != 2) moved_spans_burn(0.002);
    moved_spans_burn(0.1);
    spanprof::ScopedProfile later(span_number(901), "later");
    moved_spans_burn(0.2);
  });
  while (phase.load() != 1) std::this_thread::yield();
  guard.reset();  // on this thread
  phase.store(2);
  opener.join();

  CHECK(collector.profile_for(span_number(900).span_id) == nullptr);
  const auto* later = collector.profile_for(span_number(901).span_id, spanprof::ProfileKind::cpu);
  REQUIRE(later != nullptr);
  // Its own 0.2 s at 1 kHz, nothing of the moved span's (samples x period = CPU).
  const double sampled = static_cast<double>(spanprof_test::value_total(later->decoded, 1)) * 1e-9;
  CHECK(sampled > 0.15);
  CHECK(sampled < 0.26);
  CHECK(spanprof::stats().spans_moved - before.spans_moved == 1);
  CHECK(collector.has_error(spanprof::ErrorCode::span_moved, "another thread"));
}

TEST_CASE("a guard closed before one opened after it on its thread: dropped and counted; the inner one is delivered",
          "[moved]") {
  Collector collector(at_1khz());
  const auto before = spanprof::stats();
  std::thread thread([&] {
    auto outer = std::make_unique<spanprof::ScopedProfile>(span_number(902), "outer");
    moved_spans_burn(0.05);
    auto inner = std::make_unique<spanprof::ScopedProfile>(span_number(903), "inner");
    moved_spans_burn(0.1);
    outer.reset();  // out of order, as interleaved coroutines on one thread do
    moved_spans_burn(0.05);
    inner.reset();
    spanprof::ScopedProfile after(span_number(904), "after");
    moved_spans_burn(0.1);
  });
  thread.join();

  CHECK(collector.profile_for(span_number(902).span_id) == nullptr);
  const auto* inner = collector.profile_for(span_number(903).span_id, spanprof::ProfileKind::cpu);
  const auto* after = collector.profile_for(span_number(904).span_id, spanprof::ProfileKind::cpu);
  REQUIRE(inner != nullptr);
  REQUIRE(after != nullptr);
  const double inner_seconds = static_cast<double>(spanprof_test::value_total(inner->decoded, 1)) * 1e-9;
  const double after_seconds = static_cast<double>(spanprof_test::value_total(after->decoded, 1)) * 1e-9;
  CHECK(inner_seconds > 0.11);  // its 0.15 s
  CHECK(inner_seconds < 0.2);
  CHECK(after_seconds > 0.07);  // its 0.1 s: the log started over once no span was open
  CHECK(after_seconds < 0.14);
  CHECK(spanprof::stats().spans_moved - before.spans_moved == 1);
  CHECK(collector.has_error(spanprof::ErrorCode::span_moved, "closed before a span opened after it"));
}

TEST_CASE("a guard whose thread exited before it closed elsewhere: closed safely, counted", "[moved]") {
  Collector collector(at_1khz());
  const auto before = spanprof::stats();
  HeapGuard guard;
  std::thread([&] {
    guard = std::make_unique<spanprof::ScopedProfile>(span_number(905), "orphan");
    moved_spans_burn(0.03);
  }).join();
  guard.reset();
  CHECK(collector.profile_for(span_number(905).span_id) == nullptr);
  CHECK(spanprof::stats().spans_moved - before.spans_moved == 1);
  // A new thread (which may reuse the exited one's memory) profiles normally.
  std::thread([] {
    spanprof::ScopedProfile next(span_number(906), "next");
    moved_spans_burn(0.05);
  }).join();
  const auto* next = collector.profile_for(span_number(906).span_id, spanprof::ProfileKind::cpu);
  REQUIRE(next != nullptr);
  CHECK(spanprof_test::sample_count(next->decoded) > 25);
}

TEST_CASE("many guards handed between threads while both threads are sampled at 1 kHz", "[moved]") {
  Collector collector(at_1khz());
  const auto before = spanprof::stats();
  constexpr int rounds = 200;
  std::atomic<spanprof::ScopedProfile*> handed{nullptr};
  std::atomic<bool> done{false};
  std::thread closer([&] {
    int closed = 0;
    while (closed < rounds) {
      if (spanprof::ScopedProfile* guard = handed.exchange(nullptr)) {
        spanprof::ScopedProfile own(span_number(2000 + static_cast<unsigned>(closed)), "closer");
        moved_spans_burn(0.0005);
        delete guard;  // closes a span of the other thread, inside one of this thread's
        ++closed;
      }
    }
    done.store(true);
  });
  for (int i = 0; i < rounds; ++i) {
    auto* guard = new spanprof::ScopedProfile(span_number(1000 + static_cast<unsigned>(i)), "handed");
    moved_spans_burn(0.0005);
    spanprof::ScopedProfile* expected = nullptr;
    while (!handed.compare_exchange_weak(expected, guard)) expected = nullptr;
    spanprof::ScopedProfile own(span_number(3000 + static_cast<unsigned>(i)), "opener");
    moved_spans_burn(0.0005);
  }
  closer.join();
  CHECK(done.load());
  CHECK(spanprof::stats().spans_moved - before.spans_moved == rounds);
}

// A guard held across co_await lives in the coroutine's frame, one per suspended
// request: it holds what a span needs, no more (the classic engines keep their file
// paths themselves), and a span name of up to max_span_name bytes.
TEST_CASE("a guard is small enough to live in every coroutine frame", "[moved]") {
  CHECK(sizeof(spanprof::ScopedProfile) <= 256);
  CHECK(spanprof::ScopedProfile::max_span_name >= 100);
}
