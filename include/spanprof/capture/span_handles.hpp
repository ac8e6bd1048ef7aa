// Internal. What a guard keeps of the spans it opened in its thread's samplers: a
// handle, never a pointer the samplers follow back into the guard. A guard may end
// on another thread, or its storage (a coroutine frame) may die, while its thread
// runs on (docs/async.md).
#ifndef SPANPROF_CAPTURE_SPAN_HANDLES_HPP_
#define SPANPROF_CAPTURE_SPAN_HANDLES_HPP_

#include <spanprof/config.hpp>

#include <cstddef>
#include <cstdint>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Open spans a thread can nest; a guard opened deeper is not profiled (counted).
inline constexpr std::uint32_t max_open_spans = 32;

// A guard's handle on its slot in the thread's stack sampler
// (capture/thread_stack_sampler.hpp). index == max_open_spans: none.
struct SpanSlotTicket {
  std::uint32_t index = max_open_spans;
  std::uint32_t sequence = 0;
  bool valid() const noexcept { return index < max_open_spans; }
};

struct HeapThreadState;

// A heap guard's record of its span (capture/heap_sampler.hpp). The thread's open
// heap spans form a stack counted by depth.
struct HeapActiveSpan {
  HeapThreadState* owner = nullptr;  // the opening thread's state
  std::uint32_t depth = 0;           // 1 for the thread's outermost heap span
  std::size_t log_start = 0;
  std::uint64_t dropped_at_start = 0;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_CAPTURE_SPAN_HANDLES_HPP_
