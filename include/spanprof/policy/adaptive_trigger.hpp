// AdaptiveTrigger: profile the next few spans of a name whose latency just jumped.
//
// Head sampling profiles a fixed share of spans, so the rare moment an endpoint
// turns slow is usually missed. The trigger watches every span name's latency
// cheaply and, when a name becomes slower than its own normal, asks the guards to
// profile the next N spans of that name, whatever the head sampler says.
//
// Per name, two EWMAs of latency (recent, 1/8; baseline, 1/64) in fixed point;
// a name arms when recent exceeds factor x the baseline as it stood 32 to 64
// observations ago (a lagged yardstick, so a step is not chased away by a baseline
// that climbs with it), then hands out N take()s, stands down and cools down.
// Armings are rate-limited process-wide. observe(), take() and any_armed() are
// lock-free, never allocate and never block; names live in a fixed open-addressed
// table. The derivation of the bounds (when a step arms, when a new normal stops
// arming) and the concurrency rules: docs/sampling.md, "How the trigger decides".
#ifndef SPANPROF_POLICY_ADAPTIVE_TRIGGER_HPP_
#define SPANPROF_POLICY_ADAPTIVE_TRIGGER_HPP_

#include <spanprof/base/clock.hpp>
#include <spanprof/config.hpp>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>

SPANPROF_NAMESPACE_BEGIN

struct AdaptiveTriggerOptions {
  double factor = 2.0;                    // recent latency > factor * baseline arms the trigger (below 1: 1)
  std::uint32_t spans_to_profile = 5;     // N: spans of that name profiled once armed (0: never arm)
  std::uint32_t min_observations = 32;    // a name's baseline is trusted after this many spans
  std::int64_t cooldown_ns = 60'000'000'000;  // after standing down, the same name cannot re-arm for this long
  // Process-wide: armings are at least 1/x seconds apart (a burst of one; idle time
  // earns no credit). 0 or less: never arm. Infinity: no limit.
  double max_triggers_per_second = 1.0;
  std::uint32_t observe_one_in = 8;       // guards time 1 span in K per thread to feed the trigger (0: 1)
};

class AdaptiveTrigger {
 public:
  static constexpr std::size_t capacity = 1024;  // names tracked at most
  static constexpr std::size_t max_probe = 64;   // slots tried from a name's home before giving up
  static constexpr std::int64_t recent_weight = 8;     // recent EWMA alpha = 1/8
  static constexpr std::int64_t baseline_weight = 64;  // baseline EWMA alpha = 1/64
  static constexpr std::uint64_t reference_period = 32;  // observations between reference snapshots
  // Longer durations count as this long: keeps the fixed-point arithmetic far from
  // overflow (2^44 ns is about 4.9 hours).
  static constexpr std::int64_t max_duration_ns = std::int64_t{1} << 44;

  struct Counters {
    std::uint64_t observed = 0;         // observe() calls, tracked names or not
    std::uint64_t armed = 0;            // times a name armed
    std::uint64_t spans_triggered = 0;  // take() calls that said yes
    std::uint64_t stood_down = 0;       // armings that ended (N taken, or latency back to normal)
    std::uint64_t names_untracked = 0;  // observe() calls ignored: the name found no slot
  };

  explicit AdaptiveTrigger(AdaptiveTriggerOptions options = {},
                           std::shared_ptr<const Clock> clock = default_clock()) noexcept
      : options_(sanitized(options)),
        arm_interval_ns_(interval_for(options_.max_triggers_per_second)),
        clock_owner_(std::move(clock)),
        clock_(clock_owner_ ? clock_owner_.get() : &fallback_clock_) {}

  AdaptiveTrigger(const AdaptiveTrigger&) = delete;
  AdaptiveTrigger& operator=(const AdaptiveTrigger&) = delete;

