// The adaptive trigger, driven by a ManualClock: no sleeping, no timing.
#include "support/catch.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/policy/adaptive_trigger.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using spanprof::AdaptiveTrigger;
using spanprof::AdaptiveTriggerOptions;
using spanprof::ManualClock;

namespace {

using spanprof_test::CountingClock;

constexpr std::int64_t normal_ns = 1000;
constexpr std::int64_t one_second = 1'000'000'000;

struct Rig {
  explicit Rig(AdaptiveTriggerOptions options = {})
      : trigger(std::make_unique<AdaptiveTrigger>(options, clock)) {}
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::unique_ptr<AdaptiveTrigger> trigger;  // 70 KiB: kept off the stack
};


void feed(AdaptiveTrigger& trigger, std::uint64_t name, std::int64_t ns, int count) {
  for (int i = 0; i < count; ++i) trigger.observe(name, ns);
}

// Feeds `ns` until the name arms; returns the 1-based observation that armed it, 0 if none within `limit`.
int observations_until_armed(AdaptiveTrigger& trigger, std::uint64_t name, std::int64_t ns, int limit) {
  for (int k = 1; k <= limit; ++k) {
    trigger.observe(name, ns);
    if (trigger.armed(name)) return k;
  }
  return 0;
}

// The model's arming bound: after a step from steady L to r*L, the k-th slow
// observation arms, k the smallest with (1 - 1/recent_weight)^k < (r - factor) / (r - 1).
int predicted_arming(double r, double factor) {
  const double keep = 1.0 - 1.0 / static_cast<double>(AdaptiveTrigger::recent_weight);
  int k = 1;
  while (std::pow(keep, k) >= (r - factor) / (r - 1.0)) ++k;
  return k;
}

// Observations at a new latency r*L after which the reference exceeds r*L/factor
// for good: the baseline needs K of them, and the reference lags up to two periods.
int predicted_adaptation(double r, double factor) {
  const double keep = 1.0 - 1.0 / static_cast<double>(AdaptiveTrigger::baseline_weight);
  int k = 1;
  while (std::pow(keep, k) >= (1.0 - 1.0 / factor) * r / (r - 1.0)) ++k;
  return k + 2 * static_cast<int>(AdaptiveTrigger::reference_period);
}

// Warmed past the bound's preconditions (64 observations) at a steady latency.
constexpr int warm_up = 100;

std::uint64_t name_of(const std::string& name) { return AdaptiveTrigger::hash_name(name); }

}  // namespace

TEST_CASE("hash_name is FNV-1a, stable across builds and never 0", "[trigger]") {
  static_assert(AdaptiveTrigger::hash_name("") == 0xcbf29ce484222325ull, "FNV-1a offset basis");
  static_assert(AdaptiveTrigger::hash_name("a") == 0xaf63dc4c8601ec8cull, "published FNV-1a vector");
  static_assert(AdaptiveTrigger::hash_name("foobar") == 0x85944171f73967e8ull, "published FNV-1a vector");
  CHECK(AdaptiveTrigger::hash_name("GET /users") == AdaptiveTrigger::hash_name(std::string("GET /users")));
  CHECK(AdaptiveTrigger::hash_name("GET /users") != AdaptiveTrigger::hash_name("GET /user"));
  for (int i = 0; i < 100000; ++i) CHECK(AdaptiveTrigger::hash_name(std::to_string(i)) != 0);

  // A caller's 0 (no hash) is a name like any other, not an empty slot.
  Rig rig;
  rig.trigger->observe(0, normal_ns);
  CHECK(rig.trigger->tracked(0));
  CHECK(rig.trigger->observations(0) == 1);
  CHECK(rig.trigger->tracked_names() == 1);
}

