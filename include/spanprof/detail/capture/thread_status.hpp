// What one thread can learn about another without signalling it: where it is
// blocked, how much CPU time it has used, whether it blocks a signal, where its
// stack ends; and which threads the process has. The wall ticker reads the first
// two at every tick to decide whether a thread needs a signal at all; the watchdog
// reads the CPU time and the signal mask to find a thread that holds the sample
// signal; the continuous profile's scan lists the threads and learns their stacks
// (process_sampler.hpp). Signalling
// the thread to ask would disturb what is looked at: a signal makes a blocked
// nanosleep or poll return EINTR, and piles up on a thread that holds it.
//
// Each reader of one thread takes its kernel id and allocates nothing; what it
// reads of kernel text fits a fixed buffer on the stack.
#ifndef SPANPROF_DETAIL_CAPTURE_THREAD_STATUS_HPP_
#define SPANPROF_DETAIL_CAPTURE_THREAD_STATUS_HPP_

#include <spanprof/config.hpp>

// Compiled out with the SDK, as the sampler that uses it.
#if SPANPROF_ENABLED

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Where a thread is blocked, as /proc/self/task/<tid>/syscall tells: the system
// call (-1: blocked outside one, in a page fault say), its first arguments, and
// the user stack pointer and instruction pointer. The same site at two ticks, with
// little CPU time between them, is the same wait.
struct BlockedSite {
  long call = -1;
  std::uint64_t args[4] = {0, 0, 0, 0};
  std::uint64_t sp = 0;
  std::uint64_t pc = 0;
  friend bool operator==(const BlockedSite& a, const BlockedSite& b) noexcept { return a.sp == b.sp && a.pc == b.pc; }
};

// What /proc/self/task/<tid>/syscall says of a thread: on a core or waiting for
// one (the kernel prints "running" for both: it reads the system call of a thread
// that is not runnable only), or blocked, with its site ("<nr> <6 args> <sp> <pc>",
// or "-1 <sp> <pc>").
enum class ThreadActivity : std::uint8_t { unknown, runnable, blocked };

// `syscall_fd` is that file, opened at the first call (-1 until then) and kept
// open for the next ticks; the caller closes it. `site` is set when blocked.
inline ThreadActivity read_thread_activity(pid_t tid, int& syscall_fd, BlockedSite& site) noexcept {
  if (syscall_fd < 0) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(tid));
    syscall_fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (syscall_fd < 0) return ThreadActivity::unknown;
  }
  char text[256];
  const ssize_t n = ::pread(syscall_fd, text, sizeof text - 1, 0);
  if (n <= 0) return ThreadActivity::unknown;
  if (text[0] == 'r') return ThreadActivity::runnable;  // "running"
  // The fields: the call's number in decimal, the rest in hex ("0x...").
  std::uint64_t fields[9] = {};
  int found = 0;
  const char* c = text;
  const char* const end = text + n;
  const bool outside_a_call = c[0] == '-';
  if (outside_a_call) ++c;
  while (c < end && *c != '\n' && found < 9) {
    const bool hex = end - c > 2 && c[0] == '0' && c[1] == 'x';
    if (hex) c += 2;
    std::uint64_t value = 0;
    const char* digits = c;
    for (; c < end && *c != ' ' && *c != '\n'; ++c) {
      const char d = *c;
      const int digit = d >= '0' && d <= '9' ? d - '0' : hex && d >= 'a' && d <= 'f' ? d - 'a' + 10 : -1;
      if (digit < 0) return ThreadActivity::unknown;
      value = value * (hex ? 16 : 10) + static_cast<std::uint64_t>(digit);
    }
    if (c == digits) return ThreadActivity::unknown;
    fields[found++] = value;
    if (c < end && *c == ' ') ++c;
  }
  if (found != (outside_a_call ? 3 : 9)) return ThreadActivity::unknown;
  site = BlockedSite{};
  site.call = outside_a_call ? -1 : static_cast<long>(fields[0]);
  if (!outside_a_call)
    for (int i = 0; i < 4; ++i) site.args[i] = fields[1 + i];
  site.sp = fields[found - 2];
  site.pc = fields[found - 1];
  return ThreadActivity::blocked;
}

