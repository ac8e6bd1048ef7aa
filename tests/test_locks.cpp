// Lock profiles (docs/locks.md): a span's waits for a lock another span held, with
// the holder's span, and the waits a span caused while it held a lock, checked
// against the waits the test measured around each lock() call.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/span_attribution.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>
#include <spanprof/detail/capture/thread_times.hpp>  // the condition wait's run delay

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <semaphore.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

using spanprof_test::Collector;
using spanprof_test::CollectedProfile;
using spanprof_test::span_number;

namespace {

using Clock = std::chrono::steady_clock;

// The holder keeps the lock this long, and lets go in the middle of its function,
// with more of its work after the release: a release that is a function's last
// call leaves that function off its stack (docs/locks.md).
constexpr auto hold_time = std::chrono::milliseconds(40);

std::atomic<int> restocked{0};

template <class Mutex>
__attribute__((noinline)) int hold_inventory(Mutex& mutex, std::atomic<int>& holding, Clock::time_point& released) {
  std::unique_lock<Mutex> lock(mutex);
  holding.store(1);
  std::this_thread::sleep_for(hold_time);
  released = Clock::now();
  lock.unlock();
  return restocked.fetch_add(1);
}

// Each waiter's lock() call, timed around it.
struct Waited {
  Clock::time_point start, end;
  bool taken = true;  // a timed wait's: it got the lock
  double seconds() const { return std::chrono::duration<double>(end - start).count(); }
  // The part of it before `release`: the wait the holder that released then caused.
  double seconds_before(Clock::time_point release) const {
    return std::chrono::duration<double>(std::min(end, release) - start).count();
  }
};
// How a waiter takes the lock: lock(), or a timed wait that outlasts the hold
// (try_lock_for: glibc's clocklock on the steady clock; try_lock_until on the
// system clock: its timedlock).
enum class Take { lock, try_for, try_until_system_time };

template <class Mutex, Take take>
__attribute__((noinline)) Waited take_inventory(Mutex& mutex) {
  Waited waited;
  waited.start = Clock::now();
  if constexpr (take == Take::lock) {
    mutex.lock();
  } else if constexpr (take == Take::try_for) {
    waited.taken = mutex.try_lock_for(std::chrono::seconds(30));
  } else {
    waited.taken = mutex.try_lock_until(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }
  waited.end = Clock::now();
  if (!waited.taken) return waited;
  std::lock_guard<Mutex> lock(mutex, std::adopt_lock);
  restocked.fetch_add(1);
  return waited;
}

std::string label_of(const spanprof::Sample& sample, const std::string& key) {
  for (const auto& label : sample.labels)
    if (label.key == key) return label.is_num ? std::to_string(label.num) : label.str;
  return {};
}

// The delay (ns) of a lock profile's samples on one side of the wait.
double delay_seconds(const spanprof::Profile& profile, const std::string& role) {
  std::int64_t total = 0;
  for (const auto& sample : profile.samples)
    if (label_of(sample, "lock_role") == role) total += sample.values[1];
  return static_cast<double>(total) * 1e-9;
}

// The share of that delay whose stack holds `function`.
double delay_share_under(const spanprof::Profile& profile, const std::string& role, const std::string& function) {
  std::map<std::uint64_t, std::string> names;
  for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
  std::int64_t total = 0, under = 0;
  for (const auto& sample : profile.samples) {
    if (label_of(sample, "lock_role") != role) continue;
    total += sample.values[1];
    for (auto id : sample.location_ids) {
      if (names[id].find(function) != std::string::npos) {
        under += sample.values[1];
        break;
      }
    }
  }
  return total != 0 ? static_cast<double>(under) / static_cast<double>(total) : 0.0;
}

const CollectedProfile* lock_profile_of(const std::vector<CollectedProfile>& profiles, const spanprof::SpanContext& span) {
  for (const auto& p : profiles)
    if (p.meta.record.span.span_id == span.span_id && p.meta.record.kind == spanprof::ProfileKind::lock) return &p;
  return nullptr;
}

// What go tool pprof prints for a profile's bytes with `flags`.
std::string go_pprof(const CollectedProfile& profile, const std::string& flags) {
  const std::string path = pprof_test::write_temp_file(profile.pprof_gzip, ".pb.gz");
  std::string out;
  const bool ran = pprof_test::run_command("go tool pprof " + flags + " " + path, out);
  std::remove(path.c_str());
  return ran ? out : "go tool pprof failed: " + out;
}

std::string describe(const spanprof::Profile& profile) {
  std::map<std::uint64_t, std::string> names;
  for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
  std::string text;
  for (const auto& sample : profile.samples) {
    text += "\n  " + std::to_string(sample.values[0]) + " waits, " + std::to_string(sample.values[1] / 1000) + " us:";
    for (const auto& label : sample.labels) text += " " + label.key + "=" + (label.is_num ? std::to_string(label.num) : label.str);
    for (auto id : sample.location_ids) text += "\n    " + names[id];
  }
  return text;
}

// Span A holds `mutex` in hold_inventory() while `waiters` spans each wait for it
// in take_inventory(); checks every profile against the waits measured.
template <class Mutex, Take take = Take::lock>
void check_waiters_and_holder(unsigned waiters) {
  spanprof::Options options;
  Collector collector(options);
  Mutex mutex;
  std::atomic<int> holding{0};
  const spanprof::SpanContext holder_span = span_number(9100);
  std::atomic<pid_t> holder_tid{0};
  Clock::time_point released;
  std::thread holder([&] {
    holder_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    spanprof::ScopedProfile guard(spanprof::NamedSpan{holder_span, "GET /restock"}, spanprof::lock);
    hold_inventory(mutex, holding, released);
  });
  std::vector<Waited> waited(waiters);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < waiters; ++i) {
    threads.emplace_back([&, i] {
      while (holding.load() == 0) std::this_thread::yield();
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9200 + i), "POST /checkout"}, spanprof::lock);
      waited[i] = take_inventory<Mutex, take>(mutex);
    });
  }
  holder.join();
  for (auto& t : threads) t.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  const auto profiles = collector.profiles();

  double waited_under_holder = 0;
  for (unsigned i = 0; i < waiters; ++i) {
    waited_under_holder += waited[i].seconds_before(released);
    const CollectedProfile* collected = lock_profile_of(profiles, span_number(9200 + i));
    INFO("waiter " << i << " measured " << waited[i].seconds() * 1e3 << " ms, "
                   << waited[i].seconds_before(released) * 1e3 << " ms of it before the holder's release");
    REQUIRE(waited[i].taken);
    REQUIRE(collected != nullptr);
    const spanprof::Profile* mine = &collected->decoded;
    INFO("its lock profile:" << describe(*mine));
    const double recorded = delay_seconds(*mine, "waiter");
    CHECK(recorded > waited[i].seconds() * 0.85);
    CHECK(recorded < waited[i].seconds() * 1.15);
    CHECK(delay_share_under(*mine, "waiter", "take_inventory") >= 0.90);
    CHECK(delay_share_under(*mine, "waiter", "spanprof::") == 0.0);  // the stack starts at the call into the lock
    // The first waiter in was let in by A; the others by a waiter before them (a
    // span too, named the same), each after waiting through A's hold.
    bool by_holder = false;
    for (const auto& sample : mine->samples) {
      if (label_of(sample, "holder_span_id") == holder_span.span_id.to_hex()) {
        by_holder = true;
        CHECK(label_of(sample, "holder_thread") == std::to_string(holder_tid.load()));
        CHECK(label_of(sample, "holder_span_name") == "GET /restock");
        CHECK(label_of(sample, "holder_trace_id") == holder_span.trace_id.to_hex());
        // Where A held it: its own function, past the library's unlock frames.
        CHECK(label_of(sample, "holder_function").find("hold_inventory") != std::string::npos);
        CHECK(label_of(sample, "holder_location").find("test_locks.cpp:") != std::string::npos);
      }
    }
    if (waiters != 1) continue;
    CHECK(by_holder);
    // As a user reads it: the holder's labels, and the call site on top.
    const std::string tags = go_pprof(*collected, "-tags");
    INFO(tags);
    CHECK(tags.find("holder_span_id") != std::string::npos);
    CHECK(tags.find(holder_span.span_id.to_hex()) != std::string::npos);
    CHECK(tags.find("GET /restock") != std::string::npos);
    const std::string top = go_pprof(*collected, "-top -sample_index=delay");
    INFO(top);
    CHECK(top.find("take_inventory") != std::string::npos);
  }
  const CollectedProfile* held_collected = lock_profile_of(profiles, holder_span);
  REQUIRE(held_collected != nullptr);
  const spanprof::Profile* held = &held_collected->decoded;
  INFO("the holder's lock profile:" << describe(*held) << "\nthe waiters waited " << waited_under_holder * 1e3
                                     << " ms before its release");
  // A holder is charged what its waiters waited until it let go; the time a woken
  // waiter then waits for a core is its own (docs/locks.md).
  const double charged = delay_seconds(*held, "holder");
  CHECK(charged > waited_under_holder * 0.85);
  CHECK(charged < waited_under_holder * 1.15);
  CHECK(delay_share_under(*held, "holder", "hold_inventory") >= 0.90);
}

}  // namespace