TEST_CASE("a fresh trigger is idle and keeps its options", "[trigger]") {
  AdaptiveTriggerOptions options;
  options.factor = 3.0;
  options.spans_to_profile = 7;
  options.observe_one_in = 16;
  Rig rig(options);
  CHECK(rig.trigger->options().factor == 3.0);
  CHECK(rig.trigger->options().spans_to_profile == 7);
  CHECK(rig.trigger->options().observe_one_in == 16);
  CHECK_FALSE(rig.trigger->any_armed());
  CHECK_FALSE(rig.trigger->take(name_of("x")));
  const auto c = rig.trigger->counters();
  CHECK(c.observed == 0);
  CHECK(c.armed == 0);
  CHECK(c.spans_triggered == 0);
  CHECK(c.stood_down == 0);
  CHECK(c.names_untracked == 0);

  // make_shared (what options_from_environment uses) honours the table's alignment.
  const auto shared = std::make_shared<AdaptiveTrigger>();
  CHECK(reinterpret_cast<std::uintptr_t>(shared.get()) % alignof(AdaptiveTrigger) == 0);

  AdaptiveTriggerOptions odd;
  odd.factor = std::nan("");
  odd.observe_one_in = 0;
  odd.cooldown_ns = -5;
  AdaptiveTrigger corrected(odd, nullptr);  // a null clock falls back to the steady clock
  CHECK(corrected.options().factor == 2.0);
  CHECK(corrected.options().observe_one_in == 1);
  CHECK(corrected.options().cooldown_ns == 0);
}

TEST_CASE("no arming before min_observations", "[trigger]") {
  AdaptiveTriggerOptions options;
  options.min_observations = 50;
  Rig rig(options);
  const auto name = name_of("GET /slow-start");
  feed(*rig.trigger, name, normal_ns, 40);
  // Ten times slower: the first slow observation would arm a trusted name.
  for (int n = 41; n < 50; ++n) {
    rig.trigger->observe(name, 10 * normal_ns);
    CHECK(rig.trigger->recent_ns(name) > 2.0 * rig.trigger->reference_ns(name));
    CHECK_FALSE(rig.trigger->armed(name));
  }
  rig.trigger->observe(name, 10 * normal_ns);  // the 50th
  CHECK(rig.trigger->armed(name));
  CHECK(rig.trigger->counters().armed == 1);

  // With the defaults (32), a name that was slow from its very first span has no
  // normal to be slower than.
  Rig fresh;
  const auto other = name_of("GET /always-slow");
  feed(*fresh.trigger, other, 50 * normal_ns, 31);
  CHECK_FALSE(fresh.trigger->armed(other));
  CHECK(fresh.trigger->counters().armed == 0);
}

TEST_CASE("steady latency never arms and never reads the clock", "[trigger]") {
  const auto clock = std::make_shared<CountingClock>();
  const auto trigger = std::make_unique<AdaptiveTrigger>(AdaptiveTriggerOptions{}, clock);
  const auto constant = name_of("GET /constant");
  feed(*trigger, constant, normal_ns, 10000);
  CHECK(trigger->baseline_ns(constant) == Approx(normal_ns));
  CHECK(trigger->recent_ns(constant) == Approx(normal_ns));

  // Noisy but steady: uniform in [500, 1500] ns, from a fixed LCG.
  const auto noisy = name_of("GET /noisy");
  std::uint64_t state = 42;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    trigger->observe(noisy, 500 + static_cast<std::int64_t>((state >> 33) % 1001));
    REQUIRE_FALSE(trigger->armed(noisy));
  }
  CHECK(trigger->baseline_ns(noisy) == Approx(1000).epsilon(0.1));
  CHECK_FALSE(trigger->any_armed());
  CHECK(trigger->counters().armed == 0);
  CHECK(trigger->counters().observed == 30000);
  CHECK(clock->reads() == 0);
}

