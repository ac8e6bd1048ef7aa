// What every fuzz target shares: the per-unit time budget, a way to say an
// invariant broke, and a reader for inputs that steer several entry points.
//
// libFuzzer measures units in whole seconds (-timeout, -report_slow_units), far too
// coarse to notice a parser going quadratic on a 64 KiB input. So run_unit() times
// each unit with the thread's CPU clock, which other processes on a loaded machine
// cannot inflate, and traps when a unit needs more than unit_budget_ms: libFuzzer
// then keeps the input as a crash artifact, replayable like any other failure.
// CPU time still jitters (a VM's stolen time, the sanitizer allocator recycling
// its quarantine inside some unlucky malloc: spikes of 10-50 ms were seen on
// 10-byte inputs), so a unit over a tenth of the budget is run again, up to three
// times in all, and judged by its fastest run: noise does not repeat, a slow
// parser does. At exit the slowest unit is printed for scripts/fuzz.sh.
#ifndef SPANPROF_TESTS_FUZZ_FUZZ_SUPPORT_HPP_
#define SPANPROF_TESTS_FUZZ_FUZZ_SUPPORT_HPP_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <string_view>

#include <sys/mman.h>
#include <unistd.h>

// The known issue (README.md, "Known issue": the demangler's output) is kept
// out of the targets' way unless built with -DSPANPROF_FUZZ_SKIP_KNOWN_ISSUES=0.
#ifndef SPANPROF_FUZZ_SKIP_KNOWN_ISSUES
#define SPANPROF_FUZZ_SKIP_KNOWN_ISSUES 1
#endif

namespace spanprof_fuzz {

inline constexpr double unit_budget_ms = 100.0;

// An invariant a user would care about is broken: say which, then let libFuzzer
// keep the input.
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "spanprof-fuzz: invariant broken: %s\n", what);
  __builtin_trap();
}

#define SPANPROF_FUZZ_CHECK(condition)                                       \
  do {                                                                       \
    if (!(condition)) ::spanprof_fuzz::broken(#condition " (" __FILE__ ")"); \
  } while (0)

inline double thread_cpu_ms() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct UnitStats {
  double slowest_ms = 0;
  std::size_t slowest_size = 0;
  std::uint64_t units = 0;

  ~UnitStats() {
    // The line scripts/fuzz.sh reads; a replay of files prints it too.
    std::fprintf(stderr, "spanprof-fuzz: units %llu slowest_unit_ms %.3f (%zu bytes)\n",
                 static_cast<unsigned long long>(units), slowest_ms, slowest_size);
  }
};

inline UnitStats& unit_stats() {
  static UnitStats stats;
  return stats;
}

// Calls unit(input) under the time budget; the entry point of every target.
template <class Unit>
int run_unit(const std::uint8_t* data, std::size_t size, Unit unit) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  double fastest = 0;
  for (int run = 0; run < 3 && (run == 0 || fastest > unit_budget_ms / 10); ++run) {
    const double start = thread_cpu_ms();
    unit(input);
    const double used = thread_cpu_ms() - start;
    fastest = run == 0 ? used : std::min(fastest, used);
  }
  UnitStats& stats = unit_stats();
  ++stats.units;
  if (fastest > stats.slowest_ms) {
    stats.slowest_ms = fastest;
    stats.slowest_size = size;
  }
  if (fastest > unit_budget_ms) {
    std::fprintf(stderr, "spanprof-fuzz: slow unit: %.1f ms of CPU (fastest of 3 runs) for %zu bytes, budget %.0f ms\n",
                 fastest, size, unit_budget_ms);
    __builtin_trap();
  }
  return 0;
}

// libstdc++'s __cxa_demangle, which demangle_symbol() calls, prints a substitution
// every time it is referred to: ten bytes per level of "b<S, S>" double the
// output, and a 234-byte name becomes 27 MB of text (README.md, "Known issue").
// Real names refer back at most 40 times, mostly to short names; this keeps the
// targets to names with at most 12 references ("S<seq>_", "T<n>_").
inline bool demangler_may_explode(std::string_view name) noexcept {
  if (!SPANPROF_FUZZ_SKIP_KNOWN_ISSUES) return false;
  int references = 0;
  for (std::size_t i = 0; i < name.size();) {
    if (name[i] != 'S' && name[i] != 'T') {
      ++i;
      continue;
    }
    // Past the whole run, so a name of nothing but 'S' is read once, not once per 'S'.
    std::size_t j = i + 1;
    while (j < name.size() && ((name[j] >= '0' && name[j] <= '9') || (name[j] >= 'A' && name[j] <= 'Z'))) ++j;
    if (j < name.size() && name[j] == '_') ++references;
    i = j;
  }
  return references > 12;
}

// Reads the input front to back: small fixed fields first, the rest as one blob,
// so one input can steer a target through several entry points.
// A file in memory with a path, for readers that open files by name: each unit's
// bytes replace the last one's, and nothing touches the disk.
class MemoryFile {
 public:
  explicit MemoryFile(const char* name) {
    fd_ = ::memfd_create(name, MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& path() const noexcept { return path_; }
  void write(std::string_view bytes) const {
    if (::ftruncate(fd_, 0) != 0 ||
        ::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      std::perror("writing the memory file");
      std::abort();
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
};

class Input {
 public:
  explicit Input(std::string_view input) noexcept : rest_(input) {}

  std::uint8_t byte() noexcept {
    if (rest_.empty()) return 0;
    const auto b = static_cast<std::uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }

  // Up to `max` bytes, fewer at the end of the input.
  std::string_view bytes(std::size_t max) noexcept {
    const std::string_view taken = rest_.substr(0, max);
    rest_.remove_prefix(taken.size());
    return taken;
  }

  std::string_view rest() const noexcept { return rest_; }

 private:
  std::string_view rest_;
};

}  // namespace spanprof_fuzz

#endif  // SPANPROF_TESTS_FUZZ_FUZZ_SUPPORT_HPP_
