// Small helpers more than one suite uses. The suites are compiled in unity
// batches (several .cpp files in one translation unit), so a helper defined in two
// files' anonymous namespaces would clash: shared ones live here, once.
#pragma once

#include <spanprof/base/clock.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/profile/profile.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>
#include <string>
#include <string_view>

#include <sys/stat.h>

// Tests whose assertions a ThreadSanitizer build cannot keep carry this tag, each
// with its reason above it; in that build the tag hides them from a plain run (they
// still run when it is asked for). Most are about where samples land: TSan runs a signal handler only when the
// thread next enters a function it intercepts (a libc or pthread call), handing it
// the registers of the signal's arrival, so a sample's stack is wherever the thread
// had got to by then, and a wait in a call it does not intercept (select,
// clock_nanosleep) is sampled only once the call has returned.
#if defined(__SANITIZE_THREAD__)
#define SPANPROF_TESTS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPANPROF_TESTS_UNDER_TSAN 1
#endif
#endif
#ifdef SPANPROF_TESTS_UNDER_TSAN
#define SPANPROF_TEST_NOT_UNDER_TSAN "[.not_under_tsan]"
#else
#define SPANPROF_TEST_NOT_UNDER_TSAN "[not_under_tsan]"
#endif

// Statistical checks of where CPU samples land and what they weigh (many spans,
// shares and ratios against the thread's CPU clock): their truth is the kernel's
// signal delivery, which a sanitizer's runtime defers and reorders, and their code
// runs under the sanitizers in the other tests. Hidden in the sanitizer builds.
#if defined(SPANPROF_TESTS_UNDER_TSAN) || defined(__SANITIZE_ADDRESS__)
#define SPANPROF_TEST_SAMPLING_STATISTICS "[.sampling_statistics]"
#else
#define SPANPROF_TEST_SAMPLING_STATISTICS "[sampling_statistics]"
#endif

// Tests of the loader and allocator locks against signals and fork: under a
// sanitizer both are the sanitizer's (its allocator, its dl_iterate_phdr
// interceptor), another host than the one spanprof ships in, each test says
// how it fails there. Hidden in the sanitizer builds the same way.
#if defined(SPANPROF_TESTS_UNDER_TSAN) || defined(__SANITIZE_ADDRESS__)
#define SPANPROF_TEST_NOT_UNDER_SANITIZERS "[.not_under_sanitizers]"
#else
#define SPANPROF_TEST_NOT_UNDER_SANITIZERS "[not_under_sanitizers]"
#endif

// Seconds of sustained load whose point is what the plain build does — throughput,
// resident memory that stays flat over 5,000 restarts. Under a sanitizer they
// run several times longer and measure the sanitizer's allocator and quarantine;
// shorter tests run the same code instrumented. Hidden there the same way.
#if defined(SPANPROF_TESTS_UNDER_TSAN) || defined(__SANITIZE_ADDRESS__)
#define SPANPROF_TEST_LONG_LOAD "[.long_load]"
#else
#define SPANPROF_TEST_LONG_LOAD "[long_load]"
#endif

namespace spanprof_test {

inline constexpr std::int64_t ten_ms = 10'000'000;

// What an upload said, as one comparable word: "ok", "retryable" or "permanent".
template <class Result>
std::string upload_outcome(const Result& result) {
  return result.is_ok() ? "ok" : result.may_retry() ? "retryable" : "permanent";
}

// A Status as a check reads it: true when ok; otherwise false, with its message
// in `why` for the checks that follow.
inline bool ok_or(const spanprof::Status& status, std::string& why) {
  why = status.message();
  return status.is_ok();
}

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

inline spanprof::Label string_label(std::string key, std::string value) {
  spanprof::Label label;
  label.key = std::move(key);
  label.str = std::move(value);
  return label;
}

// Every byte value, NULs included, in an order that shows truncation or shifts.
inline std::string binary_body(std::size_t size) {
  std::string body(size, '\0');
  std::uint32_t state = 2463534242u;
  for (std::size_t i = 0; i < size; ++i) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    body[i] = static_cast<char>(i % 7 == 0 ? 0 : state & 0xff);
  }
  return body;
}

// A clock that counts its reads, to check a component reads it only when it must.
class CountingClock final : public spanprof::Clock {
 public:
  explicit CountingClock(std::int64_t now_ns = 1'000'000'000) noexcept : now_(now_ns) {}
  std::int64_t now_ns() const noexcept override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    return now_;
  }
  int reads() const noexcept { return reads_.load(std::memory_order_relaxed); }

 private:
  std::int64_t now_;
  mutable std::atomic<int> reads_{0};
};

// The names of the regular files in a directory (empty if it cannot be read).
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ignored))
    if (entry.is_regular_file(ignored)) names.push_back(entry.path().filename().string());
  return names;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh directory under /tmp, removed with everything in it (read-only
// subdirectories included) when the test ends.
class TempDir {
 public:
  explicit TempDir(const char* prefix = "spanprof-test") {
    std::string pattern = std::string("/tmp/") + prefix + "-XXXXXX";
    const char* dir = ::mkdtemp(pattern.data());
    if (dir == nullptr) std::abort();
    path_ = dir;
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ignored;
    for (auto it = fs::recursive_directory_iterator(path_, ignored); it != fs::recursive_directory_iterator();
         it.increment(ignored)) {
      if (it->is_directory(ignored)) ::chmod(it->path().c_str(), 0700);
    }
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace spanprof_test
