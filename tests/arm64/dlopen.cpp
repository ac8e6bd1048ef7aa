// Run by scripts/arm64.sh in an aarch64 VM (a real arm64 kernel under
// qemu-system-aarch64, tests/arm64/init/init.cpp), linked dynamically: the loader and the
// libraries are in the initramfs, with the two builds of
// tests/support/dlopen_plugin.cpp. One thread loads and unloads a plugin over and
// over, inside a CPU span, while another computes in its own span, both sampled
// at 1 kHz: samples are taken inside dlopen, with the loader's lock held. On
// x86-64 the walker gperftools uses (libunwind) deadlocked there against the
// loader lock; spanprof's own walker takes no lock. Each round must finish (a
// watchdog fails the test after 60 s without one) with the computing span's
// samples in its own function and the loading thread sampled too.
//
// arm64-link: dynamic
// arm64-shared: spanprof_test_plugin=tests/support/dlopen_plugin.cpp
// arm64-shared: spanprof_test_busy_plugin=tests/support/dlopen_plugin.cpp -DSPANPROF_TEST_PLUGIN_BUSY_CONSTRUCTOR
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include "vm.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <dlfcn.h>
#include <sys/reboot.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) double beside_work(double cpu_seconds);

namespace {

using arm64_vm::span_number;

struct Tally {
  std::mutex mutex;
  std::int64_t beside_own = 0, beside_all = 0, churn_all = 0, in_dlopen = 0;
};

std::atomic<std::int64_t> progress{0};

// One round: `plugin` loaded and unloaded while another thread computes for 0.5 s.
bool round(const char* plugin, bool call_work, int number) {
  Tally tally;
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = 1000;
  arm64_vm::tally_profiles(
      options, tally.mutex, [](const spanprof::SpanRecord&) {},
      [&tally](const arm64_vm::SampleSeen& sample) {
        if (sample.functions.empty()) return;
        const auto anywhere = [&](std::string_view text) {
          for (const std::string_view name : sample.functions)
            if (name.find(text) != std::string_view::npos) return true;
          return false;
        };
        const std::int64_t n = sample.values.at(0);
        if (sample.span.span_name == "beside_dlopen") {
          tally.beside_all += n;
          if (anywhere("beside_work(")) tally.beside_own += n;
        } else {
          tally.churn_all += n;
          if (anywhere("dlopen")) tally.in_dlopen += n;
        }
      });
  spanprof::start(options);
  std::atomic<bool> stop{false}, churner_gone{false};
  std::atomic<int> cycles{0}, failures{0};
  std::thread churner([&] {
    struct Gone {
      std::atomic<bool>& flag;
      ~Gone() { flag = true; }
    } gone{churner_gone};
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(2 * number), "dlopen_churn"});
    while (!stop.load(std::memory_order_relaxed)) {
      void* handle = ::dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        std::printf("spanprof-arm64: dlopen: %s\n", ::dlerror());
        failures.fetch_add(1);
        return;
      }
      using Work = std::uint64_t (*)(double);
      if (call_work) {
        if (auto* work = reinterpret_cast<Work>(::dlsym(handle, "spanprof_plugin_work"))) work(0.002);
        else failures.fetch_add(1);
      }
      if (::dlclose(handle) != 0) failures.fetch_add(1);
      cycles.fetch_add(1, std::memory_order_relaxed);
      progress.fetch_add(1, std::memory_order_relaxed);
    }
  });
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(2 * number + 1), "beside_dlopen"});
    beside_work(0.5);
    // The round wants five load-unload cycles of the loading thread beside it: on a
    // loaded host (CI runs this VM beside its ThreadSanitizer suite), the busy
    // plugin's constructor may have had the VM's cores for only three in 0.5 s.
    while (cycles.load() < 5 && !churner_gone.load()) beside_work(0.05);
  }
  stop = true;
  churner.join();
  spanprof::flush(std::chrono::seconds(30));
  const std::uint64_t behind = spanprof::stats().cpu_ticks_behind;
  spanprof::shutdown();
  progress.fetch_add(1, std::memory_order_relaxed);
  const double own = tally.beside_all > 0 ? static_cast<double>(tally.beside_own) / static_cast<double>(tally.beside_all) : 0;
  const bool ok = failures.load() == 0 && cycles.load() >= 5 && tally.beside_all >= 100 && own >= 0.95 &&
                  tally.churn_all >= 20;
  if (!ok || number % 10 == 0)
    std::printf("spanprof-arm64: round %d (%s): %d cycles, %d failures; beside: %lld samples, %.1f %% its own; "
                "loading thread: %lld samples, %lld in dlopen; %llu ticks behind\n",
                number, plugin, cycles.load(), failures.load(), static_cast<long long>(tally.beside_all), 100.0 * own,
                static_cast<long long>(tally.churn_all), static_cast<long long>(tally.in_dlopen),
                static_cast<unsigned long long>(behind));
  return ok;
}

}  // namespace

double beside_work(double cpu_seconds) { return arm64_vm::compute_for(cpu_seconds); }

int main() {
  // SPANPROF_ARM64_ROUNDS in the kernel's command line (the script's
  // SPANPROF_ARM64_DLOPEN_ROUNDS): 200 to loop it, a few in CI.
  const char* rounds_text = std::getenv("SPANPROF_ARM64_ROUNDS");
  const int rounds = rounds_text != nullptr ? std::atoi(rounds_text) : 4;
  // A round that hangs is the failure this test looks for: a watchdog reports it.
  std::thread([] {
    std::int64_t seen = -1;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(60));
      const std::int64_t now = progress.load();
      if (now == seen) {
        std::printf("spanprof-arm64: no progress in 60 s: hung; the threads, twice 2 s apart:\n");
        arm64_vm::print_threads();
        std::this_thread::sleep_for(std::chrono::seconds(2));
        arm64_vm::print_threads();
        std::printf("spanprof-arm64: FAIL\n");
        std::fflush(stdout);
        ::reboot(RB_POWER_OFF);
        std::_Exit(1);
      }
      seen = now;
    }
  }).detach();
  int passed = 0;
  for (int i = 0; i < rounds; ++i) {
    const bool busy = i % 2 == 1;
    passed += round(busy ? "/plugins/libspanprof_test_busy_plugin.so" : "/plugins/libspanprof_test_plugin.so", !busy, i)
                  ? 1
                  : 0;
  }
  std::printf("spanprof-arm64: dlopen rounds: %d of %d passed, none hung\n", passed, rounds);
  return arm64_vm::finish(passed == rounds);
}
