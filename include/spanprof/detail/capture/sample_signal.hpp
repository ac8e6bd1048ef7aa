// The real-time signal samples arrive on: which one, its handler, and the
// watchdog that notices when the host takes it back.
//
// Why it is shaped like this (see docs/host-safety.md; detail/capture/stack_sampler.hpp
// says why a real-time signal and not SIGPROF):
//  * A signal the host handles stays the host's: spanprof picks a free one.
//  * The host may still replace the handler, or block the signal on a thread,
//    later: the watchdog stops sampling there and says so once, rather than let
//    spanprof's signals reach the host's handler or pile up against a mask.
#ifndef SPANPROF_DETAIL_CAPTURE_SAMPLE_SIGNAL_HPP_
#define SPANPROF_DETAIL_CAPTURE_SAMPLE_SIGNAL_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/capture/stack_sampler_list.hpp>
#include <spanprof/detail/capture/signal_side.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>

// Compiled out with the SDK, as the samplers it serves.
#if SPANPROF_ENABLED

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Chooses the real-time signal for samples: the configured one, or the first
// real-time signal from SIGRTMIN+4 that nobody handles. Installs the handler.
// The handler stays installed for the life of the process: a late signal with no
// handler would kill the process.
struct SampleSignalInstallation {
  std::mutex mutex;
  int installed[65] = {};
};
SPANPROF_API inline SampleSignalInstallation& sample_signal_installation() noexcept {
  static SampleSignalInstallation installation;
  return installation;
}

// Nobody in the process handles or ignores `sig` (spanprof's own handler aside).
inline bool sample_signal_is_free(int sig) noexcept {
  struct sigaction current {};
  if (::sigaction(sig, nullptr, &current) != 0) return false;
  if (current.sa_flags & SA_SIGINFO) return current.sa_sigaction == &on_sample_signal;
  return current.sa_handler == SIG_DFL;
}

// A perf event's overflow is a real-time signal queued to its thread (F_SETSIG);
// when the kernel cannot queue it (the real-time signals pending for the user are
// at RLIMIT_SIGPENDING), it sends SIGIO instead (fcntl(2)), whose default action
// ends the process. So while the program leaves SIGIO at its default, a handler of
// spanprof's takes it and counts it: a sample lost, said by the worker
// (watch_sample_signal). A program that installs its own SIGIO handler later
// replaces this one, and spanprof never takes SIGIO from a program that handles or
// ignores it.
SPANPROF_API inline std::atomic<std::uint64_t>& fallback_sigio_taken() noexcept {
  static std::atomic<std::uint64_t> taken{0};
  return taken;
}
inline void on_fallback_sigio(int) noexcept { fallback_sigio_taken().fetch_add(1, std::memory_order_relaxed); }
inline void take_fallback_sigio() noexcept {
  struct sigaction current {};
  if (::sigaction(SIGIO, nullptr, &current) != 0 || (current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL)
    return;
  struct sigaction action {};
  action.sa_handler = &on_fallback_sigio;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGIO, &action, nullptr);
}

inline int install_sample_signal_handler(int wanted) noexcept {
  SampleSignalInstallation& installation = sample_signal_installation();
  int (&installed)[65] = installation.installed;
  std::lock_guard<std::mutex> held(installation.mutex);
  if (wanted < 0 || wanted >= 65 || (wanted != 0 && (wanted < SIGRTMIN || wanted > SIGRTMAX))) {
    report_error(ErrorCode::invalid_configuration, "signal_number is not a real-time signal");
    return 0;
  }
  if (wanted != 0 && !installed[wanted] && !sample_signal_is_free(wanted)) {
    // The host's signal stays the host's: taking it would silently break whatever
    // the host uses it for.
    char message[160];
    std::snprintf(message, sizeof message,
                  "signal_number=%d already has a handler in this process; it stays the host's, and spanprof "
                  "picks a free real-time signal instead",
                  wanted);
    report_error(ErrorCode::invalid_configuration, message);
    wanted = 0;
  }
  int chosen = wanted;
  for (int sig = SIGRTMIN + 4; chosen == 0 && sig <= SIGRTMAX && sig < 65; ++sig)
    if (installed[sig] || sample_signal_is_free(sig)) chosen = sig;
  if (chosen == 0) {
    report_error(ErrorCode::sampler_failed, "no free real-time signal for CPU samples");
    return 0;
  }
  if (installed[chosen]) return chosen;
  struct sigaction action {};
  action.sa_sigaction = &on_sample_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (::sigaction(chosen, &action, nullptr) != 0) {
    char message[128];
    std::snprintf(message, sizeof message, "cannot install a handler for signal %d: %s", chosen, error_text(errno));
    report_error(ErrorCode::sampler_failed, message);
    return 0;
  }
  installed[chosen] = 1;
  take_fallback_sigio();
  return chosen;
}