TEST_CASE("a jump by more than the factor arms within the computed bound", "[trigger]") {
  // Bound from alpha 1/8: (7/8)^k < (r - 2) / (r - 1).
  CHECK(predicted_arming(10.0, 2.0) == 1);
  CHECK(predicted_arming(5.0, 2.0) == 3);
  CHECK(predicted_arming(3.0, 2.0) == 6);
  CHECK(predicted_arming(2.5, 2.0) == 9);
  CHECK(predicted_arming(2.2, 2.0) == 14);
  CHECK(predicted_arming(2.015, 2.0) <= static_cast<int>(AdaptiveTrigger::reference_period));

  for (const double r : {10.0, 5.0, 3.0, 2.5, 2.2, 2.05, 2.015}) {
    INFO("jump to " << r << "x");
    Rig rig;
    const auto name = name_of("POST /checkout");
    feed(*rig.trigger, name, normal_ns, warm_up);
    const int expected = predicted_arming(r, 2.0);
    REQUIRE(expected <= static_cast<int>(AdaptiveTrigger::reference_period));
    const int armed_at =
        observations_until_armed(*rig.trigger, name, static_cast<std::int64_t>(r * normal_ns), expected + 5);
    CHECK(armed_at == expected);
    CHECK(rig.trigger->counters().armed == 1);
  }

  // Why the reference lags: when the 2.2x jump arms, the live baseline has already
  // crept up so far that recent is not yet twice it.
  Rig rig;
  const auto name = name_of("POST /checkout");
  feed(*rig.trigger, name, normal_ns, warm_up);
  REQUIRE(observations_until_armed(*rig.trigger, name, 2200, 40) == 14);
  CHECK(rig.trigger->recent_ns(name) < 2.0 * rig.trigger->baseline_ns(name));
  CHECK(rig.trigger->reference_ns(name) == Approx(normal_ns));

  // A jump below the factor never arms.
  Rig below;
  feed(*below.trigger, name, normal_ns, warm_up);
  CHECK(observations_until_armed(*below.trigger, name, 1900, 1000) == 0);
}

TEST_CASE("an arming hands out exactly N spans, then stands down", "[trigger]") {
  AdaptiveTriggerOptions options;
  options.spans_to_profile = 5;
  Rig rig(options);
  const auto name = name_of("GET /report");
  feed(*rig.trigger, name, normal_ns, warm_up);
  REQUIRE(observations_until_armed(*rig.trigger, name, 3 * normal_ns, 10) == 6);
  CHECK(rig.trigger->remaining(name) == 5);
  for (int i = 0; i < 5; ++i) CHECK(rig.trigger->take(name));
  CHECK_FALSE(rig.trigger->take(name));
  CHECK_FALSE(rig.trigger->take(name));
  CHECK_FALSE(rig.trigger->armed(name));
  CHECK_FALSE(rig.trigger->any_armed());
  const auto c = rig.trigger->counters();
  CHECK(c.armed == 1);
  CHECK(c.spans_triggered == 5);
  CHECK(c.stood_down == 1);

  // Still slow, but cooling down: observations do not re-arm it.
  feed(*rig.trigger, name, 3 * normal_ns, 3);
  CHECK_FALSE(rig.trigger->armed(name));
  CHECK(rig.trigger->counters().armed == 1);
}

TEST_CASE("an arming stands down early when latency is back to normal", "[trigger]") {
  Rig rig;
  const auto name = name_of("GET /blip");
  feed(*rig.trigger, name, normal_ns, warm_up);
  REQUIRE(observations_until_armed(*rig.trigger, name, 4 * normal_ns, 10) > 0);
  CHECK(rig.trigger->take(name));
  int normal_observations = 0;
  while (rig.trigger->armed(name) && normal_observations < 100) {
    rig.trigger->observe(name, normal_ns);
    ++normal_observations;
  }
  CHECK_FALSE(rig.trigger->armed(name));
  CHECK(rig.trigger->recent_ns(name) <= 2.0 * rig.trigger->reference_ns(name));
  CHECK(normal_observations < 20);
  CHECK_FALSE(rig.trigger->take(name));
  CHECK_FALSE(rig.trigger->any_armed());
  const auto c = rig.trigger->counters();
  CHECK(c.spans_triggered == 1);
  CHECK(c.stood_down == 1);

  // The cooldown started with the early stand-down: a new jump does not re-arm yet.
  CHECK(observations_until_armed(*rig.trigger, name, 10 * normal_ns, 5) == 0);
  rig.clock->advance(rig.trigger->options().cooldown_ns);
  CHECK(observations_until_armed(*rig.trigger, name, 10 * normal_ns, 5) > 0);
}

TEST_CASE("cooldown holds off re-arming until cooldown_ns has passed", "[trigger]") {
  Rig rig;
  const auto cooldown = rig.trigger->options().cooldown_ns;
  const auto name = name_of("GET /cooling");
  feed(*rig.trigger, name, normal_ns, warm_up);
  REQUIRE(observations_until_armed(*rig.trigger, name, 3 * normal_ns, 10) == 6);
  while (rig.trigger->take(name)) {
  }
  // take() does not read the clock; the next observation starts the cooldown.
  rig.trigger->observe(name, 3 * normal_ns);
  rig.clock->advance(cooldown - 1);
  rig.trigger->observe(name, 3 * normal_ns);
  CHECK_FALSE(rig.trigger->armed(name));
  CHECK(rig.trigger->counters().armed == 1);

  rig.clock->advance(1);
  rig.trigger->observe(name, 3 * normal_ns);  // still slow, and its normal has barely moved
  CHECK(rig.trigger->armed(name));
  CHECK(rig.trigger->counters().armed == 2);
  CHECK(rig.trigger->remaining(name) == rig.trigger->options().spans_to_profile);
}

