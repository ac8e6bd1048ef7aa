// Internal. The spans open on a thread, as the process's continuous profile labels
// the samples it takes there (Options::continuous, docs/continuous.md): a stack of
// span ids and names that guards and fragments push while the continuous profile
// runs, and that the sample signal's handler reads on the same thread.
//
// The stack is the thread's own, allocated at its first push (a guard's path, never
// the handler's) and freed at thread exit; the handler reaches it through an
// initial-exec thread_local pointer, which never allocates. The thread writes it,
// and the handler interrupts only this thread: compiler fences order the two. The
// one write from elsewhere, a span that ended on another thread closing its label
// (close_anywhere), is an atomic flag. A name is copied at the push: the guard's
// memory may die (a coroutine frame) while the span is still open on the thread.
#ifndef SPANPROF_DETAIL_CAPTURE_SPAN_LABELS_HPP_
#define SPANPROF_DETAIL_CAPTURE_SPAN_LABELS_HPP_

#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/span/span_context.hpp>

// Compiled out with the SDK: no span is labelled then.
#if SPANPROF_ENABLED

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// A span as a sample's labels carry it: both ids, and its name cut to a bound.
struct SpanLabel {
  static constexpr std::size_t max_name = 111;
  std::uint8_t trace_id[16];
  std::uint8_t span_id[8];
  std::uint8_t name_length;
  char name[max_name];
  std::atomic<const void*> owner;  // the guard or fragment that pushed it
  // Closed by its owner on another thread (a span that ended elsewhere): the
  // handler passes over it, and this thread drops it at its next push or close.
  std::atomic<bool> closed;
  // Set by the handler when a sample took this label: the span is then in the
  // continuous profile, and is linked to it (pyroscope.profile.id).
  std::atomic<bool> sampled;
};

// What closing a label found.
struct LabelClosed {
  bool found = false;    // the owner's label was on the stack
  bool sampled = false;  // and a sample took it
};

