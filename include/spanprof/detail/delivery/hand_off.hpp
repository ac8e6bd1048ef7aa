// The hand-off between request threads and the worker: a lock-free list that a
// closing guard pushes its captured samples onto, and that the worker takes whole.
//
// A push is one CAS on the list head: no lock, no system call. The worker takes
// everything with one exchange, so there is no pop and no ABA. The list is bounded:
// with drop_newest a push at capacity is refused (the caller drops and counts it);
// with drop_oldest it may run over, up to twice the capacity, and the worker drops
// the oldest beyond the capacity when it takes them.
#ifndef SPANPROF_DETAIL_DELIVERY_HAND_OFF_HPP_
#define SPANPROF_DETAIL_DELIVERY_HAND_OFF_HPP_

#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/config.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class HandOff {
 public:
  // Pushes unless full. False: `captured` was not taken (the caller drops it).
  // `wake` tells the caller to wake the worker: the list just reached half its
  // capacity (or ran over it), the only time a request thread makes a system call.
  bool push(std::unique_ptr<CapturedProfile>& captured, std::size_t capacity, bool may_exceed, bool& wake) noexcept {
    const std::size_t before = size_.fetch_add(1, std::memory_order_relaxed);
    if (before >= (may_exceed ? 2 * capacity : capacity)) {
      size_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    CapturedProfile* node = captured.release();
    node->next = head_.load(std::memory_order_relaxed);
    while (!head_.compare_exchange_weak(node->next, node, std::memory_order_release, std::memory_order_relaxed)) {
    }
    wake = before + 1 == (capacity + 1) / 2 || before + 1 > capacity;
    return true;
  }

  // Everything pushed so far, oldest first. May throw std::bad_alloc (the list is
  // then freed, not lost silently: the caller counts what it could not take).
  std::vector<std::unique_ptr<CapturedProfile>> take() {
    CapturedProfile* node = head_.exchange(nullptr, std::memory_order_acquire);
    std::vector<std::unique_ptr<CapturedProfile>> taken;
    while (node != nullptr) {
      CapturedProfile* next = node->next;
      node->next = nullptr;
      taken.emplace_back(node);
      node = next;
    }
    size_.fetch_sub(taken.size(), std::memory_order_relaxed);
    std::reverse(taken.begin(), taken.end());
    return taken;
  }

  std::size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }

 private:
  std::atomic<CapturedProfile*> head_{nullptr};
  std::atomic<std::size_t> size_{0};
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_HAND_OFF_HPP_
