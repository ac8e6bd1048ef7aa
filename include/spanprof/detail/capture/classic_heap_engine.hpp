// The classic heap engine: gperftools' own heap profiler started and stopped around
// one scope. It records every allocation of every thread (an alloc-heavy loop runs
// ~30x slower) and there is one per process, so it serves one scope at a time: a
// second concurrent scope is told "busy" at once and never waits.
#ifndef SPANPROF_DETAIL_CAPTURE_CLASSIC_HEAP_ENGINE_HPP_
#define SPANPROF_DETAIL_CAPTURE_CLASSIC_HEAP_ENGINE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/tcmalloc_api.hpp>
#include <spanprof/base/error.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dirent.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct ClassicHeapState {
  std::atomic<bool> busy{false};
  std::atomic<std::uint64_t> sequence{0};
  char prefix[256] = {};  // the dump prefix, owned by the scope that holds `busy`
};

SPANPROF_API inline ClassicHeapState& classic_heap_state() noexcept {
  static ClassicHeapState state;
  return state;
}

enum class ClassicHeapStart : std::uint8_t { started, busy, failed };

// gperftools is given a dump prefix; it only writes files there if its own
// HEAP_PROFILE_*_INTERVAL thresholds trigger, and stop removes them.
inline ClassicHeapStart classic_heap_start() noexcept {
  const TcmallocApi& api = tcmalloc_api();
  if (!api.has_heap_profiler()) {
    report_error(ErrorCode::heap_unavailable,
                 "the classic heap engine needs libtcmalloc (not _minimal) as the process's allocator");
    return ClassicHeapStart::failed;
  }
  auto& state = classic_heap_state();
  if (state.busy.exchange(true, std::memory_order_acquire)) return ClassicHeapStart::busy;
  if (api.is_heap_profiler_running()) {
    // Started outside spanprof (HEAPPROFILE=...): not ours to stop.
    state.busy.store(false, std::memory_order_release);
    return ClassicHeapStart::busy;
  }
  char (&prefix)[256] = state.prefix;
  const char* tmp = std::getenv("TMPDIR");
  std::snprintf(prefix, sizeof prefix, "%s/spanprof-heap-%d-%llu", (tmp && *tmp) ? tmp : "/tmp",
                static_cast<int>(::getpid()),
                static_cast<unsigned long long>(state.sequence.fetch_add(1, std::memory_order_relaxed)));
  api.heap_profiler_start(prefix);
  if (!api.is_heap_profiler_running()) {
    state.busy.store(false, std::memory_order_release);
    report_error(ErrorCode::profiler_failed, "HeapProfilerStart did not start gperftools' heap profiler");
    return ClassicHeapStart::failed;
  }
  return ClassicHeapStart::started;
}

// Removes interval dumps gperftools may have written under `prefix`.
inline void remove_heap_dumps(const char* prefix) noexcept {
  const char* slash = std::strrchr(prefix, '/');
  if (!slash) return;
  const std::string dir(prefix, static_cast<std::size_t>(slash - prefix));
  const std::string base = std::string(slash + 1) + ".";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      if (std::strncmp(entry->d_name, base.c_str(), base.size()) == 0) ::unlinkat(::dirfd(d), entry->d_name, 0);
    }
    ::closedir(d);
  }
}

// Takes the profile text (malloc'ed by gperftools; caller frees with std::free) and
// stops the profiler. Null if gperftools returned nothing.
inline char* classic_heap_stop() noexcept {
  const TcmallocApi& api = tcmalloc_api();
  char* text = api.get_heap_profile();
  api.heap_profiler_stop();
  auto& state = classic_heap_state();
  SPANPROF_TRY {
    remove_heap_dumps(state.prefix);
  } SPANPROF_CATCH_ALL {
  }
  state.prefix[0] = '\0';
  state.busy.store(false, std::memory_order_release);
  return text;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_CLASSIC_HEAP_ENGINE_HPP_