TEST_CASE("lock: a span waiting for a std::mutex another span holds has the wait under its lock() call, labelled "
          "with the holder's span; the holder's profile has the wait under the code that held it",
          "[lock]") {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  check_waiters_and_holder<std::mutex>(1);
}

TEST_CASE("lock: three spans wait for one holder: each has its wait, the holder is charged their sum", "[lock]") {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  check_waiters_and_holder<std::mutex>(3);
}

TEST_CASE("lock: a std::shared_mutex writer's wait and its holder", "[lock]") {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  check_waiters_and_holder<std::shared_mutex>(1);
}

TEST_CASE("lock: a std::timed_mutex and a std::recursive_mutex, locked without a timeout", "[lock]") {
  check_waiters_and_holder<std::timed_mutex>(1);
  check_waiters_and_holder<std::recursive_mutex>(1);
}

TEST_CASE("lock: timed waits: try_lock_for and try_lock_until on a std::timed_mutex and a std::shared_timed_mutex",
          "[lock]") {
  check_waiters_and_holder<std::timed_mutex, Take::try_for>(1);
  check_waiters_and_holder<std::timed_mutex, Take::try_until_system_time>(1);
  check_waiters_and_holder<std::shared_timed_mutex, Take::try_for>(1);
  check_waiters_and_holder<std::shared_timed_mutex, Take::try_until_system_time>(1);
}

