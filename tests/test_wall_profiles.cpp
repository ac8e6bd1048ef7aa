// Wall-clock span profiles, end to end: real signals from the wall ticker, real
// unwinding of blocked threads, real pprof decoded back. What is checked is what a
// user reads off a wall profile: its total is the span's elapsed time, the waiting
// shows where it waited, every thread gets only its own waits, and a host's
// blocking calls are interrupted at most once per wait.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

using spanprof_test::Collector;
using spanprof_test::share_on_stack;
using spanprof_test::span_number;
using spanprof_test::value_total;

namespace {

constexpr std::size_t wall_ns = 1;  // values: {samples, wall ns}

// Computes for `how_long` of wall time, and at least three quarters of it in CPU
// time: on a loaded machine the span is then still mostly computing and waiting
// as written, and the CPU profile still has its ticks.
__attribute__((noinline)) double compute_prices(std::chrono::milliseconds how_long) {
  const auto end = std::chrono::steady_clock::now() + how_long;
  const double cpu_end = spanprof_test::thread_cpu_seconds() + 0.75 * std::chrono::duration<double>(how_long).count();
  double price = 1.0;
  while (std::chrono::steady_clock::now() < end || spanprof_test::thread_cpu_seconds() < cpu_end)
    for (int i = 1; i < 2000; ++i) price += 1.0 / (i * 3.0);
  asm volatile("" : "+x"(price));
  return price;
}

__attribute__((noinline)) void wait_for_backend(std::chrono::milliseconds how_long) {
  std::this_thread::sleep_for(how_long);
  asm volatile("");  // not a tail call: this frame stays on the stack while it sleeps
}

// Eight ways to wait, each in a function of its own name.
__attribute__((noinline)) void wait_sleeping(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  asm volatile("");
}
__attribute__((noinline)) void wait_polling(int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) ::poll(nullptr, 0, 5);  // EINTR or not: loop until the end
  asm volatile("");
}
__attribute__((noinline)) void wait_on_condition(int ms) {
  std::mutex m;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(m);
  cv.wait_for(lock, std::chrono::milliseconds(ms), [] { return false; });
  asm volatile("");
}
__attribute__((noinline)) void wait_reading_pipe(int ms) {
  int fds[2];
  if (::pipe(fds) != 0) return;
  pollfd p{fds[0], POLLIN, 0};
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) ::poll(&p, 1, 20);
  ::close(fds[0]);
  ::close(fds[1]);
  asm volatile("");
}
__attribute__((noinline)) void wait_nanosleeping(int ms) {
  timespec left{ms / 1000, (ms % 1000) * 1'000'000L};
  while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  asm volatile("");
}
__attribute__((noinline)) void wait_selecting(int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    timeval tv{0, 10'000};
    ::select(0, nullptr, nullptr, nullptr, &tv);
  }
  asm volatile("");
}
__attribute__((noinline)) void wait_in_short_sleeps(int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) ::usleep(1000);
  asm volatile("");
}
__attribute__((noinline)) void wait_clock_nanosleep(int ms) {
  timespec until{};
  ::clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_nsec += static_cast<long>(ms % 1000) * 1'000'000L;
  until.tv_sec += ms / 1000 + until.tv_nsec / 1'000'000'000L;
  until.tv_nsec %= 1'000'000'000L;
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
  asm volatile("");
}

using Wait = void (*)(int);
const Wait waits[] = {wait_sleeping,     wait_polling,   wait_on_condition,    wait_reading_pipe,
                      wait_nanosleeping, wait_selecting, wait_in_short_sleeps, wait_clock_nanosleep};
const char* const wait_names[] = {"wait_sleeping",     "wait_polling",   "wait_on_condition",    "wait_reading_pipe",
                                  "wait_nanosleeping", "wait_selecting", "wait_in_short_sleeps", "wait_clock_nanosleep"};

spanprof::Options wall_options(int wall_hz) {
  spanprof::Options options;
  options.wall_frequency_hz = wall_hz;
  options.frequency_hz = 250;
  options.queue_capacity = 4096;
  return options;
}

}  // namespace

