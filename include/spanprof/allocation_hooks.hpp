// Low-overhead allocation hooks for heap profiles: spanprof's own replacement of
// the global operator new and delete. Include this header in exactly ONE source
// file of the program (it defines the operators; a second copy fails to link):
// the one that defines SPANPROF_IMPLEMENTATION.
//
//   // main.cpp
//   #define SPANPROF_IMPLEMENTATION
//   #include <spanprof/allocation_hooks.hpp>
//
// Why: tcmalloc's MallocHook, the default heap hooks, makes every allocation of
// every thread leave tcmalloc's fast path while any heap scope is open, which costs
// 2-3x on allocation-bound code (docs/heap.md). These operators add a thread-local
// load and a branch to each `new` and one shared load to each `delete`, always, and
// need no tcmalloc: they allocate with the C library's malloc, whichever allocator
// serves it. Heap scopes then use them instead of MallocHook. Outside heap scopes
// an operator is a thread-local test and a tail call into the allocator (tc_new,
// tc_delete_sized or free when tcmalloc serves the process), so the hooks cost
// nothing measurable there (docs/heap.md, bench `*_no_scope`).
//
// What they see: every C++ allocation through `new` (containers, strings, smart
// pointers); not `malloc` called directly (C libraries). Stacks come from
// spanprof's lock-free walker (detail/capture/stack_walker.hpp).
#ifndef SPANPROF_ALLOCATION_HOOKS_HPP_
#define SPANPROF_ALLOCATION_HOOKS_HPP_

// The umbrella, and the heap sampler's hook side where the umbrella did not bring
// it: this file is shipped beside the single header, whose umbrella brings it in
// the source file that compiles the runtime.
#include <spanprof/spanprof.hpp>
#if SPANPROF_ENABLED && !SPANPROF_DEFINE_RUNTIME
#if !defined(SPANPROF_COMPILED_LIB)
#error "<spanprof/allocation_hooks.hpp> belongs in the source file that defines SPANPROF_IMPLEMENTATION (config.hpp)"
#endif
#include <spanprof/detail/capture/heap_sampler.hpp>
#endif

#if SPANPROF_ENABLED

#include <cstdlib>
#include <new>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Counts the bytes of a `new` against this thread's sampling countdown, before the
// allocation: true when a heap scope is open here and this allocation is the one
// to sample. Outside heap scopes it is one thread-local test.
SPANPROF_ALWAYS_INLINE inline bool heap_sample_due(std::size_t size) noexcept {
  HeapThreadState& t = heap_thread;
  if (SPANPROF_LIKELY(t.open == 0)) return false;
  t.bytes_until_sample -= static_cast<std::int64_t>(size);
  return t.bytes_until_sample <= 0;
}

// A `delete` looks at the table of sampled allocations only while one is alive
// somewhere; the lookup and the free are then out of line, so that the common
// `delete` needs no frame either.
SPANPROF_ALWAYS_INLINE inline bool sampled_allocations_live() noexcept { return live_allocations().any_live(); }

SPANPROF_NOINLINE inline void forget_and_free(void* pointer) noexcept {
  if (pointer != nullptr) live_allocations().forget(pointer);
  std::free(pointer);
}

// When tcmalloc is the process's allocator, its own operator entry points: tc_new
// is its fast path, and a sized delete skips the size lookup that free() needs.
// Resolved once at start-up; until then (allocations during static initialization)
// the C library's entry points serve, which tcmalloc backs anyway.
struct TcmallocOperators {
  void* (*allocate)(std::size_t) = nullptr;
  void (*deallocate_sized)(void*, std::size_t) noexcept = nullptr;
};

inline TcmallocOperators resolve_tcmalloc_operators() noexcept {
  TcmallocOperators ops;
  if (!tcmalloc_api().is_process_allocator) return ops;
  resolve_symbol(ops.allocate, "tc_new");
  resolve_symbol(ops.deallocate_sized, "tc_delete_sized");
  return ops;
}

[[maybe_unused]] static const TcmallocOperators tcmalloc_operators = resolve_tcmalloc_operators();

// The C library's allocator with operator new's contract: retry through the
// new-handler, throw when there is none. Out of line, so that the operators'
// common path (tcmalloc's entry point) needs no frame.
SPANPROF_NOINLINE inline void* allocate_with_c_library(std::size_t size, std::size_t alignment,
                                                        bool null_on_failure = false) {
  if (size == 0) size = 1;
  for (;;) {
    void* p = nullptr;
    if (alignment <= alignof(std::max_align_t)) p = std::malloc(size);
    else if (::posix_memalign(&p, alignment, size) != 0) p = nullptr;
    if (SPANPROF_LIKELY(p != nullptr)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) {
      if (null_on_failure) return nullptr;
      SPANPROF_THROW(std::bad_alloc());
    }
    handler();
  }
}

SPANPROF_ALWAYS_INLINE inline void* allocate_or_throw(std::size_t size, std::size_t alignment) {
  if (alignment == 0 && tcmalloc_operators.allocate != nullptr) return tcmalloc_operators.allocate(size);
  return allocate_with_c_library(size, alignment);
}

SPANPROF_ALWAYS_INLINE inline void* allocate_or_null(std::size_t size, std::size_t alignment) noexcept {
#if SPANPROF_HAS_EXCEPTIONS
  try {
    return allocate_or_throw(size, alignment);
  } catch (...) {
    return nullptr;
  }
#else
  // Nothing can throw: the C library's allocator (tcmalloc's, when it is the
  // program's) and the new-handler's retries, ending in null.
  return allocate_with_c_library(size, alignment, /*null_on_failure=*/true);
#endif
}

