// The init process of the arm64 stage's VM (scripts/arm64.sh): one boot runs every
// test program in /tests, in the order /tests/list gives, each as a child with its
// own time limit, then powers the VM off. A boot of the emulated kernel costs about
// as much as a short test; one boot for all of them keeps the stage within CI's
// budget. A test's verdict is its exit status (tests/arm64/vm.hpp: a test that is
// not init returns it); this prints one line per test that scripts/arm64.sh reads.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

namespace {

double now_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::vector<std::string> read_list(const char* path) {
  std::vector<std::string> names;
  FILE* file = std::fopen(path, "r");
  if (file == nullptr) return names;
  char line[256];
  while (std::fgets(line, sizeof line, file) != nullptr) {
    std::string name(line);
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
    if (!name.empty()) names.push_back(name);
  }
  std::fclose(file);
  return names;
}

// Runs /tests/<name> and waits for it at most `limit` seconds (then kills it). As
// PID 1 this also reaps whatever a test left orphaned (its busy processes, its
// forked children), so it waits for any child and keeps the test's own status.
// Returns the test's exit status, or -1 when it was killed (`signal`: by which) or
// did not start.
int run_test(const std::string& name, double limit, bool& timed_out, int& signal) {
  const std::string path = "/tests/" + name;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    char* argv[] = {const_cast<char*>(name.c_str()), nullptr};
    ::execve(path.c_str(), argv, environ);
    std::fprintf(stderr, "spanprof-arm64: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  const double deadline = now_seconds() + limit;
  timed_out = false;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done == pid) {
      signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (done > 0) continue;  // an orphan reaped
    if (done < 0 && errno != EINTR && errno != EAGAIN) return -1;
    if (!timed_out && now_seconds() > deadline) {
      timed_out = true;
      ::kill(pid, SIGKILL);
    }
    const timespec pause{0, 20'000'000};
    ::nanosleep(&pause, nullptr);
  }
}

}  // namespace

int main() {
  const bool init = ::getpid() == 1;
  if (init) ::mount("proc", "/proc", "proc", 0, nullptr);
  const char* limit_text = std::getenv("SPANPROF_ARM64_TEST_TIMEOUT");
  const double limit = limit_text != nullptr ? std::atof(limit_text) : 240;
  std::printf("spanprof-arm64: booted in %.1f s\n", now_seconds());
  std::fflush(stdout);
  int failed = 0;
  const std::vector<std::string> names = read_list("/tests/list");
  for (const std::string& name : names) {
    std::printf("spanprof-arm64: == %s\n", name.c_str());
    std::fflush(stdout);
    const double start = now_seconds();
    bool timed_out = false;
    int signal = 0;
    const int status = run_test(name, limit, timed_out, signal);
    const double took = now_seconds() - start;
    if (status == 0) {
      std::printf("spanprof-arm64: %s passed (%.0f s)\n", name.c_str(), took);
    } else {
      ++failed;
      if (timed_out)
        std::printf("spanprof-arm64: %s FAILED: still running after %.0f s, killed\n", name.c_str(), limit);
      else if (signal != 0)
        std::printf("spanprof-arm64: %s FAILED: killed by signal %d (%s) after %.0f s\n", name.c_str(), signal,
                    strsignal(signal), took);
      else
        std::printf("spanprof-arm64: %s FAILED (exit %d, %.0f s)\n", name.c_str(), status, took);
    }
    std::fflush(stdout);
  }
  std::printf("spanprof-arm64: %zu tests, %d failed\n", names.size(), failed);
  std::fflush(stdout);
  if (init) {
    ::sync();
    ::reboot(RB_POWER_OFF);
  }
  return failed == 0 && !names.empty() ? 0 : 1;
}
