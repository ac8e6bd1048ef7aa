// A shared object that the dlopen tests load and unload over and over while
// spanprof samples: its constructor allocates (the heap hooks run under the
// loader's lock) and its function is hot (CPU samples land inside it). Built a
// second time with SPANPROF_TEST_PLUGIN_BUSY_CONSTRUCTOR, whose constructor also
// runs for a few milliseconds of CPU and allocates thousands of blocks, so that
// samples and heap samples are taken inside dlopen, with the loader's lock held.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

// A thread of the plugin's own, which the program never sees start: it computes
// `cpu_seconds` in a function of the plugin and reports the CPU it measured for
// itself. The continuous profile must find it (tests/test_continuous.cpp).
namespace {
__attribute__((noinline)) std::uint64_t plugin_thread_computes(double cpu_seconds) {
  std::uint64_t x = loaded.names[5].size();
  const double until = thread_cpu_seconds() + cpu_seconds;
  while (thread_cpu_seconds() < until)
    for (int i = 0; i < 200000; ++i) x = x * 2862933555777941757ULL + 3037000493ULL;
  return x;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) double spanprof_plugin_run_thread(double cpu_seconds) {
  double measured = 0;
  std::uint64_t sink = 0;
  std::thread worker([&] {
    sink = plugin_thread_computes(cpu_seconds);
    measured = thread_cpu_seconds();
  });
  worker.join();
  return sink == 1 ? -measured : measured;
}

// A mutex of the plugin's own, which the program never sees: one thread holds it
// in spanprof_plugin_hold_stock, another waits for it in spanprof_plugin_take_stock,
// which returns the wait it measured (tests/test_locks.cpp).
namespace {
std::mutex stock;
}  // namespace

extern "C" __attribute__((visibility("default"), noinline)) int spanprof_plugin_hold_stock(double seconds,
                                                                                          int* holding) {
  std::unique_lock<std::mutex> lock(stock);
  __atomic_store_n(holding, 1, __ATOMIC_RELEASE);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  lock.unlock();
  return static_cast<int>(loaded.names[1].size());
}

extern "C" __attribute__((visibility("default"), noinline)) double spanprof_plugin_take_stock() {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(stock);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