TEST_CASE("lock: a timed wait that gives up is recorded, for as long as it waited, with the thread that held the lock",
          "[lock]") {
  spanprof::Options options;
  Collector collector(options);
  std::timed_mutex mutex;
  std::atomic<int> holding{0};
  std::atomic<pid_t> holder_tid{0};
  Clock::time_point released;
  std::thread holder([&] {
    holder_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9500), "GET /restock"}, spanprof::lock);
    hold_inventory(mutex, holding, released);
  });
  while (holding.load() == 0) std::this_thread::yield();
  Waited waited;
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9501), "POST /checkout"}, spanprof::lock);
    waited.start = Clock::now();
    const bool took = mutex.try_lock_for(std::chrono::milliseconds(10));
    waited.end = Clock::now();
    CHECK_FALSE(took);
  }
  holder.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  const auto profiles = collector.profiles();
  const CollectedProfile* collected = lock_profile_of(profiles, span_number(9501));
  INFO("measured " << waited.seconds() * 1e3 << " ms around try_lock_for");
  REQUIRE(collected != nullptr);
  INFO("its lock profile:" << describe(collected->decoded));
  const double recorded = delay_seconds(collected->decoded, "waiter");
  CHECK(recorded > waited.seconds() * 0.85);
  CHECK(recorded < waited.seconds() * 1.15);
  REQUIRE(collected->decoded.samples.size() == 1);
  CHECK(label_of(collected->decoded.samples[0], "holder_thread") == std::to_string(holder_tid.load()));
  CHECK(label_of(collected->decoded.samples[0], "holder_span_id").empty());
}