// Says once per process that perf_event_open was refused, and what sampling does
// instead.
inline void report_perf_event_refused(int perf_errno, const char* instead) noexcept {
  auto& list = stack_sampler_list();
  {
    std::lock_guard<std::mutex> held(list.mutex);
    if (list.reported_fallback) return;
    list.reported_fallback = true;
  }
  char message[240];
  std::snprintf(message, sizeof message,
                "perf_event_open refused (%s); %s, which the kernel checks only on the scheduler tick",
                error_text(perf_errno), instead);
  report_error(ErrorCode::sampler_unavailable, message);
}

// Run by the worker every 100 sampling periods (100 ms to 1 s). Notices a host
// that replaced the sample signal's handler (its handler would get spanprof's
// signals, and spanprof none) or a thread that blocked the signal after its
// sampler was armed; stops sampling there, and reports each once.
inline void watch_sample_signal(int signal_number) noexcept {
  if (signal_number <= 0 || signal_number >= 65) return;
  StackSamplerList& list = stack_sampler_list();
  struct sigaction current {};
  if (::sigaction(signal_number, nullptr, &current) == 0 &&
      !((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_sample_signal)) {
    if (sample_signal_lost().exchange(signal_number, std::memory_order_relaxed) == signal_number) return;
    {
      SampleSignalInstallation& installation = sample_signal_installation();
      std::lock_guard<std::mutex> held(installation.mutex);
      installation.installed[signal_number] = 0;  // the host's now: the next start() picks another
    }
    {
      std::lock_guard<std::mutex> held(list.mutex);
      for (ThreadStackSampler* s = list.head; s; s = s->registry_next)
        if (s->settings().signal_number == signal_number) s->disarm();
    }
    char message[200];
    std::snprintf(message, sizeof message,
                  "the handler of the sample signal %d was replaced by the host: sampling stopped; "
                  "spanprof::start() picks another signal",
                  signal_number);
    report_error(ErrorCode::sampler_failed, message);
    return;
  }
  static bool sigio_reported = false;  // the worker's own: said once per process
  const std::uint64_t sigio = fallback_sigio_taken().load(std::memory_order_relaxed);
  if (sigio != 0 && !sigio_reported) {
    sigio_reported = true;
    char message[240];
    std::snprintf(message, sizeof message,
                  "the kernel could not queue %llu sample signals (the real-time signals pending reached "
                  "RLIMIT_SIGPENDING) and sent SIGIO instead; spanprof's SIGIO handler took them: those samples "
                  "are lost",
                  static_cast<unsigned long long>(sigio));
    report_error(ErrorCode::sampler_failed, message);
  }
  // automatic: a thread that mostly computes was refused a perf event.
  const int perf_errno = CpuTickSource::perf_refused_errno().load(std::memory_order_relaxed);
  if (perf_errno != 0) report_perf_event_refused(perf_errno, "threads that mostly compute stay on POSIX CPU timers");
  int refused = 0;
  pid_t thread = 0;
  {
    std::lock_guard<std::mutex> held(list.mutex);
    for (ThreadStackSampler* s = list.head; s; s = s->registry_next) {
      if (s->refuse_if_signal_blocked()) {
        ++refused;
        thread = s->thread_id();
      }
    }
  }
  if (refused != 0) {
    char message[200];
    std::snprintf(message, sizeof message,
                  "thread %d (and %d more) blocked the sample signal %d while armed: not sampled any more",
                  static_cast<int>(thread), refused - 1, signal_number);
    report_error(ErrorCode::sampler_failed, message);
  }
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_SAMPLE_SIGNAL_HPP_
