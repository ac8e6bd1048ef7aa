// tcmalloc's hook and heap-profiler entry points, looked up at run time.
//
// Heap profiling works only when tcmalloc is the process's allocator, and a
// service may get it by linking libtcmalloc or by LD_PRELOAD in production. Looking
// the functions up with dlsym serves both, keeps programs that never profile the
// heap free of a link dependency on tcmalloc, and lets a heap guard in a process
// without tcmalloc report why instead of failing to link or silently recording
// nothing.
#ifndef SPANPROF_DETAIL_CAPTURE_TCMALLOC_API_HPP_
#define SPANPROF_DETAIL_CAPTURE_TCMALLOC_API_HPP_

#include <spanprof/config.hpp>

#include <cstddef>

#include <dlfcn.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

using MallocNewHook = void (*)(const void* ptr, std::size_t size);
using MallocDeleteHook = void (*)(const void* ptr);

struct TcmallocApi {
  // malloc_hook_c.h
  int (*add_new_hook)(MallocNewHook) = nullptr;
  int (*remove_new_hook)(MallocNewHook) = nullptr;
  int (*add_delete_hook)(MallocDeleteHook) = nullptr;
  int (*remove_delete_hook)(MallocDeleteHook) = nullptr;
  // Stack of the code that called the allocator, the allocator's own frames and
  // the hooks' removed. Valid only inside a hook.
  int (*caller_stack_trace)(void** result, int max_depth, int skip_count) = nullptr;
  // heap-profiler.h (libtcmalloc only, not libtcmalloc_minimal)
  void (*heap_profiler_start)(const char* prefix) = nullptr;
  void (*heap_profiler_stop)() = nullptr;
  char* (*get_heap_profile)() = nullptr;
  int (*is_heap_profiler_running)() = nullptr;
  // The process's malloc is tcmalloc's: hooks only see allocations tcmalloc serves.
  bool is_process_allocator = false;
  // tcmalloc's code that calls the hooks and the allocator entry points around it
  // (its sections google_malloc and malloc_hook, [start, stop)): a hook's stack
  // walk drops these frames, as MallocHook_GetCallerStackTrace does. Zero when
  // tcmalloc does not export the bounds (linked statically).
  const char* hook_caller_start[2] = {};
  const char* hook_caller_stop[2] = {};

  bool in_hook_caller(const void* pc) const noexcept {
    const auto* p = static_cast<const char*>(pc);
    for (int i = 0; i < 2; ++i)
      if (p >= hook_caller_start[i] && p < hook_caller_stop[i]) return true;
    return false;
  }

  bool has_hooks() const noexcept {
    return add_new_hook && remove_new_hook && add_delete_hook && remove_delete_hook && caller_stack_trace &&
           is_process_allocator;
  }
  bool has_heap_profiler() const noexcept {
    return heap_profiler_start && heap_profiler_stop && get_heap_profile && is_heap_profiler_running &&
           is_process_allocator;
  }
};

template <class Function>
inline void resolve_symbol(Function& out, const char* name) noexcept {
  out = reinterpret_cast<Function>(::dlsym(RTLD_DEFAULT, name));
}

SPANPROF_API inline const TcmallocApi& tcmalloc_api() noexcept {
  static const TcmallocApi api = [] {
    TcmallocApi a;
    resolve_symbol(a.add_new_hook, "MallocHook_AddNewHook");
    resolve_symbol(a.remove_new_hook, "MallocHook_RemoveNewHook");
    resolve_symbol(a.add_delete_hook, "MallocHook_AddDeleteHook");
    resolve_symbol(a.remove_delete_hook, "MallocHook_RemoveDeleteHook");
    resolve_symbol(a.caller_stack_trace, "MallocHook_GetCallerStackTrace");
    resolve_symbol(a.heap_profiler_start, "HeapProfilerStart");
    resolve_symbol(a.heap_profiler_stop, "HeapProfilerStop");
    resolve_symbol(a.get_heap_profile, "GetHeapProfile");
    resolve_symbol(a.is_heap_profiler_running, "IsHeapProfilerRunning");
    resolve_symbol(a.hook_caller_start[0], "__start_google_malloc");
    resolve_symbol(a.hook_caller_stop[0], "__stop_google_malloc");
    resolve_symbol(a.hook_caller_start[1], "__start_malloc_hook");
    resolve_symbol(a.hook_caller_stop[1], "__stop_malloc_hook");
    for (int i = 0; i < 2; ++i)
      if (!a.hook_caller_start[i] || a.hook_caller_stop[i] <= a.hook_caller_start[i])
        a.hook_caller_start[i] = a.hook_caller_stop[i] = nullptr;
    // tcmalloc defines malloc as an alias of tc_malloc. If another allocator (glibc,
    // a sanitizer, jemalloc) wins symbol resolution, the two differ and tcmalloc's
    // hooks would never fire.
    void* tc_malloc = ::dlsym(RTLD_DEFAULT, "tc_malloc");
    a.is_process_allocator = tc_malloc != nullptr && tc_malloc == ::dlsym(RTLD_DEFAULT, "malloc");
    return a;
  }();
  return api;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_TCMALLOC_API_HPP_