TEST_CASE("a permanently slower name stops re-arming once its baseline adapts", "[trigger]") {
  Rig rig;
  const auto cooldown = rig.trigger->options().cooldown_ns;
  const auto name = name_of("GET /new-normal");
  feed(*rig.trigger, name, normal_ns, warm_up);
  const int armed_at = observations_until_armed(*rig.trigger, name, 3 * normal_ns, 10);
  REQUIRE(armed_at == 6);
  while (rig.trigger->take(name)) {
  }
  // Within one cooldown the name sees as many 3x observations as the model needs.
  const int adapt = predicted_adaptation(3.0, 2.0);
  CHECK(adapt == 19 + 64);
  CHECK(predicted_adaptation(1e9, 2.0) == 45 + 64);  // the bound for any jump at factor 2
  feed(*rig.trigger, name, 3 * normal_ns, adapt - armed_at);
  CHECK(rig.trigger->reference_ns(name) > 3.0 * normal_ns / 2.0);

  // Cooldowns pass, the latency stays 3x: nothing arms again.
  for (int round = 0; round < 20; ++round) {
    rig.clock->advance(cooldown + one_second);
    feed(*rig.trigger, name, 3 * normal_ns, 50);
    REQUIRE_FALSE(rig.trigger->armed(name));
  }
  CHECK(rig.trigger->counters().armed == 1);
  CHECK(rig.trigger->baseline_ns(name) == Approx(3.0 * normal_ns).epsilon(0.01));

  // The new normal is the yardstick now: a further 3x jump arms again.
  CHECK(observations_until_armed(*rig.trigger, name, 9 * normal_ns, 10) == 6);
}

TEST_CASE("a quiet name re-arms once per cooldown until its baseline catches up", "[trigger]") {
  Rig rig;
  const auto cooldown = rig.trigger->options().cooldown_ns;
  const auto name = name_of("GET /quiet");
  feed(*rig.trigger, name, normal_ns, warm_up);
  REQUIRE(observations_until_armed(*rig.trigger, name, 3 * normal_ns, 10) == 6);
  int slow_observations = 6;
  // Each cooldown sees only a few observations of the name.
  while (slow_observations < 200) {
    while (rig.trigger->take(name)) {
    }
    rig.clock->advance(cooldown);
    feed(*rig.trigger, name, 3 * normal_ns, 4);
    slow_observations += 4;
  }
  const auto armings = rig.trigger->counters().armed;
  CHECK(armings > 1);
  // Bounded by the adaptation: no arming once the reference passed 1.5x.
  CHECK(armings <= static_cast<std::uint64_t>(predicted_adaptation(3.0, 2.0) / 4 + 1));
  CHECK_FALSE(rig.trigger->armed(name));
}

TEST_CASE("the process-wide rate limit spaces armings", "[trigger]") {
  Rig rig;  // 1 arming a second
  const auto a = name_of("GET /a");
  const auto b = name_of("GET /b");
  feed(*rig.trigger, a, normal_ns, warm_up);
  feed(*rig.trigger, b, normal_ns, warm_up);
  for (int i = 0; i < 10; ++i) {
    rig.trigger->observe(a, 5 * normal_ns);
    rig.trigger->observe(b, 5 * normal_ns);
  }
  CHECK(rig.trigger->armed(a));
  CHECK_FALSE(rig.trigger->armed(b));
  CHECK(rig.trigger->rate_limited() > 0);

  rig.clock->advance(one_second - 1);
  rig.trigger->observe(b, 5 * normal_ns);
  CHECK_FALSE(rig.trigger->armed(b));
  rig.clock->advance(1);
  rig.trigger->observe(b, 5 * normal_ns);
  CHECK(rig.trigger->armed(b));
  CHECK(rig.trigger->counters().armed == 2);

  // Idle time earns no credit: a burst of one.
  const auto c = name_of("GET /c");
  const auto d = name_of("GET /d");
  feed(*rig.trigger, c, normal_ns, warm_up);
  feed(*rig.trigger, d, normal_ns, warm_up);
  rig.clock->advance(3600 * one_second);
  rig.trigger->observe(c, 10 * normal_ns);
  rig.trigger->observe(d, 10 * normal_ns);
  CHECK(rig.trigger->armed(c));
  CHECK_FALSE(rig.trigger->armed(d));

  // 0 per second: never arms.
  AdaptiveTriggerOptions off;
  off.max_triggers_per_second = 0;
  Rig disabled(off);
  feed(*disabled.trigger, a, normal_ns, warm_up);
  feed(*disabled.trigger, a, 10 * normal_ns, 50);
  CHECK_FALSE(disabled.trigger->armed(a));
  CHECK(disabled.trigger->counters().armed == 0);
}