// Not under TSan: its late signal handlers move samples between the computing and the waiting.
TEST_CASE("a wall profile shows where a slow span waited, and adds up to its elapsed time",
          "[wall]" SPANPROF_TEST_NOT_UNDER_TSAN) {
  auto options = wall_options(1000);
  // 40 ms of computing: at 1 kHz on a 250 Hz kernel the CPU timer fires on ~10
  // ticks, so the few microseconds of CPU the waiting spends (its wall ticks'
  // handlers, its system calls) landing on one tick cannot outweigh it (with
  // 20 ms, one such tick of five was 22 % of the samples).
  options.frequency_hz = 1000;
  Collector collector(options);
  for (unsigned i = 0; i < 3; ++i) {
    const auto span = span_number(5000 + i);
    const auto start = std::chrono::steady_clock::now();
    std::int64_t elapsed_ns = 0, waited_ns = 0;
    const double cpu_before = spanprof_test::thread_cpu_seconds();
    {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /slow"}, spanprof::cpu | spanprof::wall);
      compute_prices(std::chrono::milliseconds(40));
      const auto wait_start = std::chrono::steady_clock::now();
      wait_for_backend(std::chrono::milliseconds(80));
      const auto end = std::chrono::steady_clock::now();
      waited_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - wait_start).count();
      elapsed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
    }
    const double span_cpu_ns = (spanprof_test::thread_cpu_seconds() - cpu_before) * 1e9;
    INFO("span " << i);
    const auto* wall = collector.profile_for(span.span_id, spanprof::ProfileKind::wall);
    const auto* cpu = collector.profile_for(span.span_id, spanprof::ProfileKind::cpu);
    REQUIRE(wall != nullptr);
    REQUIRE(cpu != nullptr);
    const auto& w = wall->decoded;
    REQUIRE(w.sample_types.size() == 2);
    CHECK(w.sample_types[1].type == "wall");
    CHECK(w.sample_types[1].unit == "nanoseconds");
    CHECK(w.period_type.type == "wall");
    CHECK(w.period == 1'000'000);
    const std::int64_t total = value_total(w, wall_ns);
    INFO("wall total " << total << " ns, span " << elapsed_ns << " ns");
    CHECK(std::abs(static_cast<double>(total - elapsed_ns)) <= 0.1 * static_cast<double>(elapsed_ns));
    // On a loaded machine the computing takes longer than its 20 ms of CPU: the
    // wait's share is held to the share of the span it really took.
    INFO("waited " << waited_ns << " ns");
    CHECK(share_on_stack(w, "wait_for_backend", wall_ns) >=
          static_cast<double>(waited_ns) / static_cast<double>(elapsed_ns) - 0.08);
    CHECK(share_on_stack(w, "compute_prices", wall_ns) >= 0.1);
    for (const auto& sample : w.samples) {
      const auto labels = pprof_test::labels_of(sample);
      CHECK(labels.at("span_id") == span.span_id.to_hex());
      CHECK(labels.at("span_name") == "GET /slow");
    }
    // The CPU profile is as before: the computing, not the waiting. Points the
    // kernel and the watch left overdue until the close are taken there, with the
    // close's stack (docs/engines.md, "At a span's edges"): their leaf is this test
    // case's own function, where the guard closes. Beside busy processes a span's
    // first computing can leave most of its points to the close (18 of 28 once).
    INFO(spanprof_test::leaf_summary(cpu->decoded));
    std::int64_t at_close = 0, cpu_total = 0;
    for (const auto& sample : cpu->decoded.samples) {
      cpu_total += sample.values[0];
      if (pprof_test::leaf_function(cpu->decoded, sample).find("C_A_T_C_H_T_E_S_T") != std::string::npos)
        at_close += sample.values[0];
    }
    const double computing = share_on_stack(cpu->decoded, "compute_prices");
    CHECK(computing * static_cast<double>(cpu_total) >= 0.8 * static_cast<double>(cpu_total - at_close));
    CHECK(share_on_stack(cpu->decoded, "wait_for_backend") <= 0.1);
    CHECK(spanprof_test::sample_count(cpu->decoded) >= 5);  // ~10 ticks; fewer when the CPU is shared
    // And it weighs the CPU the span ran: the wall ticks queued to the thread are
    // no backlog of its CPU ticks to hold them for (CpuTickSource::hold_while_behind).
    const auto sampled_cpu_ns = static_cast<double>(value_total(cpu->decoded, 1));
    INFO("the span's CPU " << span_cpu_ns * 1e-6 << " ms, its profile's " << sampled_cpu_ns * 1e-6 << " ms");
    CHECK(sampled_cpu_ns >= 0.8 * span_cpu_ns);
    CHECK(sampled_cpu_ns <= 1.2 * span_cpu_ns);
  }
}

