// A shared object that the dlopen test loads and unloads over and over while
// spanprof samples: its constructor allocates (the heap hooks run under the
// loader's lock) and its function is hot (CPU samples land inside it).
#include <cstdint>
#include <memory>
#include <string>
#include <time.h>

namespace {

struct Loaded {
  // Heap work during dlopen, while the loader holds its lock.
  std::unique_ptr<std::string[]> names{new std::string[64]};
  Loaded() {
    for (int i = 0; i < 64; ++i) names[i] = std::string(200, static_cast<char>('a' + i % 26));
  }
};
const Loaded loaded;

double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

}  // namespace

extern "C" __attribute__((visibility("default"), noinline)) std::uint64_t spanprof_plugin_work(double cpu_seconds) {
  const double until = thread_cpu_seconds() + cpu_seconds;
  std::uint64_t x = loaded.names[3].size();
  while (thread_cpu_seconds() < until)
    for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}
