// What every program of the arm64 stage (scripts/arm64.sh) shares: its verdict on
// the line the stage reads (the VM's init, tests/arm64/init/init.cpp, runs each
// program in turn and takes its exit status), the thread's CPU clock, work for a
// given CPU time, a span numbered n, and the samples of the profiles delivered.
#pragma once

#include <spanprof/spanprof.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <dirent.h>
#include <time.h>
#include <unistd.h>

namespace arm64_vm {

// Prints "spanprof-arm64: PASS" or "FAIL"; returns the exit status.
inline int finish(bool pass) {
  std::printf("spanprof-arm64: %s\n", pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass ? 0 : 1;
}

// Prints what the kernel says of each thread of this process (its state and CPU
// time, the signals pending for it and blocked in it, the system call it is in or
// "running", its kernel stack), and the process's count of queued signals
// against its limit: a test's watchdog calls it before it fails a hung round.
inline void print_threads() {
  const auto print_file = [](const std::string& path, const char* label, bool only_signal_lines) {
    std::FILE* file = std::fopen(path.c_str(), "r");
    if (file == nullptr) return;
    char line[512];
    while (std::fgets(line, sizeof line, file) != nullptr) {
      const std::string_view text(line);
      if (only_signal_lines && text.substr(0, 3) != "Sig" && text.substr(0, 3) != "Shd") continue;
      std::printf("spanprof-arm64:   %s %s", label, line);
      if (text.empty() || text.back() != '\n') std::printf("\n");
    }
    std::fclose(file);
  };
  print_file("/proc/self/status", "process", true);
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::printf("spanprof-arm64: thread %s\n", entry->d_name);
    print_file(task + "/stat", "stat", false);
    print_file(task + "/status", "status", true);
    print_file(task + "/syscall", "syscall", false);
    print_file(task + "/stack", "stack", false);
  }
  ::closedir(tasks);
  std::fflush(stdout);
}

inline double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Computes until the thread has run `cpu_seconds` more, reading its CPU clock
// every `iterations` steps. Inlined into the caller, so that the caller (each
// test's own noinline function) is the name its samples show.
__attribute__((always_inline)) inline double compute_for(double cpu_seconds, int iterations = 2000) {
  const double end = thread_cpu_seconds() + cpu_seconds;
  volatile double x = 1.0;
  do {
    for (int i = 0; i < iterations; ++i) x = x * 1.0000001 + 1e-9;
  } while (thread_cpu_seconds() < end);
  return x;
}

// A valid span whose id holds n.
inline spanprof::SpanContext span_number(unsigned n) {
  std::array<std::uint8_t, 16> trace{};
  std::array<std::uint8_t, 8> id{};
  trace[15] = 1;
  for (int i = 0; i < 4; ++i) id[7 - i] = static_cast<std::uint8_t>(n >> (8 * i));
  id[0] = 1;
  return spanprof::SpanContext{spanprof::TraceId(trace), spanprof::SpanId(id),
                               spanprof::TraceFlags{spanprof::TraceFlags::sampled_bit}};
}

// Whether `name`, as the symbolizer gives it ("function(arguments)"), is `function`'s.
inline bool names_function(std::string_view name, std::string_view function) {
  return name.size() > function.size() && name.substr(0, function.size()) == function && name[function.size()] == '(';
}

// One sample of a delivered profile: its span's record, its values, and its
// frames' function names, innermost first ("" for a frame without one).
struct SampleSeen {
  const spanprof::SpanRecord& span;
  const std::vector<std::int64_t>& values;
  std::vector<std::string_view> functions;

  // Whether a frame is in `function`.
  bool on_stack(std::string_view function) const {
    for (const std::string_view name : functions)
      if (names_function(name, function)) return true;
    return false;
  }
};

// Adds an uploader that calls `on_profile(record)` for every profile delivered and
// `on_sample(seen)` for each of its samples, under `mutex`.
template <class OnProfile, class OnSample>
void tally_profiles(spanprof::Options& options, std::mutex& mutex, OnProfile on_profile, OnSample on_sample) {
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [&mutex, on_profile, on_sample](const spanprof::EncodedProfile& encoded, std::string_view,
                                      const spanprof::UploadContext& context) mutable {
        const spanprof::Profile& profile = *context.profile;
        std::lock_guard<std::mutex> lock(mutex);
        on_profile(encoded.record);
        for (const spanprof::Sample& sample : profile.samples) {
          SampleSeen seen{encoded.record, sample.values, {}};
          for (const std::uint64_t id : sample.location_ids) {
            const spanprof::Location& location = profile.locations[id - 1];
            seen.functions.push_back(location.function_id != 0
                                         ? std::string_view(profile.functions[location.function_id - 1].name)
                                         : std::string_view());
          }
          on_sample(seen);
        }
        return spanprof::UploadResult::ok();
      }));
}

}  // namespace arm64_vm