// The rare `new` that is sampled: allocates, then records the stack (which skips
// this function and the operator that called it).
template <bool Nothrow>
SPANPROF_NOINLINE void* allocate_and_sample(std::size_t size, std::size_t alignment) noexcept(Nothrow) {
  void* p = Nothrow ? allocate_or_null(size, alignment) : allocate_or_throw(size, alignment);
  if (p != nullptr) record_heap_sample(heap_thread, p, size, HeapHookSource::operator_new);
  return p;
}

SPANPROF_NOINLINE inline void forget_and_free_sized(void* pointer, std::size_t size) noexcept {
  if (pointer == nullptr) return;
  live_allocations().forget(pointer);
  if (tcmalloc_operators.deallocate_sized != nullptr) tcmalloc_operators.deallocate_sized(pointer, size);
  else std::free(pointer);
}

// Tells heap scopes that these hooks exist, before main() runs. Internal linkage:
// an unused inline variable might never be emitted, and its side effect with it.
[[maybe_unused]] static const bool operator_new_hooks_registered = [] {
  operator_new_hooks_compiled_in().store(true, std::memory_order_release);
  return true;
}();

}  // namespace detail
SPANPROF_NAMESPACE_END

// The replacements. Not inline (the standard forbids it) and never inlined: a
// sampled stack is then always [spanprof's recorder, this operator, the caller...],
// and the compiler does not pair a `new` in this file with the `free` inside a
// delete (which -Wmismatched-new-delete would flag). Unless this allocation is
// the one to sample, `new` returns straight from the allocator (a tail call), so
// it costs a thread-local test in and out of heap scopes alike. The empty asm
// keeps the sampled call from becoming a tail call: the recorder skips exactly
// two frames (allocate_and_sample, this operator).
#define SPANPROF_DETAIL_NEW_BODY(allocate, nothrow, size, alignment)                 \
  if (SPANPROF_LIKELY(!spanprof::detail::heap_sample_due(size)))                     \
    return spanprof::detail::allocate(size, alignment);                              \
  void* p = spanprof::detail::allocate_and_sample<nothrow>(size, alignment);         \
  asm volatile("" : : "r"(p) : "memory");                                            \
  return p
#define SPANPROF_DETAIL_DELETE_BODY(p)                                                      \
  if (SPANPROF_UNLIKELY(spanprof::detail::sampled_allocations_live()))                     \
    return spanprof::detail::forget_and_free(p);                                           \
  std::free(p)
#define SPANPROF_DETAIL_SIZED_DELETE_BODY(p, n)                                             \
  if (SPANPROF_UNLIKELY(spanprof::detail::sampled_allocations_live()))                     \
    return spanprof::detail::forget_and_free_sized(p, n);                                  \
  if (spanprof::detail::tcmalloc_operators.deallocate_sized != nullptr && p != nullptr)    \
    return spanprof::detail::tcmalloc_operators.deallocate_sized(p, n);                    \
  std::free(p)

SPANPROF_NOINLINE void* operator new(std::size_t n) { SPANPROF_DETAIL_NEW_BODY(allocate_or_throw, false, n, 0); }
SPANPROF_NOINLINE void* operator new[](std::size_t n) { SPANPROF_DETAIL_NEW_BODY(allocate_or_throw, false, n, 0); }
SPANPROF_NOINLINE void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  SPANPROF_DETAIL_NEW_BODY(allocate_or_null, true, n, 0);
}
SPANPROF_NOINLINE void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  SPANPROF_DETAIL_NEW_BODY(allocate_or_null, true, n, 0);
}
SPANPROF_NOINLINE void* operator new(std::size_t n, std::align_val_t a) {
  SPANPROF_DETAIL_NEW_BODY(allocate_or_throw, false, n, static_cast<std::size_t>(a));
}
SPANPROF_NOINLINE void* operator new[](std::size_t n, std::align_val_t a) {
  SPANPROF_DETAIL_NEW_BODY(allocate_or_throw, false, n, static_cast<std::size_t>(a));
}
SPANPROF_NOINLINE void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  SPANPROF_DETAIL_NEW_BODY(allocate_or_null, true, n, static_cast<std::size_t>(a));
}
SPANPROF_NOINLINE void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  SPANPROF_DETAIL_NEW_BODY(allocate_or_null, true, n, static_cast<std::size_t>(a));
}

SPANPROF_NOINLINE void operator delete(void* p) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete[](void* p) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete(void* p, const std::nothrow_t&) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete[](void* p, const std::nothrow_t&) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete(void* p, std::size_t n) noexcept { SPANPROF_DETAIL_SIZED_DELETE_BODY(p, n); }
SPANPROF_NOINLINE void operator delete[](void* p, std::size_t n) noexcept { SPANPROF_DETAIL_SIZED_DELETE_BODY(p, n); }
SPANPROF_NOINLINE void operator delete(void* p, std::align_val_t) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete[](void* p, std::align_val_t) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete(void* p, std::size_t, std::align_val_t) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }
SPANPROF_NOINLINE void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { SPANPROF_DETAIL_DELETE_BODY(p); }

#undef SPANPROF_DETAIL_NEW_BODY
#undef SPANPROF_DETAIL_DELETE_BODY
#undef SPANPROF_DETAIL_SIZED_DELETE_BODY

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_ALLOCATION_HOOKS_HPP_