// The wall ticker's own view of a thread (ThreadStackSampler::ticker_).
struct TickerView {
  int syscall_fd = -1;
  bool sampled_blocked = false;  // the last signal found the thread blocked at `site`
  BlockedSite site;
  std::uint32_t generation = 0;
  std::int64_t cpu_ns = 0;
  std::int64_t cpu_point_signalled = 0;  // the CPU watch's last point sent
  std::int64_t cpu_seen = -1;            // the thread's CPU clock at the last read
  std::int64_t seen_at_ns = 0;           // the ticker's monotonic clock then
  std::uint32_t still_looks = 0;         // looks in a row that found it unchanged
};

// The process's thread ids, sorted, from an open /proc/self/task.
inline bool list_threads(int task_dir_fd, std::vector<pid_t>& out) {
  out.clear();
  if (task_dir_fd < 0 || ::lseek(task_dir_fd, 0, SEEK_SET) != 0) return false;
  alignas(8) char entries[16384];
  for (;;) {
    const long got = ::syscall(SYS_getdents64, task_dir_fd, entries, sizeof entries);
    if (got < 0) return false;
    if (got == 0) break;
    for (long at = 0; at < got;) {
      const auto* entry = reinterpret_cast<const dirent64*>(entries + at);
      if (entry->d_name[0] >= '0' && entry->d_name[0] <= '9') out.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
      at += entry->d_reclen;
    }
  }
  std::sort(out.begin(), out.end());
  return true;
}

// The last pid the kernel gave out in this pid namespace, /proc/loadavg's last
// field ("0.60 1.61 3.70 1/107 7982"); -1 when unreadable. `loadavg_fd` is that
// file, opened at the first call (-2 until then) and kept open; the caller closes it.
inline long last_pid_given_out(int& loadavg_fd) noexcept {
  if (loadavg_fd == -2) loadavg_fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (loadavg_fd < 0) return -1;
  char text[128];
  const ssize_t n = ::pread(loadavg_fd, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* last = std::strrchr(text, ' ');
  return last != nullptr ? std::strtol(last + 1, nullptr, 10) : -1;
}

// The process's writable mappings, [low, high) from /proc/self/maps: a thread's
// stack is one, and its top the mapping's end.
inline std::vector<std::pair<std::uint64_t, std::uint64_t>> writable_mappings() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return ranges;
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long long low = 0, high = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%llx-%llx %7s", &low, &high, perms) == 3 && perms[0] == 'r' && perms[1] == 'w')
      ranges.emplace_back(low, high);
  }
  std::fclose(maps);
  return ranges;
}

// Linux's id of thread `tid`'s CPU clock, as glibc's pthread_getcpuclockid makes it.
constexpr clockid_t thread_cpu_clock(pid_t tid) noexcept {
  return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
}

// The thread's CPU time, read from another thread (-1 when unreadable).
inline std::int64_t thread_cpu_ns(pid_t tid) noexcept {
  timespec ts{};
  if (::clock_gettime(thread_cpu_clock(tid), &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// SigBlk in /proc/self/task/<tid>/status has the bit of `signal_number`.
inline bool thread_blocks_signal(pid_t tid, int signal_number) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/status", static_cast<int>(tid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[4096];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* line = std::strstr(text, "\nSigBlk:");
  if (line == nullptr) return false;
  const unsigned long long mask = std::strtoull(line + 8, nullptr, 16);
  const int bit = signal_number - 1;
  return bit >= 0 && bit < 64 && ((mask >> bit) & 1) != 0;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_THREAD_STATUS_HPP_