// Not under TSan: it intercepts neither select nor clock_nanosleep, so those waits go unsampled.
TEST_CASE("concurrent wall spans on eight threads each get exactly their own waits",
          "[wall]" SPANPROF_TEST_NOT_UNDER_TSAN) {
  Collector collector(wall_options(200));
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 8; ++t) {
    threads.emplace_back([t, &ready] {
      ready.fetch_add(1);
      while (ready.load() < 8) std::this_thread::yield();
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(5100 + t), wait_names[t]}, spanprof::wall);
      waits[t](400);
    });
  }
  for (auto& thread : threads) thread.join();
  for (unsigned t = 0; t < 8; ++t) {
    INFO("thread " << t << " (" << wait_names[t] << ")");
    const auto* profile = collector.profile_for(span_number(5100 + t).span_id, spanprof::ProfileKind::wall);
    REQUIRE(profile != nullptr);
    const auto& p = profile->decoded;
    CHECK(share_on_stack(p, wait_names[t], wall_ns) >= 0.99);
    for (unsigned other = 0; other < 8; ++other)
      if (other != t) CHECK(share_on_stack(p, wait_names[other], wall_ns) == 0.0);
    CHECK(value_total(p, wall_ns) >= 350'000'000);
    for (const auto& function : p.functions) CHECK_FALSE(spanprof_test::has_clone_suffix(function.name));
  }
}

// Not under TSan: with its signal handling the ticker signals the sleeping loop again (23 EINTR seen).
TEST_CASE("a host loop of 1 ms sleeps is interrupted once per wait, not once per tick",
          "[wall]" SPANPROF_TEST_NOT_UNDER_TSAN) {
  Collector collector(wall_options(100));
  const auto before = spanprof::stats();
  int eintr = 0, sleeps = 0;
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(5200), "GET /poll-loop"}, spanprof::wall);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < end) {
      timespec ms{0, 1'000'000};
      if (::nanosleep(&ms, nullptr) != 0 && errno == EINTR) ++eintr;
      ++sleeps;
    }
  }
  const auto after = spanprof::stats();
  INFO(sleeps << " sleeps, " << eintr << " EINTR, " << after.wall_ticks_signalled - before.wall_ticks_signalled
              << " signals, " << after.wall_ticks_confirmed - before.wall_ticks_confirmed << " confirmations");
  // ~100 ticks in the second: the first finds the loop sleeping and signals it;
  // the rest find it still sleeping at the same call with no CPU spent between.
  CHECK(after.wall_ticks_confirmed - before.wall_ticks_confirmed >= 50);
  // Once per tick would be ~100; a loaded machine that delays the loop between
  // sleeps costs a few more interruptions than an idle one.
  CHECK(eintr <= 25);
  const auto* profile = collector.profile_for(span_number(5200).span_id, spanprof::ProfileKind::wall);
  REQUIRE(profile != nullptr);
  CHECK(value_total(profile->decoded, wall_ns) >= 900'000'000);
}

TEST_CASE("no wall ticks for threads outside wall spans, and none for CPU-only spans", "[wall]") {
  Collector collector(wall_options(1000));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto before = spanprof::stats();
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(5300), "GET /cpu-only"}, spanprof::cpu);
    wait_for_backend(std::chrono::milliseconds(100));
  }
  wait_for_backend(std::chrono::milliseconds(100));
  const auto after = spanprof::stats();
  CHECK(after.wall_ticks_signalled == before.wall_ticks_signalled);
  CHECK(after.wall_ticks_confirmed == before.wall_ticks_confirmed);
  CHECK(after.wall_samples_captured == before.wall_samples_captured);
  CHECK(collector.profile_for(span_number(5300).span_id, spanprof::ProfileKind::wall) == nullptr);
}

// The ticker watching CPU spans alone looks every few CPU periods (40 ms at 100
// Hz); a wall span opening then wakes it, so its first tick comes within a wall
// period, not at the end of that sleep: a 30 ms wait was once not sampled at all.
TEST_CASE("a wall span opened while the ticker only watched CPU spans is sampled from its start", "[wall]") {
  auto options = wall_options(1000);
  options.frequency_hz = 100;
  Collector collector(options);
  for (unsigned i = 0; i < 5; ++i) {
    {
      spanprof::ScopedProfile cpu_only(spanprof::NamedSpan{span_number(5450 + 2 * i), "GET /cpu"}, spanprof::cpu);
      compute_prices(std::chrono::milliseconds(30));
    }
    const auto span = span_number(5451 + 2 * i);
    const auto start = std::chrono::steady_clock::now();
    {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /short-wait"}, spanprof::wall);
      wait_for_backend(std::chrono::milliseconds(30));
    }
    const auto elapsed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    INFO("span " << i);
    const auto* wall = collector.profile_for(span.span_id, spanprof::ProfileKind::wall);
    REQUIRE(wall != nullptr);
    CHECK(share_on_stack(wall->decoded, "wait_for_backend", wall_ns) >= 0.9);
    CHECK(value_total(wall->decoded, wall_ns) >= elapsed_ns * 8 / 10);
  }
}

