// Run by scripts/arm64.sh in an aarch64 VM (a real arm64 kernel under
// qemu-system-aarch64, tests/arm64/init/init.cpp), built statically for it. With a span open
// and samples being taken, the process forks; the child starts spanprof of its
// own, profiles a span of its hot function and exits; the parent waits for it
// (never stuck) and goes on sampling at its full rate.
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include "vm.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) double span_work(double cpu_seconds);
__attribute__((noinline)) double child_work(double cpu_seconds);

namespace {

using arm64_vm::span_number;
using arm64_vm::thread_cpu_seconds;

// The share of the profiles' samples with `function` on the stack (its own clock
// reads are system calls, where many ticks land).
struct Shares {
  std::mutex mutex;
  std::int64_t own = 0, all = 0;
  std::int64_t profiles = 0;
};

spanprof::Options options_at(int hz, Shares& shares, const char* function) {
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = hz;
  options.queue_capacity = 4096;
  arm64_vm::tally_profiles(
      options, shares.mutex, [&shares](const spanprof::SpanRecord&) { ++shares.profiles; },
      [&shares, function](const arm64_vm::SampleSeen& sample) {
        shares.all += sample.values.at(0);
        if (sample.on_stack(function)) shares.own += sample.values.at(0);
      });
  return options;
}

// Samples per CPU-second of one span of `cpu_seconds`.
double sampled_rate(unsigned span, double cpu_seconds) {
  const auto before = spanprof::stats();
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(span), "rate"});
    span_work(cpu_seconds);
  }
  return static_cast<double>(spanprof::stats().samples_captured - before.samples_captured) / cpu_seconds;
}

int wait_or_kill(pid_t child, int seconds) {
  for (int waited_ms = 0; waited_ms < seconds * 1000; waited_ms += 5) {
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ::usleep(5000);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return -1;  // stuck
}

bool fork_while_sampling() {
  Shares shares;
  spanprof::start(options_at(250, shares, "span_work"));
  const double before = sampled_rate(1, 0.4);
  std::fflush(stdout);
  pid_t child = -1;
  {
    spanprof::ScopedProfile open_at_fork(spanprof::NamedSpan{span_number(2), "open_at_fork"});
    span_work(0.05);
    child = ::fork();
    if (child == 0) {
      open_at_fork.close();
      Shares own;
      spanprof::start(options_at(250, own, "child_work"));
      {
        spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(3), "child"});
        child_work(0.4);
      }
      spanprof::flush(std::chrono::seconds(20));
      const double share = own.all > 0 ? static_cast<double>(own.own) / static_cast<double>(own.all) : 0.0;
      std::printf("spanprof-arm64: forked child: %lld profile(s), %lld samples, %.1f %% with child_work on the stack\n",
                  static_cast<long long>(own.profiles), static_cast<long long>(own.all), 100.0 * share);
      std::fflush(stdout);
      ::_exit(own.profiles == 1 && own.all >= 20 && share >= 0.9 ? 0 : 3);
    }
  }
  const int code = wait_or_kill(child, 60);
  const double after = sampled_rate(4, 0.4);
  spanprof::flush(std::chrono::seconds(30));
  spanprof::shutdown();
  std::printf("spanprof-arm64: fork: child exit %d; parent's samples per CPU-second %.0f before, %.0f after\n", code,
              before, after);
  return code == 0 && before >= 150 && after >= 0.7 * before;
}

}  // namespace

// Outside the anonymous namespace: their names are what the samples are checked
// against.
double span_work(double cpu_seconds) { return arm64_vm::compute_for(cpu_seconds); }
double child_work(double cpu_seconds) {
  const double end = thread_cpu_seconds() + cpu_seconds;
  volatile std::uint64_t h = 1469598103934665603ull;
  do {
    for (int i = 0; i < 2000; ++i) h = (h ^ static_cast<std::uint64_t>(i)) * 1099511628211ull;
  } while (thread_cpu_seconds() < end);
  return static_cast<double>(h & 1);
}

int main() {
  return arm64_vm::finish(fork_while_sampling());
}