TEST_CASE("names are independent", "[trigger]") {
  Rig rig;
  const auto fast = name_of("GET /fast");
  const auto slow = name_of("GET /slow");
  feed(*rig.trigger, fast, normal_ns, warm_up);
  feed(*rig.trigger, slow, 50 * normal_ns, warm_up);
  // The fast name's jump to 3 us is far below the slow name's normal; only it arms.
  REQUIRE(observations_until_armed(*rig.trigger, fast, 3 * normal_ns, 10) == 6);
  feed(*rig.trigger, slow, 50 * normal_ns, 20);
  CHECK_FALSE(rig.trigger->armed(slow));
  CHECK_FALSE(rig.trigger->take(slow));
  CHECK(rig.trigger->baseline_ns(slow) == Approx(50 * normal_ns));
  CHECK(rig.trigger->observations(slow) == warm_up + 20);
  CHECK(rig.trigger->observations(fast) == warm_up + 6);
  CHECK(rig.trigger->take(fast));
  CHECK_FALSE(rig.trigger->take(name_of("GET /never-seen")));
  CHECK_FALSE(rig.trigger->tracked(name_of("GET /never-seen")));
}

TEST_CASE("a full table ignores new names and counts them", "[trigger]") {
  Rig rig;
  constexpr int total = 8 * static_cast<int>(AdaptiveTrigger::capacity);
  std::vector<std::uint64_t> names;
  for (int i = 0; i < total; ++i) names.push_back(name_of("GET /item/" + std::to_string(i)));
  for (const auto name : names) rig.trigger->observe(name, normal_ns);

  CHECK(rig.trigger->tracked_names() == AdaptiveTrigger::capacity);
  int tracked = 0;
  std::uint64_t untracked_name = 0;
  for (const auto name : names) {
    if (rig.trigger->tracked(name)) {
      CHECK(rig.trigger->observations(name) == 1);
      ++tracked;
    } else if (untracked_name == 0) {
      untracked_name = name;
    }
  }
  CHECK(tracked == static_cast<int>(AdaptiveTrigger::capacity));
  auto c = rig.trigger->counters();
  CHECK(c.names_untracked == static_cast<std::uint64_t>(total - tracked));
  CHECK(c.observed == static_cast<std::uint64_t>(total));

  // An untracked name stays untracked and never arms; tracked names still work.
  REQUIRE(untracked_name != 0);
  feed(*rig.trigger, untracked_name, normal_ns, warm_up);
  feed(*rig.trigger, untracked_name, 10 * normal_ns, 10);
  CHECK_FALSE(rig.trigger->armed(untracked_name));
  CHECK_FALSE(rig.trigger->take(untracked_name));
  c = rig.trigger->counters();
  CHECK(c.names_untracked == static_cast<std::uint64_t>(total - tracked + warm_up + 10));
  CHECK(c.armed == 0);

  std::uint64_t tracked_name = 0;
  for (const auto name : names)
    if (rig.trigger->tracked(name)) tracked_name = name;
  feed(*rig.trigger, tracked_name, normal_ns, warm_up);
  CHECK(observations_until_armed(*rig.trigger, tracked_name, 3 * normal_ns, 10) == 6);
}

