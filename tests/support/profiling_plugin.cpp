// A plugin that profiles its own work, built as plugins usually are
// (-fvisibility=hidden): loaded by plugin_host.cpp for test_plugins.cpp, against
// the compiled library (one runtime with its host) or header-only (a copy of its own).
// Header-only, each compiles the runtime (its one source file); against the
// compiled library, neither does (SPANPROF_IMPLEMENTATION is then ignored).
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include <cmath>
#include <ctime>

namespace {
__attribute__((noinline)) double plugin_hot_loop() {
  double x = 0;
  const std::clock_t end = std::clock() + CLOCKS_PER_SEC / 5;  // 200 ms of CPU
  while (std::clock() < end)
    for (int i = 0; i < 10000; ++i) x += std::sqrt(i);
  return x;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) double spanprof_test_plugin_work() {
  const auto span = spanprof::parse_traceparent("00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01").context;
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "plugin work"});
  return plugin_hot_loop();
}