// Each sample's delay by its span, side and holder: what a window must hold for
// every span it merges.
std::map<std::string, std::int64_t> delay_by_span_and_holder(const spanprof::Profile& profile) {
  std::map<std::string, std::int64_t> delays;
  for (const auto& sample : profile.samples)
    delays[label_of(sample, "span_id") + " " + label_of(sample, "lock_role") + " held by " +
           label_of(sample, "holder_span_id") + " in " + label_of(sample, "holder_function")] += sample.values[1];
  return delays;
}

TEST_CASE("lock: batched delivery: one window holds every span's lock samples, each with its span and holder",
          "[lock]") {
  std::mutex windows_mutex;
  std::vector<std::string> windows;  // the lock windows' pprof bytes
  spanprof::Options options;
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [&](const spanprof::EncodedProfile& profile, std::string_view pprof_gzip) {
        std::lock_guard<std::mutex> held(windows_mutex);
        if (profile.record.kind == spanprof::ProfileKind::lock) windows.emplace_back(pprof_gzip);
        return spanprof::UploadResult::ok();
      },
      "windows", spanprof::Delivery::batched(std::chrono::seconds(60))));
  Collector collector(options);  // and each span's own profile, to compare with
  std::mutex mutex;
  std::atomic<int> holding{0};
  Clock::time_point released;
  std::thread holder([&] {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9600), "GET /restock"}, spanprof::lock);
    hold_inventory(mutex, holding, released);
  });
  std::vector<std::thread> waiters;
  for (unsigned i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      while (holding.load() == 0) std::this_thread::yield();
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9601 + i), "POST /checkout"}, spanprof::lock);
      take_inventory<std::mutex, Take::lock>(mutex);
    });
  }
  holder.join();
  for (auto& waiter : waiters) waiter.join();
  const auto per_span = collector.profiles();  // flushes: the window is cut now
  std::map<std::string, std::int64_t> expected;
  std::size_t lock_profiles = 0;
  for (const auto& collected : per_span) {
    if (collected.meta.record.kind != spanprof::ProfileKind::lock) continue;
    ++lock_profiles;
    for (const auto& [key, delay] : delay_by_span_and_holder(collected.decoded)) expected[key] += delay;
  }
  CHECK(lock_profiles == 4);
  std::lock_guard<std::mutex> held(windows_mutex);
  REQUIRE(windows.size() == 1);
  pprof_test::DecodedPprof window;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(windows[0], window, error));
  INFO("the window:" << describe(window.profile));
  CHECK(delay_by_span_and_holder(window.profile) == expected);
  CHECK(expected.size() >= 5);  // three waiters, and the holder charged (a waiter too, for the ones behind it)
}

TEST_CASE("lock: a mutex destroyed and its memory unmapped right after each contended wait, 10,000 times",
          "[lock]") {
  spanprof::Options options;
  Collector collector(options);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr int rounds = 10000;
  std::mutex* current = nullptr;
  sem_t go, through;  // futex-based: the handshake takes no mutex of its own
  ::sem_init(&go, 0, 0);
  ::sem_init(&through, 0, 0);
  // One waiter, a span per round: it locks each round's mutex while this thread
  // holds it, and this thread unlocks, destroys and unmaps it as soon as the waiter
  // is through.
  std::thread waiter([&] {
    for (int round = 1; round <= rounds; ++round) {
      while (::sem_wait(&go) != 0) {
      }
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9300), "waiter"}, spanprof::lock);
      current->lock();
      current->unlock();
      ::sem_post(&through);
    }
  });
  for (int round = 1; round <= rounds; ++round) {
    void* memory = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(memory != MAP_FAILED);
    auto* mutex = new (memory) std::mutex;
    {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(9301), "holder"}, spanprof::lock);
      mutex->lock();
      current = mutex;
      ::sem_post(&go);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      mutex->unlock();
    }
    while (::sem_wait(&through) != 0) {
    }
    mutex->~mutex();
    REQUIRE(::munmap(memory, page) == 0);
  }
  waiter.join();
  const spanprof::Stats stats = spanprof::stats();
  INFO("waits recorded " << stats.lock_waits_recorded << ", untracked " << stats.lock_waits_untracked);
  CHECK(stats.lock_waits_recorded > 0);
}