// Not under TSan: its late signal handlers put CPU samples outside compute_prices (75% seen, 90% asked).
TEST_CASE("a wall span inside a CPU span: each profile keeps its own kind", "[wall]" SPANPROF_TEST_NOT_UNDER_TSAN) {
  Collector collector(wall_options(500));
  const auto outer = span_number(5400), inner = span_number(5401);
  {
    spanprof::ScopedProfile outer_guard(spanprof::NamedSpan{outer, "outer"}, spanprof::cpu);
    compute_prices(std::chrono::milliseconds(150));
    {
      spanprof::ScopedProfile inner_guard(spanprof::NamedSpan{inner, "inner"}, spanprof::wall);
      wait_for_backend(std::chrono::milliseconds(60));
    }
  }
  CHECK(collector.profile_for(outer.span_id, spanprof::ProfileKind::wall) == nullptr);
  const auto* outer_cpu = collector.profile_for(outer.span_id, spanprof::ProfileKind::cpu);
  REQUIRE(outer_cpu != nullptr);
  INFO(spanprof_test::stacks_without(outer_cpu->decoded, "compute_prices"));
  CHECK(share_on_stack(outer_cpu->decoded, "compute_prices") >= 0.9);
  CHECK(collector.profile_for(inner.span_id, spanprof::ProfileKind::cpu) == nullptr);
  const auto* inner_wall = collector.profile_for(inner.span_id, spanprof::ProfileKind::wall);
  REQUIRE(inner_wall != nullptr);
  CHECK(share_on_stack(inner_wall->decoded, "wait_for_backend", wall_ns) >= 0.95);
  CHECK(value_total(inner_wall->decoded, wall_ns) >= 50'000'000);
}

// What `top -H`, `ps -L`, gdb and perf show for spanprof's own threads: a user who
// sees a busy thread in the host's process can tell that it is spanprof's.
TEST_CASE("spanprof's threads are named spanprof-merge, spanprof-send and spanprof-wall", "[wall]") {
  Collector collector(wall_options(100));
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(5350), "GET /named"}, spanprof::wall);
    wait_for_backend(std::chrono::milliseconds(30));
  }
  std::vector<std::string> names;
  std::string listed;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (const dirent* task = ::readdir(tasks)) {
      if (task->d_name[0] == '.') continue;
      std::string name = spanprof_test::read_file(std::string("/proc/self/task/") + task->d_name + "/comm");
      while (!name.empty() && name.back() == '\n') name.pop_back();
      names.push_back(name);
      listed += name + "; ";
    }
    ::closedir(tasks);
  }
  INFO("threads: " << listed);
  for (const char* expected : {"spanprof-merge", "spanprof-send", "spanprof-wall"})
    CHECK(std::count(names.begin(), names.end(), std::string(expected)) == 1);
}

namespace {

// The ticker thread's context switches so far (-1: no such thread).
long ticker_switches() {
  long total = -1;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (const dirent* task = ::readdir(tasks)) {
      if (task->d_name[0] == '.') continue;
      const std::string dir = std::string("/proc/self/task/") + task->d_name;
      std::string name = spanprof_test::read_file(dir + "/comm");
      if (name.rfind("spanprof-wall", 0) != 0) continue;
      const std::string status = spanprof_test::read_file(dir + "/status");
      total = 0;
      for (const char* key : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}) {
        const auto at = status.find(std::string("\n") + key);
        if (at != std::string::npos) total += std::atol(status.c_str() + at + 1 + std::strlen(key));
      }
    }
    ::closedir(tasks);
  }
  return total;
}

}  // namespace

// The ticker watches POSIX-timer threads only while spans are open: a second after
// the last one it parks, and an idle process wakes it about once a second.
TEST_CASE("after the last span closed, the ticker parks: an idle process wakes it about once a second", "[wall]") {
  auto options = wall_options(100);
  options.watch_cpu_ticks = true;  // CPU spans start the ticker too
  Collector collector(options);
  {
    spanprof::ScopedProfile guard(span_number(5360));  // a CPU span: the watch runs
    const double end = spanprof_test::thread_cpu_seconds() + 0.03;
    while (spanprof_test::thread_cpu_seconds() < end) {
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the linger
  const long before = ticker_switches();
  REQUIRE(before >= 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long woke = ticker_switches() - before;
  INFO("the ticker switched " << woke << " times in 3 s idle");
  CHECK(woke <= 12);  // ~2 a second (a timed-out park, one look); it looked every 10 ms before
}