  // FNV-1a, 64-bit: the same name gives the same value in every process and build,
  // so hashes can be compared across services. Never 0, which guards use for
  // "not hashed yet" and the table for "empty".
  static constexpr std::uint64_t hash_name(std::string_view name) noexcept {
    std::uint64_t hash = 0xcbf29ce484222325ull;
    for (const char c : name) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ull;
    }
    return hash != 0 ? hash : zero_hash_stand_in;
  }

  // One span of this name took duration_ns. May arm the name.
  void observe(std::uint64_t name_hash, std::int64_t duration_ns) noexcept {
    Slot* slot = find(key_of(name_hash), /*claim=*/true);
    if (slot == nullptr) {
      untracked_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::uint64_t n = slot->observations.fetch_add(1, std::memory_order_relaxed) + 1;
    const std::int64_t clamped = duration_ns < 0 ? 0 : (duration_ns > max_duration_ns ? max_duration_ns : duration_ns);
    const std::int64_t x = clamped * fixed_one;
    const std::int64_t recent = update_ewma(slot->recent, x, weight_for(n, recent_weight));
    const std::int64_t baseline = update_ewma(slot->baseline, x, weight_for(n, baseline_weight));
    if (n % reference_period == 0) {
      // The snapshot taken one period ago becomes the yardstick; on the first
      // boundary there is none yet, and the baseline of now is the best we have.
      const std::int64_t previous = slot->pending.load(std::memory_order_relaxed);
      slot->reference.store(n == reference_period ? baseline : previous, std::memory_order_relaxed);
      slot->pending.store(baseline, std::memory_order_relaxed);
    }
    const bool over = n >= options_.min_observations && is_over(recent, reference_of(*slot, baseline));

    std::uint64_t state = slot->arming.load(std::memory_order_acquire);
    if ((state & remaining_mask) != 0) {
      if (!over) stand_down_early(*slot, state);
      return;
    }
    if ((state & cooldown_unstamped) != 0) {
      start_cooldown(*slot, state);
      return;
    }
    if (!over || options_.spans_to_profile == 0) return;
    const std::int64_t now = clock_->now_ns();
    if (now < slot->rearm_at_ns.load(std::memory_order_relaxed)) return;
    // Should a racing thread arm the name first, this token is spent for nothing:
    // the next arming waits one interval more, which only errs on the quiet side.
    if (!take_rate_token(now)) {
      rate_limited_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Counted before the arming is visible, so any_armed() is never false while a
    // name can hand out spans.
    armed_names_.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t armed_state = (state & generation_mask) | cooldown_unstamped | options_.spans_to_profile;
    if (slot->arming.compare_exchange_strong(state, armed_state, std::memory_order_acq_rel,
                                             std::memory_order_relaxed)) {
      armed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      armed_names_.fetch_sub(1, std::memory_order_relaxed);  // another thread armed it first
    }
  }

  // Should this span of the name be profiled? Yes at most N times per arming.
  bool take(std::uint64_t name_hash) noexcept {
    if (!any_armed()) return false;
    Slot* slot = find(key_of(name_hash), /*claim=*/false);
    if (slot == nullptr) return false;
    std::uint64_t state = slot->arming.load(std::memory_order_relaxed);
    while ((state & remaining_mask) != 0) {
      if (slot->arming.compare_exchange_weak(state, state - 1, std::memory_order_acq_rel,
                                             std::memory_order_relaxed)) {
        spans_triggered_.fetch_add(1, std::memory_order_relaxed);
        if ((state & remaining_mask) == 1) record_stand_down();
        return true;
      }
    }
    return false;
  }

  bool any_armed() const noexcept { return armed_names_.load(std::memory_order_relaxed) > 0; }

  // The options in effect, after the corrections documented on each field.
  const AdaptiveTriggerOptions& options() const noexcept { return options_; }

  // Sums over the table: meant for stats and tests, not for a request path.
  Counters counters() const noexcept {
    Counters c;
    for (std::size_t i = 0; i < capacity; ++i) {
      if (keys_[i].load(std::memory_order_relaxed) != 0)
        c.observed += slots_[i].observations.load(std::memory_order_relaxed);
    }
    c.names_untracked = untracked_.load(std::memory_order_relaxed);
    c.observed += c.names_untracked;
    c.armed = armed_.load(std::memory_order_relaxed);
    c.spans_triggered = spans_triggered_.load(std::memory_order_relaxed);
    c.stood_down = stood_down_.load(std::memory_order_relaxed);
    return c;
  }

  // Armings the process-wide limit refused (one per refused observation).
  std::uint64_t rate_limited() const noexcept { return rate_limited_.load(std::memory_order_relaxed); }
  std::size_t tracked_names() const noexcept { return tracked_.load(std::memory_order_relaxed); }

  // Per-name introspection, for tests and docs. Unknown names read as 0 / false.
  bool tracked(std::uint64_t name_hash) const noexcept { return lookup(name_hash) != nullptr; }
  std::uint64_t observations(std::uint64_t name_hash) const noexcept {
    const Slot* slot = lookup(name_hash);
    return slot ? slot->observations.load(std::memory_order_relaxed) : 0;
  }
  double baseline_ns(std::uint64_t name_hash) const noexcept {
    const Slot* slot = lookup(name_hash);
    return slot ? to_ns(slot->baseline.load(std::memory_order_relaxed)) : 0.0;
  }
  double recent_ns(std::uint64_t name_hash) const noexcept {
    const Slot* slot = lookup(name_hash);
    return slot ? to_ns(slot->recent.load(std::memory_order_relaxed)) : 0.0;
  }
  // What recent is compared with: factor * reference_ns is the arming threshold.
  double reference_ns(std::uint64_t name_hash) const noexcept {
    const Slot* slot = lookup(name_hash);
    return slot ? to_ns(reference_of(*slot, slot->baseline.load(std::memory_order_relaxed))) : 0.0;
  }
  bool armed(std::uint64_t name_hash) const noexcept { return remaining(name_hash) != 0; }
  // Spans still to hand out in the current arming.
  std::uint32_t remaining(std::uint64_t name_hash) const noexcept {
    const Slot* slot = lookup(name_hash);
    return slot ? static_cast<std::uint32_t>(slot->arming.load(std::memory_order_relaxed) & remaining_mask) : 0;
  }

 private:
  // One name. A cache line each, so two busy names never share one.
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> observations{0};
    std::atomic<std::int64_t> recent{0};     // fixed point
    std::atomic<std::int64_t> baseline{0};   // fixed point
    std::atomic<std::int64_t> reference{0};  // fixed point; 0 until the first snapshot
    std::atomic<std::int64_t> pending{0};    // the snapshot that becomes the next reference
    // remaining spans (bits 0-31) | cooldown_unstamped (bit 32) | generation (33-63).
    // One word, so arming, taking and standing down are single compare-and-swaps;
    // the generation makes an arming attempt that read the state before a whole
    // arm/take/stand-down cycle fail instead of arming twice in one cooldown.
    std::atomic<std::uint64_t> arming{0};
    std::atomic<std::int64_t> rearm_at_ns{std::numeric_limits<std::int64_t>::min()};
  };

  static constexpr std::int64_t fixed_one = 256;  // fixed point: 1/256 ns
  static constexpr std::uint64_t remaining_mask = 0xffffffffull;
  // Set while armed and after standing down until an observation stamps the cooldown.
  static constexpr std::uint64_t cooldown_unstamped = std::uint64_t{1} << 32;
  static constexpr std::uint64_t generation_unit = std::uint64_t{1} << 33;
  static constexpr std::uint64_t generation_mask = ~(generation_unit - 1);
  static constexpr unsigned capacity_bits = 10;
  static_assert((std::size_t{1} << capacity_bits) == capacity, "capacity is a power of two");
  static_assert(max_probe <= capacity, "a probe never wraps onto itself");
  // A caller may pass 0 (an unhashed name); 0 marks an empty slot, so it stands for this.
  static constexpr std::uint64_t zero_hash_stand_in = 0x9e3779b97f4a7c15ull;

  static AdaptiveTriggerOptions sanitized(AdaptiveTriggerOptions o) noexcept {
    if (std::isnan(o.factor)) o.factor = AdaptiveTriggerOptions{}.factor;
    if (o.factor < 1.0) o.factor = 1.0;
    if (o.cooldown_ns < 0) o.cooldown_ns = 0;
    if (o.observe_one_in == 0) o.observe_one_in = 1;
    return o;
  }

  // -1: arming off.
  static std::int64_t interval_for(double per_second) noexcept {
    if (!(per_second > 0.0)) return -1;
    const double ns = 1e9 / per_second;
    constexpr double longest = static_cast<double>(std::numeric_limits<std::int64_t>::max() / 4);
    return ns >= longest ? static_cast<std::int64_t>(longest) : static_cast<std::int64_t>(ns);
  }

  static std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
    // b >= 0 at every call site.
    return a > std::numeric_limits<std::int64_t>::max() - b ? std::numeric_limits<std::int64_t>::max() : a + b;
  }

  static std::uint64_t key_of(std::uint64_t name_hash) noexcept {
    return name_hash != 0 ? name_hash : zero_hash_stand_in;
  }

  // Fibonacci hashing: a caller's hash need not have well-mixed low bits.
  static std::size_t home_of(std::uint64_t key) noexcept {
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ull) >> (64 - capacity_bits));
  }

  static std::int64_t weight_for(std::uint64_t n, std::int64_t weight) noexcept {
    return n < static_cast<std::uint64_t>(weight) ? static_cast<std::int64_t>(n) : weight;
  }

  // Load, compute, store: a racing update may be lost, which only makes the
  // average approximate; a CAS loop would make hot names pay for exactness.
  static std::int64_t update_ewma(std::atomic<std::int64_t>& average, std::int64_t x, std::int64_t weight) noexcept {
    const std::int64_t old = average.load(std::memory_order_relaxed);
    const std::int64_t next = weight <= 1 ? x : old + (x - old) / weight;
    average.store(next, std::memory_order_relaxed);
    return next;
  }

  static std::int64_t reference_of(const Slot& slot, std::int64_t baseline) noexcept {
    // 0 means no snapshot yet (or a racing first one): fall back to the baseline
    // rather than compare with zero and arm on anything.
    const std::int64_t reference = slot.reference.load(std::memory_order_relaxed);
    return reference > 0 && reference < baseline ? reference : baseline;
  }

  bool is_over(std::int64_t recent, std::int64_t reference) const noexcept {
    return static_cast<double>(recent) > options_.factor * static_cast<double>(reference);
  }

  static double to_ns(std::int64_t fixed) noexcept { return static_cast<double>(fixed) / fixed_one; }

  Slot* find(std::uint64_t key, bool claim) noexcept {
    std::size_t i = home_of(key);
    for (std::size_t probe = 0; probe < max_probe; ++probe, i = (i + 1) & (capacity - 1)) {
      std::uint64_t found = keys_[i].load(std::memory_order_acquire);
      if (found == key) return &slots_[i];
      if (found != 0) continue;
      // Names are never removed, so an empty slot ends the search for a known name.
      if (!claim) return nullptr;
      if (keys_[i].compare_exchange_strong(found, key, std::memory_order_acq_rel, std::memory_order_acquire)) {
        tracked_.fetch_add(1, std::memory_order_relaxed);
        return &slots_[i];
      }
      if (found == key) return &slots_[i];  // the same name, claimed by another thread
    }
    return nullptr;
  }

  const Slot* lookup(std::uint64_t name_hash) const noexcept {
    return const_cast<AdaptiveTrigger*>(this)->find(key_of(name_hash), /*claim=*/false);
  }

  // Burst of one: the next arming is allowed one interval after the last one,
  // however long ago that was.
  bool take_rate_token(std::int64_t now) noexcept {
    if (arm_interval_ns_ < 0) return false;
    std::int64_t next = next_arm_ns_.load(std::memory_order_relaxed);
    do {
      if (now < next) return false;
    } while (!next_arm_ns_.compare_exchange_weak(next, saturating_add(now, arm_interval_ns_),
                                                 std::memory_order_relaxed, std::memory_order_relaxed));
    return true;
  }

  void record_stand_down() noexcept {
    stood_down_.fetch_add(1, std::memory_order_relaxed);
    armed_names_.fetch_sub(1, std::memory_order_relaxed);
  }

  void stand_down_early(Slot& slot, std::uint64_t state) noexcept {
    while ((state & remaining_mask) != 0) {
      if (slot.arming.compare_exchange_weak(state, state & ~remaining_mask, std::memory_order_acq_rel,
                                            std::memory_order_relaxed)) {
        record_stand_down();
        start_cooldown(slot, state & ~remaining_mask);
        return;
      }
    }
    // A take() handed out the last span meanwhile and stood the name down.
  }

  // `state` has no spans left and an unstamped cooldown.
  void start_cooldown(Slot& slot, std::uint64_t state) noexcept {
    // The stamp is stored before the state says "idle", so whoever sees the idle
    // state (acquire) sees the cooldown that goes with it.
    slot.rearm_at_ns.store(saturating_add(clock_->now_ns(), options_.cooldown_ns), std::memory_order_relaxed);
    slot.arming.compare_exchange_strong(state, (state & generation_mask) + generation_unit, std::memory_order_release,
                                        std::memory_order_relaxed);
  }

  const AdaptiveTriggerOptions options_;
  const std::int64_t arm_interval_ns_;
  SteadyClock fallback_clock_;  // when given a null clock; a member, so nothing can fail
  const std::shared_ptr<const Clock> clock_owner_;
  const Clock* const clock_;

  // Read by every guard; written only when a name arms or stands down.
  alignas(64) std::atomic<std::int64_t> armed_names_{0};
  // Written when names arm, stand down or are added.
  alignas(64) std::atomic<std::int64_t> next_arm_ns_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<std::uint64_t> armed_{0};
  std::atomic<std::uint64_t> spans_triggered_{0};
  std::atomic<std::uint64_t> stood_down_{0};
  std::atomic<std::uint64_t> rate_limited_{0};
  std::atomic<std::size_t> tracked_{0};
  // Written on every observation of an untracked name once the table is full.
  alignas(64) std::atomic<std::uint64_t> untracked_{0};
  alignas(64) std::atomic<std::uint64_t> keys_[capacity] = {};  // name hashes, probed densely; 0: empty
  Slot slots_[capacity];
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_POLICY_ADAPTIVE_TRIGGER_HPP_