#ifdef SPANPROF_TEST_PLUGIN_PATH
TEST_CASE("lock: a wait for a mutex of a dlopen'ed library, under the library's call, with its holder", "[lock]") {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  spanprof::Options options;
  Collector collector(options);
  void* plugin = ::dlopen(SPANPROF_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(plugin != nullptr);
  const auto hold_stock = reinterpret_cast<int (*)(double, int*)>(::dlsym(plugin, "spanprof_plugin_hold_stock"));
  const auto take_stock = reinterpret_cast<double (*)()>(::dlsym(plugin, "spanprof_plugin_take_stock"));
  REQUIRE(hold_stock != nullptr);
  REQUIRE(take_stock != nullptr);
  const spanprof::SpanContext holder_span = span_number(9400), waiter_span = span_number(9401);
  int holding = 0;
  std::thread holder([&] {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{holder_span, "GET /restock"}, spanprof::lock);
    hold_stock(std::chrono::duration<double>(hold_time).count(), &holding);
  });
  double waited = 0;
  std::thread waiter([&] {
    while (__atomic_load_n(&holding, __ATOMIC_ACQUIRE) == 0) std::this_thread::yield();
    spanprof::ScopedProfile guard(spanprof::NamedSpan{waiter_span, "POST /checkout"}, spanprof::lock);
    waited = take_stock();
  });
  holder.join();
  waiter.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  const auto profiles = collector.profiles();
  const CollectedProfile* mine = lock_profile_of(profiles, waiter_span);
  INFO("measured " << waited * 1e3 << " ms");
  REQUIRE(mine != nullptr);
  INFO("its lock profile:" << describe(mine->decoded));
  CHECK(delay_seconds(mine->decoded, "waiter") > waited * 0.85);
  CHECK(delay_seconds(mine->decoded, "waiter") < waited * 1.15);
  CHECK(delay_share_under(mine->decoded, "waiter", "spanprof_plugin_take_stock") >= 0.90);
  bool by_holder = false;
  for (const auto& sample : mine->decoded.samples)
    by_holder = by_holder || label_of(sample, "holder_span_id") == holder_span.span_id.to_hex();
  CHECK(by_holder);
  const CollectedProfile* held = lock_profile_of(profiles, holder_span);
  REQUIRE(held != nullptr);
  CHECK(delay_share_under(held->decoded, "holder", "spanprof_plugin_hold_stock") >= 0.90);
  ::dlclose(plugin);
}
#endif

// ---- glibc's own locks: sampled by the ticker, the holder unknown ----------------
// Not under ThreadSanitizer: it runs a signal's handler at the thread's next call
// it intercepts, after the wait (fputs is none), where the ticker's signal finds
// the thread gone from the wait it was sent for.