class SpanLabelStack {
 public:
  // Pushes `span` for `owner`; false when max_open_spans are open (the span is
  // then not labelled).
  bool push(const void* owner, const SpanContext& span, std::string_view name) noexcept {
    drop_closed();
    const std::uint32_t depth = depth_.load(std::memory_order_relaxed);
    if (depth >= max_open_spans) return false;
    SpanLabel& label = labels_[depth];
    std::memcpy(label.trace_id, span.trace_id.bytes().data(), sizeof label.trace_id);
    std::memcpy(label.span_id, span.span_id.bytes().data(), sizeof label.span_id);
    label.name_length = static_cast<std::uint8_t>(name.size() < SpanLabel::max_name ? name.size() : SpanLabel::max_name);
    copy_span_name(label.name, name.data(), label.name_length);
    label.owner.store(owner, std::memory_order_relaxed);
    label.closed.store(false, std::memory_order_relaxed);
    label.sampled.store(false, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the label is whole before the handler can see it
    depth_.store(depth + 1, std::memory_order_relaxed);
    return true;
  }

  // Closes `owner`'s label if it is on this stack (the innermost, but for a span
  // closed out of order), on this stack's thread.
  LabelClosed close(const void* owner) noexcept {
    LabelClosed result;
    for (std::uint32_t i = depth_.load(std::memory_order_relaxed); i-- > 0;) {
      SpanLabel& label = labels_[i];
      if (label.owner.load(std::memory_order_relaxed) != owner || label.closed.load(std::memory_order_relaxed)) continue;
      result.found = true;
      result.sampled = label.sampled.load(std::memory_order_relaxed);
      label.closed.store(true, std::memory_order_relaxed);
      break;
    }
    drop_closed();
    return result;
  }

  // From another thread: closes `owner`'s label on whatever stack holds it.
  static LabelClosed close_anywhere(const void* owner) noexcept {
    LabelClosed result;
    Registry& registry = registry_of_stacks();
    std::lock_guard<std::mutex> held(registry.mutex);
    for (SpanLabelStack* stack = registry.head; stack != nullptr && !result.found; stack = stack->next_)
      for (std::uint32_t i = 0; i < stack->depth_.load(std::memory_order_relaxed); ++i) {
        SpanLabel& label = stack->labels_[i];
        if (label.owner.load(std::memory_order_relaxed) != owner || label.closed.load(std::memory_order_relaxed))
          continue;
        result.found = true;
        result.sampled = label.sampled.load(std::memory_order_relaxed);
        label.closed.store(true, std::memory_order_relaxed);
        break;
      }
    return result;
  }

  // The label a sample taken now carries, or null (async-signal-safe).
  SpanLabel* label_for_sample(ContinuousSpanLabels which) noexcept {
    const std::uint32_t depth = depth_.load(std::memory_order_relaxed);
    if (which == ContinuousSpanLabels::none) return nullptr;
    if (which == ContinuousSpanLabels::innermost) {
      for (std::uint32_t i = depth; i-- > 0;)
        if (!labels_[i].closed.load(std::memory_order_relaxed)) return &labels_[i];
      return nullptr;
    }
    for (std::uint32_t i = 0; i < depth; ++i)
      if (!labels_[i].closed.load(std::memory_order_relaxed)) return &labels_[i];
    return nullptr;
  }

  // Every thread's stack, for close_anywhere (a span that ended on another thread).
  void enlist() noexcept {
    Registry& registry = registry_of_stacks();
    std::lock_guard<std::mutex> held(registry.mutex);
    next_ = registry.head;
    if (next_ != nullptr) next_->prev_ = this;
    registry.head = this;
  }
  void delist() noexcept {
    Registry& registry = registry_of_stacks();
    std::lock_guard<std::mutex> held(registry.mutex);
    if (prev_ != nullptr) prev_->next_ = next_;
    else registry.head = next_;
    if (next_ != nullptr) next_->prev_ = prev_;
    prev_ = next_ = nullptr;
  }

 private:
  struct Registry {
    std::mutex mutex;
    SpanLabelStack* head = nullptr;
  };
  static Registry& registry_of_stacks() noexcept {
    static Registry registry;
    return registry;
  }

  // Closed labels at the top go: the stack's depth is its open spans'.
  void drop_closed() noexcept {
    std::uint32_t depth = depth_.load(std::memory_order_relaxed);
    while (depth > 0 && labels_[depth - 1].closed.load(std::memory_order_relaxed)) --depth;
    depth_.store(depth, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> depth_{0};
  SpanLabel labels_[max_open_spans] = {};
  SpanLabelStack* prev_ = nullptr;  // in the registry, under its mutex
  SpanLabelStack* next_ = nullptr;
};

// This thread's stack (null until its first push): the handler's only way to it.
SPANPROF_SIGNAL_SAFE_TLS inline thread_local SpanLabelStack* current_span_labels = nullptr;

// Makes the thread's stack at its first use, and frees it at thread exit, after
// the handler can no longer reach it.
class SpanLabelStackOwner {
 public:
  SpanLabelStack* get() noexcept {
    if (current_span_labels == nullptr) {
      auto* stack = new (std::nothrow) SpanLabelStack();
      if (stack == nullptr) return nullptr;
      stack->enlist();
      current_span_labels = stack;
    }
    return current_span_labels;
  }
  ~SpanLabelStackOwner() {
    SpanLabelStack* stack = current_span_labels;
    if (stack == nullptr) return;
    current_span_labels = nullptr;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    stack->delist();
    delete stack;
  }
};
inline thread_local SpanLabelStackOwner span_label_stack_owner;

// The calling thread's stack, made at its first use; null when out of memory.
inline SpanLabelStack* this_thread_span_labels() noexcept {
  SpanLabelStack* stack = current_span_labels;
  return stack != nullptr ? stack : span_label_stack_owner.get();
}

// Pushes `owner`'s span on this thread's stack: a valid span of a sampled trace
// (an unsampled trace has nothing to be found from). Whether it did.
inline bool push_span_label(const void* owner, const SpanContext& span, std::string_view name) noexcept {
  if (!span.valid() || !span.flags.sampled()) return false;
  SpanLabelStack* labels = this_thread_span_labels();
  return labels != nullptr && labels->push(owner, span, name);
}

// Closes `owner`'s label, on this thread or, for a span that closes elsewhere, on
// the thread it was pushed on. Whether a sample took it.
inline bool pop_span_label(const void* owner) noexcept {
  SpanLabelStack* here = current_span_labels;
  LabelClosed closed = here != nullptr ? here->close(owner) : LabelClosed{};
  if (!closed.found) closed = SpanLabelStack::close_anywhere(owner);
  return closed.sampled;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_SPAN_LABELS_HPP_
