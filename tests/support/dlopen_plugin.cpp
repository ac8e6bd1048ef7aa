// A shared object that the dlopen tests load and unload over and over while
// spanprof samples: its constructor allocates (the heap hooks run under the
// loader's lock) and its function is hot (CPU samples land inside it). Built a
// second time with SPANPROF_TEST_PLUGIN_BUSY_CONSTRUCTOR, whose constructor also
// runs for a few milliseconds of CPU and allocates thousands of blocks, so that
// samples and heap samples are taken inside dlopen, with the loader's lock held.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <time.h>

namespace {

double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

struct Loaded {
  // Heap work during dlopen, while the loader holds its lock.
  std::unique_ptr<std::string[]> names{new std::string[64]};
  Loaded() {
    for (int i = 0; i < 64; ++i) names[i] = std::string(200, static_cast<char>('a' + i % 26));
#ifdef SPANPROF_TEST_PLUGIN_BUSY_CONSTRUCTOR
    const double until = thread_cpu_seconds() + 0.004;
    std::uint64_t kept = 0;
    while (thread_cpu_seconds() < until) {
      std::vector<std::unique_ptr<char[]>> blocks;
      for (int i = 0; i < 256; ++i) blocks.emplace_back(new char[32 + i * 3]);
      kept += reinterpret_cast<std::uintptr_t>(blocks.back().get()) & 1;
    }
    names[0].push_back(static_cast<char>('0' + kept % 10));
#endif
  }
};
const Loaded loaded;

}  // namespace

extern "C" __attribute__((visibility("default"), noinline)) std::uint64_t spanprof_plugin_work(double cpu_seconds) {
  const double until = thread_cpu_seconds() + cpu_seconds;
  std::uint64_t x = loaded.names[3].size();
  while (thread_cpu_seconds() < until)
    for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}
