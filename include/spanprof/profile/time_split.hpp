// Where a span's elapsed time went, from the kernel's accounting of its thread:
// running on a core, waiting for one (runnable, preempted or not yet scheduled),
// or blocked (sleeping, waiting on a lock or for I/O). The three add up to the
// span's elapsed time; on a saturated machine "waiting for a CPU" is often the
// whole answer to why a span was slow, and no function in its flame graph shows it.
// Measured when Options::time_split is on (docs/time_split.md).
#ifndef SPANPROF_PROFILE_TIME_SPLIT_HPP_
#define SPANPROF_PROFILE_TIME_SPLIT_HPP_

#include <spanprof/config.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

struct TimeSplit {
  std::int64_t running_ns = -1;  // CPU time of the thread (-1: not measured)
  std::int64_t waiting_ns = 0;   // runnable, waiting for a core: the scheduler's run delay
  std::int64_t blocked_ns = 0;   // the rest of the elapsed time: sleeping, locks, I/O
  std::int64_t voluntary_switches = 0;    // the thread gave up its core (blocked)
  std::int64_t involuntary_switches = 0;  // the scheduler took its core away (preempted)

  bool measured() const noexcept { return running_ns >= 0; }
  std::int64_t total_ns() const noexcept { return running_ns + waiting_ns + blocked_ns; }

  // Adds another part of the same work (a request's fragment on another thread).
  TimeSplit& operator+=(const TimeSplit& other) noexcept {
    if (!other.measured()) return *this;
    if (!measured()) return *this = other;
    running_ns += other.running_ns;
    waiting_ns += other.waiting_ns;
    blocked_ns += other.blocked_ns;
    voluntary_switches += other.voluntary_switches;
    involuntary_switches += other.involuntary_switches;
    return *this;
  }
};

// How a span's profile carries its split: one pprof comment (`go tool pprof
// -comments`), in this form, that spanprof-report reads back:
//   spanprof.time_split running_ns=… waiting_ns=… blocked_ns=… voluntary_switches=… involuntary_switches=…
inline constexpr std::string_view time_split_comment_prefix = "spanprof.time_split ";

inline std::string time_split_comment(const TimeSplit& split) {
  char text[200];
  std::snprintf(text, sizeof text, "%.*srunning_ns=%lld waiting_ns=%lld blocked_ns=%lld voluntary_switches=%lld "
                                   "involuntary_switches=%lld",
                static_cast<int>(time_split_comment_prefix.size()), time_split_comment_prefix.data(),
                static_cast<long long>(split.running_ns), static_cast<long long>(split.waiting_ns),
                static_cast<long long>(split.blocked_ns), static_cast<long long>(split.voluntary_switches),
                static_cast<long long>(split.involuntary_switches));
  return text;
}

// The split a comment of time_split_comment's form holds; false for any other text.
inline bool parse_time_split_comment(std::string_view comment, TimeSplit& out) noexcept {
  if (comment.substr(0, time_split_comment_prefix.size()) != time_split_comment_prefix) return false;
  comment.remove_prefix(time_split_comment_prefix.size());
  TimeSplit split;
  std::int64_t* const fields[] = {&split.running_ns, &split.waiting_ns, &split.blocked_ns, &split.voluntary_switches,
                                  &split.involuntary_switches};
  const std::string_view names[] = {"running_ns=", "waiting_ns=", "blocked_ns=", "voluntary_switches=",
                                    "involuntary_switches="};
  for (std::size_t i = 0; i < 5; ++i) {
    while (!comment.empty() && comment.front() == ' ') comment.remove_prefix(1);
    if (comment.substr(0, names[i].size()) != names[i]) return false;
    comment.remove_prefix(names[i].size());
    std::int64_t value = 0;
    std::size_t digits = 0;
    while (digits < comment.size() && digits < 18 && comment[digits] >= '0' && comment[digits] <= '9')
      value = value * 10 + (comment[digits++] - '0');
    if (digits == 0) return false;
    comment.remove_prefix(digits);
    *fields[i] = value;
  }
  out = split;
  return true;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_TIME_SPLIT_HPP_
