// Built -O2 -g (tests/CMakeLists.txt, tests/meson.build): the hot loop below is
// inlined into the handler, as most of a C++ program's hot code is.
#include "inline_workload.hpp"

#include <ctime>

namespace inline_workload {
namespace {

double thread_cpu() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// A dependent chain the compiler cannot fold: every iteration waits for the last.
// One line, so that the loop's control and its body are the same line.
__attribute__((always_inline)) inline double checksum_inlined(double x) {
  for (int i = 0; i < 400000; ++i) x = x * 1.0000001 + 1e-9 * (i & 1);
  return x;
}
constexpr int kHotLoopLine = __LINE__ - 3;  // the loop above

}  // namespace

__attribute__((noinline)) double handle_inline_request(double cpu_seconds) {
  const double end = thread_cpu() + cpu_seconds;
  double x = 1.0;
  do {
    x = checksum_inlined(x);
    asm volatile("" : "+x"(x));
  } while (thread_cpu() < end);
  return x;
}

int hot_loop_line() { return kHotLoopLine; }

}  // namespace inline_workload