namespace {

// The waiter's lock profile against the wait it measured: one wait, its delay
// within 15 % of [least, most], under `function`, no holder named (glibc records none).
void check_glibc_lock_waiter(const std::vector<CollectedProfile>& profiles, const spanprof::SpanContext& span,
                             double least, double most, const std::string& function) {
  const CollectedProfile* collected = lock_profile_of(profiles, span);
  INFO("measured: at least " << least * 1e3 << " ms, at most " << most * 1e3 << " ms");
  REQUIRE(collected != nullptr);
  const spanprof::Profile& profile = collected->decoded;
  INFO("its lock profile:" << describe(profile));
  std::int64_t waits = 0;
  for (const auto& sample : profile.samples) {
    CHECK(label_of(sample, "holder_thread").empty());
    CHECK(label_of(sample, "holder_span_id").empty());
    waits += sample.values[0];
  }
  CHECK(waits == 1);
  CHECK(delay_seconds(profile, "waiter") > least * 0.85);
  CHECK(delay_seconds(profile, "waiter") < most * 1.15);
  CHECK(delay_share_under(profile, "waiter", function) >= 0.90);
}

__attribute__((noinline)) Clock::time_point write_report(std::FILE* file) {
  std::fputs("restocked\n", file);
  return Clock::now();
}

__attribute__((noinline)) void await_restock(std::condition_variable& restocked, std::unique_lock<std::mutex>& lock,
                                             const bool& done) {
  restocked.wait(lock, [&] { return done; });
}

}  // namespace

TEST_CASE("lock: a span waiting for a FILE another thread holds (stdio's own lock) has the wait under the call "
          "that waited, the holder unknown",
          "[lock]" SPANPROF_TEST_NOT_UNDER_TSAN) {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  spanprof::Options options;
  Collector collector(options);
  std::FILE* file = std::fopen("/dev/null", "w");
  REQUIRE(file != nullptr);
  std::atomic<bool> holding{false};
  std::thread holder([&] {
    ::flockfile(file);
    holding = true;
    std::this_thread::sleep_for(hold_time);
    ::funlockfile(file);
  });
  while (!holding) std::this_thread::yield();
  const spanprof::SpanContext span = span_number(9500);
  Clock::time_point start, end;
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /report"}, spanprof::lock);
    start = Clock::now();
    end = write_report(file);
  }
  holder.join();
  std::fclose(file);
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  const double measured = std::chrono::duration<double>(end - start).count();
  check_glibc_lock_waiter(collector.profiles(), span, measured, measured, "write_report");
}

TEST_CASE("lock: a span whose condition variable wakes while another thread holds its mutex has the re-acquire's "
          "wait, the holder unknown",
          "[lock]" SPANPROF_TEST_NOT_UNDER_TSAN) {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  spanprof::Options options;
  Collector collector(options);
  std::mutex mutex;
  std::condition_variable restocked;
  bool done = false;
  std::atomic<bool> waiting{false};
  Clock::time_point notified;
  std::thread notifier([&] {
    while (!waiting) std::this_thread::yield();
    std::unique_lock<std::mutex> lock(mutex);  // the waiter let it go as it began to wait
    done = true;
    restocked.notify_one();
    notified = Clock::now();
    std::this_thread::sleep_for(hold_time);
  });
  const spanprof::SpanContext span = span_number(9501);
  Clock::time_point opened, woke;
  spanprof::detail::ThreadTimes before, after;
  bool timed = false;
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /stock"}, spanprof::lock);
    opened = Clock::now();
    std::unique_lock<std::mutex> lock(mutex);
    waiting = true;
    timed = spanprof::detail::read_thread_times(before);
    await_restock(restocked, lock, done);
    timed = timed && spanprof::detail::read_thread_times(after);
    woke = Clock::now();
  }
  notifier.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  // Its wait for the mutex: from the notification to the wait's return, less the
  // time the thread waited for a core in the condition wait's call (woken by the
  // notification before it tried the mutex, and after it), which the kernel counts;
  // at most from the span's open (docs/locks.md).
  const double runnable = timed ? static_cast<double>(after.run_delay_ns - before.run_delay_ns) * 1e-9 : 0.0;
  INFO("the thread waited " << runnable * 1e3 << " ms for a core in the condition wait's call");
  check_glibc_lock_waiter(collector.profiles(), span,
                          std::chrono::duration<double>(woke - notified).count() - runnable,
                          std::chrono::duration<double>(woke - opened).count(), "await_restock");
}

// ---- the continuous profile: every thread's lock waits, in a span or not -----------

