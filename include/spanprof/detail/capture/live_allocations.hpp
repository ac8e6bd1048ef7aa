// The sampled allocations still live, for the heap sampler (heap_sampler.hpp):
// the new hook adds the allocation it samples, the delete hook (any thread) marks
// it freed with one cache line scan and a CAS; while none is live, the delete hook
// returns after one load.
#ifndef SPANPROF_DETAIL_CAPTURE_LIVE_ALLOCATIONS_HPP_
#define SPANPROF_DETAIL_CAPTURE_LIVE_ALLOCATIONS_HPP_

#include <spanprof/config.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Sampled allocations that have not been freed, shared by all threads. Slots are
// grouped by cache line; a pointer lives only in its hash's group, so a lookup is
// one line. Each entry packs the pointer with a tag unique to the sample, so an
// address freed and reused by a later sample is never mistaken for the earlier one.
class LiveAllocationTable {
 public:
  static constexpr std::size_t group_slots = 8;
  static constexpr unsigned group_bits = 13;
  static constexpr std::size_t slot_count = group_slots << group_bits;  // 64 Ki slots, 512 KiB
  static constexpr unsigned tag_bits = 19;
  static constexpr std::uint64_t no_slot = ~std::uint64_t{0};

  // Returns the slot index, or no_slot when the pointer cannot be tracked (the group
  // is full, or the address does not fit the packing). `entry` receives the value
  // the slot holds while the allocation lives.
  std::uint64_t insert(const void* pointer, std::uint64_t& entry) noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
    if ((address & 7) != 0 || (address >> 48) != 0 || address == 0) return no_slot;
    const std::uint64_t key = address >> 3;
    const std::uint64_t tag = next_tag_.fetch_add(1, std::memory_order_relaxed) & ((1u << tag_bits) - 1);
    entry = (key << tag_bits) | tag;
    // Counted before it is visible: a free on another thread (which the program can
    // only do after it received the pointer) must not see an empty table.
    live_.fetch_add(1, std::memory_order_relaxed);
    const std::size_t first = group_of(key) * group_slots;
    for (std::size_t i = first; i < first + group_slots; ++i) {
      std::uint64_t empty = 0;
      if (slots_[i].compare_exchange_strong(empty, entry, std::memory_order_release, std::memory_order_relaxed)) {
        return i;
      }
    }
    live_.fetch_sub(1, std::memory_order_relaxed);
    return no_slot;
  }

  bool any_live() const noexcept { return live_.load(std::memory_order_relaxed) != 0; }

  // The delete hook: forgets the pointer if it is a live sample. Inlined test: most
  // deletes happen while no sampled allocation is alive anywhere.
  SPANPROF_ALWAYS_INLINE void forget(const void* pointer) noexcept {
    if (SPANPROF_LIKELY(live_.load(std::memory_order_relaxed) == 0)) return;
    forget_tracked(pointer);
  }

  SPANPROF_NOINLINE void forget_tracked(const void* pointer) noexcept {
    const std::uint64_t key = reinterpret_cast<std::uintptr_t>(pointer) >> 3;
    const std::size_t first = group_of(key) * group_slots;
    for (std::size_t i = first; i < first + group_slots; ++i) {
      std::uint64_t entry = slots_[i].load(std::memory_order_relaxed);
      if (entry != 0 && (entry >> tag_bits) == key) {
        if (slots_[i].compare_exchange_strong(entry, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
          live_.fetch_sub(1, std::memory_order_relaxed);
        }
        return;
      }
    }
  }

  bool is_live(std::uint64_t slot, std::uint64_t entry) const noexcept {
    return slot < slot_count && slots_[slot].load(std::memory_order_acquire) == entry;
  }

  // Stops tracking a sample; true if it was still live.
  bool take(std::uint64_t slot, std::uint64_t entry) noexcept {
    if (slot >= slot_count) return false;
    if (!slots_[slot].compare_exchange_strong(entry, 0, std::memory_order_acq_rel, std::memory_order_relaxed))
      return false;
    live_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  std::uint64_t live() const noexcept { return live_.load(std::memory_order_relaxed); }

 private:
  static std::size_t group_of(std::uint64_t key) noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - group_bits));
  }

  std::atomic<std::uint64_t> live_{0};
  std::atomic<std::uint64_t> next_tag_{1};
  alignas(64) std::atomic<std::uint64_t> slots_[slot_count] = {};
};

// Static storage, constant-initialized: the delete hook may run during static
// destruction and in threads that never profiled.
SPANPROF_API inline LiveAllocationTable& live_allocations() noexcept {
  static LiveAllocationTable table;
  return table;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_LIVE_ALLOCATIONS_HPP_
