// What the continuous profile (Options::continuous) costs a process of many idle
// threads: its resident memory and the CPU it burns while its threads sleep, off
// against on, side by side in one run (two children over the same window, so the
// machine's load is the same for both).
//
//   spanprof_bench_continuous_threads [THREADS] [SECONDS]   (default 256 threads, 10 s)
//
// Each child makes THREADS threads that block on a condition variable, plus one
// that wakes every 10 ms to do 100 µs of work (a process is never quite idle),
// waits a second for the profile's first looks, then measures over SECONDS: its
// RSS, and its CPU time (utime + stime) per second. spanprof is started in both
// (the file uploader into a temporary directory); only `on` has continuous.
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

long resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

__attribute__((noinline)) void ticks_a_little() {
  const double until = thread_cpu_seconds() + 100e-6;
  volatile double x = 1;
  while (thread_cpu_seconds() < until) x = x * 1.0000001 + 1e-9;
}

int child(bool continuous, int threads, int seconds, int report_fd) {
  spanprof::Options options(spanprof::ignore_environment);
  options.continuous = continuous;
  options.output_directory = "/tmp/spanprof-bench-continuous-" + std::to_string(::getpid());
  spanprof::start(options);
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::vector<std::thread> idle;
  for (int i = 0; i < threads; ++i)
    idle.emplace_back([&] {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stop; });
    });
  std::thread ticking([&] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stop) return;
      }
      ticks_a_little();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double cpu_before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double cpu = process_cpu_seconds() - cpu_before;
  const long rss = resident_kib();
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  wake.notify_all();
  for (auto& thread : idle) thread.join();
  ticking.join();
  const auto stats = spanprof::stats();
  spanprof::shutdown();
  char line[200];
  const int n = std::snprintf(line, sizeof line, "%s %ld %.6f %llu\n", continuous ? "on" : "off", rss, cpu / seconds,
                              static_cast<unsigned long long>(stats.continuous_threads));
  if (::write(report_fd, line, static_cast<std::size_t>(n)) != n) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 256;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 10;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return 1;
  pid_t children[2];
  for (int i = 0; i < 2; ++i) {
    children[i] = ::fork();
    if (children[i] == 0) ::_exit(child(i == 1, threads, seconds, pipe_fds[1]));
  }
  ::close(pipe_fds[1]);
  for (const pid_t pid : children) ::waitpid(pid, nullptr, 0);
  char text[512] = {};
  const ssize_t n = ::read(pipe_fds[0], text, sizeof text - 1);
  if (n <= 0) return 1;
  long rss[2] = {0, 0};
  double cpu[2] = {0, 0};
  unsigned long long sampled = 0;
  for (const char* line = text; *line != '\0';) {
    char mode[8];
    long kib = 0;
    double per_second = 0;
    unsigned long long count = 0;
    if (std::sscanf(line, "%7s %ld %lf %llu", mode, &kib, &per_second, &count) != 4) break;
    const int i = std::string(mode) == "on" ? 1 : 0;
    rss[i] = kib;
    cpu[i] = per_second;
    if (i == 1) sampled = count;
    line = std::strchr(line, '\n');
    if (line == nullptr) break;
    ++line;
  }
  std::printf("%d idle threads, %d s: RSS off %ld KiB, on %ld KiB (+%.1f MiB); CPU off %.3f %% of a core, on %.3f %% "
              "(+%.3f %%); threads sampled %llu\n",
              threads, seconds, rss[0], rss[1], static_cast<double>(rss[1] - rss[0]) / 1024, cpu[0] * 100,
              cpu[1] * 100, (cpu[1] - cpu[0]) * 100, sampled);
  return 0;
}
