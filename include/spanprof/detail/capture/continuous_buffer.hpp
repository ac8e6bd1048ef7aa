// Internal. The continuous profile's shared record buffer (process_sampler.hpp):
// any thread writes a record into it — its sample signal's handler, or its lock
// hooks — and the merger takes what they wrote.
//
// Two halves: writers reserve room in the active one with an atomic add and count
// themselves in it; the merger makes the other half active, waits for the writers
// still counted in the one it took, and reads it. No lock, no allocation once
// made: a writer may be a signal handler. Made once and kept for the process, so a
// signal still queued after a stop finds it.
#ifndef SPANPROF_DETAIL_CAPTURE_CONTINUOUS_BUFFER_HPP_
#define SPANPROF_DETAIL_CAPTURE_CONTINUOUS_BUFFER_HPP_

#include <spanprof/config.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include <sched.h>
#include <time.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Waits until `count` is 0: writers (or handlers) counted in it finish within
// microseconds of their threads' time; a thread may wait for a core meanwhile.
inline void wait_for_none(const std::atomic<std::uint32_t>& count) noexcept {
  for (int spins = 0; count.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 100) {
      ::sched_yield();
    } else {
      timespec pause{0, 100'000};
      ::nanosleep(&pause, nullptr);
    }
  }
}

class ContinuousBuffer {
 public:
  static constexpr std::size_t half_words = std::size_t{1} << 16;  // 512 KiB: ~2,000 samples

  // Makes both halves (once); false when out of memory.
  bool make() noexcept {
    for (Half& half : halves_) {
      if (half.words == nullptr) half.words = new (std::nothrow) std::uint64_t[half_words];
      if (half.words == nullptr) return false;
    }
    return true;
  }

  // A record of `need` words, written by `write(out)` into the active half. False
  // (counted) when the half is full.
  template <class Write>
  bool write(std::size_t need, Write&& write) noexcept {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const std::uint32_t index = active_.load(std::memory_order_seq_cst);
      Half& half = halves_[index];
      half.writers.fetch_add(1, std::memory_order_seq_cst);
      if (active_.load(std::memory_order_seq_cst) != index) {  // the merger took this half meanwhile
        half.writers.fetch_sub(1, std::memory_order_release);
        continue;
      }
      const std::size_t at = half.used.fetch_add(need, std::memory_order_relaxed);
      if (at + need > half_words) {
        if (at < half_words) half.words[at] = 0;  // the end: nothing whole follows
        half.writers.fetch_sub(1, std::memory_order_release);
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      write(half.words + at);
      half.writers.fetch_sub(1, std::memory_order_release);
      return true;
    }
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  // The merger's: calls `read(words, count)` with what was written since the last
  // take; the records turned away meanwhile.
  template <class Read>
  std::uint64_t take(Read&& read) {
    const std::uint32_t writing = active_.load(std::memory_order_seq_cst);
    Half& half = halves_[writing];
    if (half.words == nullptr) return 0;
    active_.store(writing ^ 1u, std::memory_order_seq_cst);
    wait_for_none(half.writers);  // writers that reserved room before the switch
    read(static_cast<const std::uint64_t*>(half.words), std::min(half.used.load(std::memory_order_acquire), half_words));
    half.used.store(0, std::memory_order_relaxed);
    return dropped_.exchange(0, std::memory_order_relaxed);
  }

 private:
  struct Half {
    std::atomic<std::size_t> used{0};
    std::atomic<std::uint32_t> writers{0};
    std::uint64_t* words = nullptr;
  };
  Half halves_[2];
  std::atomic<std::uint32_t> active_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_CONTINUOUS_BUFFER_HPP_
