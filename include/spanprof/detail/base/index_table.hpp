// A hash set of positions in the caller's own array, looked up by content: the
// encoders deduplicate strings and functions per profile, and a std::unordered_map
// there cost a node and often a key string per entry, most of what encoding a
// one-sample span profile cost. Open addressing, at most half full; each slot keeps
// its hash, so growing needs nothing from the caller.
#ifndef SPANPROF_DETAIL_BASE_INDEX_TABLE_HPP_
#define SPANPROF_DETAIL_BASE_INDEX_TABLE_HPP_

#include <spanprof/config.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class IndexTable {
 public:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  // The position whose element `matches`, among those inserted with `hash`; `none` if none does.
  template <typename Matches>
  std::size_t find(std::size_t hash, Matches&& matches) const {
    if (slots_.empty()) return none;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t slot = hash & mask;; slot = (slot + 1) & mask) {
      const Slot& at = slots_[slot];
      if (at.position == none) return none;
      if (at.hash == hash && matches(at.position)) return at.position;
    }
  }

  // Adds a position that find() did not return.
  void insert(std::size_t hash, std::size_t position) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(Slot{hash, position});
    ++size_;
  }

  // Empty, keeping its room for the next profile.
  void clear() noexcept {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    size_ = 0;
  }

 private:
  struct Slot {
    std::size_t hash = 0;
    std::size_t position = none;
  };

  void place(Slot slot) noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t at = slot.hash & mask;
    while (slots_[at].position != none) at = (at + 1) & mask;
    slots_[at] = slot;
  }

  void grow() {
    std::vector<Slot> old(std::max<std::size_t>(64, 2 * slots_.size()));
    old.swap(slots_);
    for (const Slot& slot : old)
      if (slot.position != none) place(slot);
  }

  std::vector<Slot> slots_;  // a power of two
  std::size_t size_ = 0;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_INDEX_TABLE_HPP_