TEST_CASE("concurrent takes never hand out more than N per arming", "[trigger]") {
  AdaptiveTriggerOptions options;
  options.spans_to_profile = 100;
  options.max_triggers_per_second = 1e9;
  Rig rig(options);
  constexpr int threads = 4;
  for (int round = 0; round < 20; ++round) {
    const auto name = name_of("GET /contended/" + std::to_string(round));
    feed(*rig.trigger, name, normal_ns, warm_up);
    rig.clock->advance(one_second);
    REQUIRE(observations_until_armed(*rig.trigger, name, 10 * normal_ns, 5) == 1);

    std::atomic<int> ready{0};
    std::atomic<int> granted{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < threads) {
        }
        int mine = 0;
        for (int i = 0; i < 1000; ++i) mine += rig.trigger->take(name) ? 1 : 0;
        granted.fetch_add(mine);
      });
    }
    for (auto& thread : pool) thread.join();
    CHECK(granted.load() == 100);
    CHECK(rig.trigger->remaining(name) == 0);
    CHECK_FALSE(rig.trigger->any_armed());
  }
  const auto c = rig.trigger->counters();
  CHECK(c.armed == 20);
  CHECK(c.spans_triggered == 20 * 100);
  CHECK(c.stood_down == 20);
}

TEST_CASE("concurrent observe and take keep the counters consistent", "[trigger]") {
  AdaptiveTriggerOptions options;
  options.spans_to_profile = 3;
  options.max_triggers_per_second = 1000;
  options.cooldown_ns = 50'000'000;
  Rig rig(options);
  constexpr int threads = 4;
  constexpr int iterations = 20000;
  std::vector<std::uint64_t> names;
  for (int i = 0; i < 16; ++i) names.push_back(name_of("RPC /" + std::to_string(i)));

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::uint64_t state = static_cast<std::uint64_t>(t) + 1;
      for (int i = 0; i < iterations; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const auto name = names[(state >> 40) % names.size()];
        // Each name alternates between spells of normal and of 4x latency.
        const bool slow_spell = ((i / 500) + static_cast<int>((state >> 20) % 2)) % 3 == 2;
        rig.trigger->observe(name, slow_spell ? 4 * normal_ns : normal_ns);
        if (rig.trigger->any_armed()) rig.trigger->take(name);
        if (t == 0 && i % 50 == 0) rig.clock->advance(10'000'000);
      }
    });
  }
  for (auto& thread : pool) thread.join();

  const auto c = rig.trigger->counters();
  std::uint64_t armed_now = 0;
  for (const auto name : names) armed_now += rig.trigger->armed(name) ? 1 : 0;
  CHECK(c.observed == static_cast<std::uint64_t>(threads) * iterations);
  CHECK(c.armed > 0);
  CHECK(c.stood_down <= c.armed);
  CHECK(c.armed - c.stood_down == armed_now);
  CHECK(c.spans_triggered <= c.armed * options.spans_to_profile);
  CHECK(rig.trigger->any_armed() == (armed_now > 0));
  CHECK(rig.trigger->tracked_names() == names.size());
}

TEST_CASE("any_armed is true exactly while some name is armed", "[trigger]") {
  AdaptiveTriggerOptions options;
  options.spans_to_profile = 2;
  Rig rig(options);
  const auto a = name_of("GET /a");
  const auto b = name_of("GET /b");
  feed(*rig.trigger, a, normal_ns, warm_up);
  feed(*rig.trigger, b, normal_ns, warm_up);
  CHECK_FALSE(rig.trigger->any_armed());

  REQUIRE(observations_until_armed(*rig.trigger, a, 3 * normal_ns, 10) > 0);
  CHECK(rig.trigger->any_armed());
  rig.clock->advance(one_second);
  REQUIRE(observations_until_armed(*rig.trigger, b, 3 * normal_ns, 10) > 0);
  CHECK(rig.trigger->any_armed());

  CHECK(rig.trigger->take(a));
  CHECK(rig.trigger->any_armed());
  CHECK(rig.trigger->take(a));  // a stands down; b is still armed
  CHECK(rig.trigger->any_armed());
  CHECK(rig.trigger->take(b));
  CHECK(rig.trigger->any_armed());
  CHECK(rig.trigger->take(b));
  CHECK_FALSE(rig.trigger->any_armed());
  CHECK_FALSE(rig.trigger->take(a));
  CHECK_FALSE(rig.trigger->take(b));
  CHECK(rig.trigger->counters().stood_down == 2);
}
