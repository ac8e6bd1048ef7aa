// The classic engine: gperftools' own CPU profiler started and stopped around one
// scope. gperftools allows one profile per process, and starting it allocates and
// clears ~10 MiB (~5 ms), so this engine serves one scope at a time: a second
// concurrent scope is told "busy" at once and is never made to wait.
#ifndef SPANPROF_DETAIL_CAPTURE_CLASSIC_CPU_ENGINE_HPP_
#define SPANPROF_DETAIL_CAPTURE_CLASSIC_CPU_ENGINE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>

// Compiled out with the SDK: nothing here may reach gperftools then.
#if SPANPROF_ENABLED

#include <gperftools/profiler.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <pthread.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct ClassicEngineState {
  std::atomic<bool> busy{false};
  // The thread whose samples are kept. gperftools' SIGPROF goes to whichever thread
  // used CPU; comparing pthread_self() is async-signal-safe and, unlike a
  // thread_local, never allocates TLS inside the handler.
  std::atomic<pthread_t> profiled_thread{};
  std::atomic<std::uint64_t> sequence{0};
  // The legacy profile file gperftools writes at stop: the scope that holds `busy`
  // owns it, so no guard carries a path buffer of its own.
  char path[256] = {};
};

SPANPROF_API inline ClassicEngineState& classic_engine_state() noexcept {
  static ClassicEngineState state;
  return state;
}

inline int classic_engine_keeps_this_thread(void*) {
  return pthread_equal(classic_engine_state().profiled_thread.load(std::memory_order_relaxed), pthread_self()) ? 1
                                                                                                              : 0;
}

enum class ClassicStart : std::uint8_t { started, busy, failed };

inline ClassicStart classic_engine_start() noexcept {
  auto& state = classic_engine_state();
  if (state.busy.exchange(true, std::memory_order_acquire)) return ClassicStart::busy;
  char (&path)[256] = state.path;
  const char* tmp = std::getenv("TMPDIR");
  std::snprintf(path, sizeof path, "%s/spanprof-classic-%d-%llu.prof", (tmp && *tmp) ? tmp : "/tmp",
                static_cast<int>(::getpid()),
                static_cast<unsigned long long>(state.sequence.fetch_add(1, std::memory_order_relaxed)));
  state.profiled_thread.store(pthread_self(), std::memory_order_relaxed);
  ProfilerOptions options{};
  options.filter_in_thread = &classic_engine_keeps_this_thread;
  options.filter_in_thread_arg = nullptr;
  if (!ProfilerStartWithOptions(path, &options)) {
    state.busy.store(false, std::memory_order_release);
    report_error(ErrorCode::profiler_failed,
                 "ProfilerStartWithOptions failed (is CPUPROFILE set, or the profile file unwritable?)");
    path[0] = '\0';
    return ClassicStart::failed;
  }
  return ClassicStart::started;
}

// Stops the scope's profile and calls `use_file(path)` (noexcept) with the file
// gperftools wrote, before the engine is free for the next scope.
template <class UseFile>
void classic_engine_stop(UseFile&& use_file) noexcept {
  ProfilerStop();  // writes the file and /proc/self/maps; the worker parses it
  auto& state = classic_engine_state();
  use_file(static_cast<const char*>(state.path));
  state.path[0] = '\0';
  state.busy.store(false, std::memory_order_release);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_CLASSIC_CPU_ENGINE_HPP_