TEST_CASE("lock: with the continuous profile and the lock kind, the window holds every thread's waits and the "
          "holder's charge, a span's labelled with its span",
          "[lock][continuous]") {
  const int busy = GENERATE(0, 3);
  INFO(busy << " busy processes beside");
  spanprof_test::BusyProcesses load(busy, 60);
  spanprof::Options options;
  options.continuous = true;
  options.profiles = spanprof::cpu | spanprof::lock;
  Collector collector(options);
  std::mutex mutex;
  std::atomic<int> holding{0};
  std::atomic<pid_t> holder_tid{0};
  Clock::time_point released;
  // Neither the holder nor the first waiter is in a span; the second waiter is in a
  // CPU span (no lock profile of its own): the window labels its wait with it.
  std::thread holder([&] {
    holder_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    hold_inventory(mutex, holding, released);
  });
  const spanprof::SpanContext span = span_number(9600);
  Waited waited[2];
  std::thread waiters[2] = {std::thread([&] {
                              while (holding.load() == 0) std::this_thread::yield();
                              waited[0] = take_inventory<std::mutex, Take::lock>(mutex);
                            }),
                            std::thread([&] {
                              while (holding.load() == 0) std::this_thread::yield();
                              spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /checkout"}, spanprof::cpu);
                              waited[1] = take_inventory<std::mutex, Take::lock>(mutex);
                            })};
  holder.join();
  for (auto& t : waiters) t.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  // The windows' lock samples: each waiter's (by its span: none, or the second's)
  // and the holder's charge.
  double waiter_delay[2] = {0, 0}, charged = 0, under_take = 0, under_hold = 0;
  std::string described;
  std::size_t lock_windows = 0;
  bool by_holder = false;
  for (const auto& collected : collector.profiles()) {
    if (collected.meta.record.reason != spanprof::ProfileReason::continuous ||
        collected.meta.record.kind != spanprof::ProfileKind::lock)
      continue;
    ++lock_windows;
    const spanprof::Profile& profile = collected.decoded;
    described += describe(profile);
    std::map<std::uint64_t, std::string> names;
    for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
    for (const auto& sample : profile.samples) {
      std::string role, span_id, holder_thread;
      spanprof::for_each_label(profile, sample, [&](const spanprof::Label& label) {
        if (label.key == "lock_role") role = label.str;
        if (label.key == "span_id") span_id = label.str;
        if (label.key == "holder_thread") holder_thread = std::to_string(label.num);
      });
      std::string stack;
      for (auto id : sample.location_ids) stack += names[id] + "\n";
      const double delay = static_cast<double>(sample.values[1]) * 1e-9;
      if (role == "holder") {
        charged += delay;
        if (stack.find("hold_inventory") != std::string::npos) under_hold += delay;
        continue;
      }
      // The first waiter in was let in by the holder, the other by that waiter.
      CHECK(!holder_thread.empty());
      by_holder = by_holder || holder_thread == std::to_string(holder_tid.load());
      waiter_delay[span_id == span.span_id.to_hex() ? 1 : 0] += delay;
      CHECK((span_id.empty() || span_id == span.span_id.to_hex()));
      if (stack.find("take_inventory") != std::string::npos) under_take += delay;
    }
  }
  INFO("the windows' lock samples:" << described);
  REQUIRE(lock_windows >= 1);
  CHECK(by_holder);
  for (int i = 0; i < 2; ++i) {
    INFO("waiter " << i << " measured " << waited[i].seconds() * 1e3 << " ms");
    CHECK(waiter_delay[i] > waited[i].seconds() * 0.85);
    CHECK(waiter_delay[i] < waited[i].seconds() * 1.15);
  }
  CHECK(under_take >= 0.90 * (waiter_delay[0] + waiter_delay[1]));
  const double before_release = waited[0].seconds_before(released) + waited[1].seconds_before(released);
  INFO("the waiters waited " << before_release * 1e3 << " ms before the holder's release");
  CHECK(charged > before_release * 0.85);
  CHECK(charged < before_release * 1.15);
  CHECK(under_hold >= 0.90 * charged);
}
