// The sampling engine's per-thread half: a CPU-time sampler that signals only its
// own thread, a signal handler that records the stack of the thread's active span,
// and the per-thread sample log the guard reads back.
//
// Why it is shaped like this (see docs/engines.md):
//  * A sampler is armed once per thread and left running; a guard only publishes
//    its span in a thread-local pointer. Opening a guard then costs nanoseconds, and
//    sampling continues across spans, so short spans are sampled without bias.
//  * The signal is a real-time signal, not SIGPROF: SIGPROF belongs to gperftools,
//    whose profiler stops gathering samples when someone else handles it.
//  * The handler is async-signal-safe: it touches only this thread's preallocated
//    log, lock-free atomics and gperftools' unwinder. No malloc, lock or stdio.
#ifndef SPANPROF_CAPTURE_CPU_SAMPLER_HPP_
#define SPANPROF_CAPTURE_CPU_SAMPLER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/base/counters.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/capture/sample_records.hpp>

// Compiled out with the SDK: nothing here may reach gperftools then.
#if SPANPROF_ENABLED

#include <gperftools/profiler.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include <fcntl.h>
#include <pthread.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int max_stack_depth_limit = 256;

// The part of a guard the signal handler sees. It lives inside the guard object;
// open guards of a thread form a stack through `parent`.
struct ActiveSpan {
  ActiveSpan* parent = nullptr;
  std::size_t log_start = 0;          // where this span's samples begin in the log
  std::uint64_t dropped_at_start = 0;
  // Set (by another thread, possibly) when the span ended elsewhere: its samples
  // are no longer recorded. Null for a guard that can only end here.
  const std::atomic<bool>* stop = nullptr;
};

// Immutable sampler settings of one spanprof::start(); threads armed under an older
// generation rebuild their sampler at their next guard.
struct CpuSamplerSettings {
  std::uint64_t generation = 0;
  CpuSampleSource source = CpuSampleSource::automatic;
  int signal_number = 0;
  std::int64_t period_ns = 10'000'000;
  int max_depth = 64;
  std::size_t buffer_words = 0;
  std::uint32_t idle_ticks_before_disarm = 200;
};

inline std::uintptr_t interrupted_pc(const void* ucontext) noexcept {
  const auto* uc = static_cast<const ucontext_t*>(ucontext);
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.pc);
#elif defined(__i386__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_EIP]);
#else
  (void)uc;
  return 0;
#endif
}

class ThreadCpuSampler {
 public:
  // `counters` is the creating thread's block in the counter registry: the signal
  // handler reaches it through this pointer, never through thread_local storage.
  ThreadCpuSampler(const CpuSamplerSettings& settings, std::uint64_t* words, ThreadCounters& counters) noexcept
      : settings_(settings), words_(words), counters_(&counters), tid_(static_cast<pid_t>(::syscall(SYS_gettid))) {}

  ThreadCpuSampler(const ThreadCpuSampler&) = delete;
  ThreadCpuSampler& operator=(const ThreadCpuSampler&) = delete;

  ~ThreadCpuSampler() {
    if (perf_fd_ >= 0) {
      ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
      ::close(perf_fd_);
    }
    if (has_timer_) ::timer_delete(timer_);
    delete[] words_;
  }

  // Picks and creates the sampling source for this thread (not armed yet).
  // `perf_errno` receives the reason perf_event was refused, if it was.
  CpuSampleSource open_source(int& perf_errno) noexcept {
    perf_errno = 0;
    if (settings_.source != CpuSampleSource::posix_timer) {
      if (open_perf_event()) return source_ = CpuSampleSource::perf_event;
      perf_errno = errno == 0 ? EINVAL : errno;
      if (settings_.source == CpuSampleSource::perf_event) return source_ = CpuSampleSource::automatic;
    }
    if (open_posix_timer()) return source_ = CpuSampleSource::posix_timer;
    return source_ = CpuSampleSource::automatic;  // nothing could be armed
  }

  bool has_source() const noexcept { return source_ != CpuSampleSource::automatic; }
  CpuSampleSource source() const noexcept { return source_; }
  const CpuSamplerSettings& settings() const noexcept { return settings_; }
  bool armed() const noexcept { return armed_.load(std::memory_order_relaxed); }

  // Starts delivering samples to this thread. Called on the request thread, only
  // when the sampler is not armed (first guard, or after an idle disarm).
  bool arm() noexcept {
    idle_ticks_.store(0, std::memory_order_relaxed);
    bool ok = false;
    if (perf_fd_ >= 0) {
      ok = ::ioctl(perf_fd_, PERF_EVENT_IOC_ENABLE, 0) == 0;
    } else if (has_timer_) {
      itimerspec spec{};
      spec.it_value.tv_sec = settings_.period_ns / 1'000'000'000;
      spec.it_value.tv_nsec = settings_.period_ns % 1'000'000'000;
      spec.it_interval = spec.it_value;
      ok = ::timer_settime(timer_, 0, &spec, nullptr) == 0;
    }
    armed_.store(ok, std::memory_order_relaxed);
    return ok;
  }

  // Async-signal-safe: used from the handler when the thread has been idle.
  void disarm() noexcept {
    if (perf_fd_ >= 0) {
      ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
    } else if (has_timer_) {
      itimerspec stop{};
      ::timer_settime(timer_, 0, &stop, nullptr);
    }
    armed_.store(false, std::memory_order_relaxed);
  }

  // ---- used by the guard on this thread ---------------------------------------

  void push(ActiveSpan& span) noexcept {
    span.parent = active_.load(std::memory_order_relaxed);
    span.log_start = used_.load(std::memory_order_relaxed);
    span.dropped_at_start = dropped_.load(std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    active_.store(&span, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }

  // Unpublishes the span; afterwards no signal can add to its samples.
  void pop(const ActiveSpan& span) noexcept {
    active_.store(span.parent, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }

  bool has_open_span() const noexcept { return active_.load(std::memory_order_relaxed) != nullptr; }

  // This thread's block in the counter registry: counting through it costs no TLS
  // lookup on the guard's path.
  ThreadCounters& counters() noexcept { return *counters_; }

  std::size_t used_words() const noexcept { return used_.load(std::memory_order_relaxed); }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  const std::uint64_t* words() const noexcept { return words_; }

  // The outermost span closed: its samples have been copied out.
  void reset_log() noexcept {
    used_.store(0, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }

  // ---- signal handler ----------------------------------------------------------

  void on_signal(const siginfo_t* info, const void* ucontext) noexcept {
    std::uint64_t weight = 1;
    if (perf_fd_ >= 0) {
      if (info->si_fd != perf_fd_) return;  // not our event: someone else's signal
    } else if (has_timer_) {
      if (info->si_code != SI_TIMER) return;
      const int overrun = ::timer_getoverrun(timer_);
      if (overrun > 0) weight += static_cast<std::uint64_t>(overrun);
    } else {
      return;
    }

    const ActiveSpan* active = active_.load(std::memory_order_relaxed);
    // A span that ended on another thread is still on this thread's stack until the
    // thread pops it; it records nothing, and it is not idleness either.
    if (active != nullptr && active->stop != nullptr && active->stop->load(std::memory_order_relaxed)) return;
    if (active == nullptr) {
      const auto idle = idle_ticks_.load(std::memory_order_relaxed) + 1;
      idle_ticks_.store(idle, std::memory_order_relaxed);
      if (idle >= settings_.idle_ticks_before_disarm) disarm();
      return;
    }
    idle_ticks_.store(0, std::memory_order_relaxed);
    record_sample(weight, ucontext);
  }

 private:
  void record_sample(std::uint64_t weight, const void* ucontext) noexcept {
    // gperftools' unwinder, started from the signal frame. Depending on the unwind
    // method the trace begins with this handler and the kernel's signal trampoline
    // (libunwind) or directly at the interrupted instruction (frame pointers): find
    // the interrupted PC in the first frames and start there, so the top frame is
    // the user's code, never ours.
    constexpr int handler_frames_searched = 8;
    void* trace[max_stack_depth_limit + handler_frames_searched];
    const int depth_wanted = settings_.max_depth + handler_frames_searched;
    const int n = ProfilerGetStackTrace(trace, depth_wanted, 0, ucontext);
    const std::uintptr_t pc = interrupted_pc(ucontext);

    int first = -1;
    for (int i = 0; i < n && i < handler_frames_searched; ++i) {
      if (reinterpret_cast<std::uintptr_t>(trace[i]) == pc) {
        first = i;
        break;
      }
    }
    // PC not in the trace (an unwinder that stops at the signal frame): keep the
    // PC alone rather than a stack that starts inside spanprof.
    const int callers_from = first >= 0 ? first + 1 : n;
    int depth = 1 + std::max(0, n - callers_from);
    if (depth > settings_.max_depth) depth = settings_.max_depth;

    const std::size_t used = used_.load(std::memory_order_relaxed);
    const std::size_t need = cpu_record_words(depth);
    if (used + need > settings_.buffer_words) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      counters_->add(Counter::cpu_samples_dropped, 1);
      return;
    }
    write_cpu_record(words_ + used, weight, pc, trace + callers_from, depth);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    used_.store(used + need, std::memory_order_relaxed);
    counters_->add(Counter::cpu_samples_captured, 1);
  }

  bool open_perf_event() noexcept {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = static_cast<std::uint64_t>(settings_.period_ns);
    attr.disabled = 1;
    attr.wakeup_events = 1;  // signal on every overflow
    errno = 0;
    const long fd = ::syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) return false;
    perf_fd_ = static_cast<int>(fd);
    f_owner_ex owner{F_OWNER_TID, tid_};
    if (::fcntl(perf_fd_, F_SETFL, O_ASYNC) != 0 || ::fcntl(perf_fd_, F_SETSIG, settings_.signal_number) != 0 ||
        ::fcntl(perf_fd_, F_SETOWN_EX, &owner) != 0) {
      const int saved = errno;
      ::close(perf_fd_);
      perf_fd_ = -1;
      errno = saved;
      return false;
    }
    return true;
  }

  bool open_posix_timer() noexcept {
    sigevent event{};
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = settings_.signal_number;
    event.sigev_notify_thread_id = tid_;
    if (::timer_create(CLOCK_THREAD_CPUTIME_ID, &event, &timer_) != 0) return false;
    has_timer_ = true;
    return true;
  }

  CpuSamplerSettings settings_;
  std::uint64_t* words_;
  ThreadCounters* counters_;
  pid_t tid_;
  int perf_fd_ = -1;
  timer_t timer_{};
  bool has_timer_ = false;
  CpuSampleSource source_ = CpuSampleSource::automatic;
  std::atomic<ActiveSpan*> active_{nullptr};
  std::atomic<std::size_t> used_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<bool> armed_{false};
  std::atomic<std::uint32_t> idle_ticks_{0};

 public:
  ThreadCpuSampler* registry_prev = nullptr;  // linked under CpuSamplerList's mutex
  ThreadCpuSampler* registry_next = nullptr;
};

// The handler reads this pointer only: it is trivially destructible, so reading it
// from a signal handler never runs a TLS constructor.
inline thread_local ThreadCpuSampler* current_cpu_sampler = nullptr;

inline void on_sample_signal(int, siginfo_t* info, void* ucontext) noexcept {
  const int saved_errno = errno;
  if (ThreadCpuSampler* sampler = current_cpu_sampler) sampler->on_signal(info, ucontext);
  errno = saved_errno;
}

// All live CPU samplers, so shutdown() can disarm them and stats() can count the
// armed ones. (What they count lives in the counter registry.)
struct CpuSamplerList {
  std::mutex mutex;
  ThreadCpuSampler* head = nullptr;
  CpuSampleSource last_source = CpuSampleSource::automatic;
  bool reported_fallback = false;

  void add(ThreadCpuSampler* sampler) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    sampler->registry_next = head;
    if (head) head->registry_prev = sampler;
    head = sampler;
    last_source = sampler->source();
  }

  void remove(ThreadCpuSampler* sampler) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    if (sampler->registry_prev) sampler->registry_prev->registry_next = sampler->registry_next;
    else if (head == sampler) head = sampler->registry_next;
    if (sampler->registry_next) sampler->registry_next->registry_prev = sampler->registry_prev;
  }
};

SPANPROF_API inline CpuSamplerList& cpu_sampler_list() noexcept {
  static CpuSamplerList list;
  return list;
}

// Owns this thread's sampler; its destructor runs at thread exit. The handler
// never sees it, only current_cpu_sampler.
struct ThreadCpuSamplerOwner {
  ThreadCpuSampler* sampler = nullptr;

  void replace(ThreadCpuSampler* next) noexcept {
    ThreadCpuSampler* old = sampler;
    current_cpu_sampler = nullptr;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (old) {
      cpu_sampler_list().remove(old);
      delete old;  // disables the source before freeing the log
    }
    sampler = next;
    if (next) cpu_sampler_list().add(next);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    current_cpu_sampler = next;
  }

  ~ThreadCpuSamplerOwner() { replace(nullptr); }
};

inline thread_local ThreadCpuSamplerOwner cpu_sampler_owner;

// Chooses the real-time signal for samples: the configured one, or the first
// real-time signal from SIGRTMIN+4 that nobody handles. Installs the handler.
// The handler stays installed for the life of the process: a late signal with no
// handler would kill the process.
inline int install_sample_signal_handler(int wanted) noexcept {
  static std::mutex mutex;
  static int installed[65] = {};
  std::lock_guard<std::mutex> lock(mutex);
  int chosen = wanted;
  if (chosen == 0) {
    for (int sig = SIGRTMIN + 4; sig <= SIGRTMAX; ++sig) {
      if (sig < 65 && installed[sig]) {
        chosen = sig;
        break;
      }
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
          current.sa_handler == SIG_DFL) {
        chosen = sig;
        break;
      }
    }
    if (chosen == 0) {
      report_error(ErrorCode::sampler_failed, "no free real-time signal for CPU samples");
      return 0;
    }
  }
  if (chosen <= 0 || chosen >= 65) {
    report_error(ErrorCode::invalid_configuration, "signal_number out of range");
    return 0;
  }
  if (installed[chosen]) return chosen;
  struct sigaction action {};
  action.sa_sigaction = &on_sample_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (::sigaction(chosen, &action, nullptr) != 0) {
    char message[128];
    std::snprintf(message, sizeof message, "cannot install a handler for signal %d: %s", chosen, std::strerror(errno));
    report_error(ErrorCode::sampler_failed, message);
    return 0;
  }
  installed[chosen] = 1;
  return chosen;
}

// Slow path of a guard: the thread has no sampler for the current settings yet.
// Runs once per thread (and again after spanprof::start() changes the settings).
// The settings generation under which this thread was refused a sampler, so its
// later guards return at once instead of asking the kernel and reporting again.
inline thread_local std::uint64_t cpu_sampler_refused_generation = 0;

inline ThreadCpuSampler* make_cpu_sampler(const CpuSamplerSettings& settings) noexcept {
  if (cpu_sampler_refused_generation == settings.generation) return nullptr;
  // A thread that blocks the sample signal would queue real-time signals until the
  // kernel falls back to SIGIO, whose default action kills the process: such a
  // thread is not sampled at all (until spanprof::start() is called again).
  sigset_t blocked;
  if (::pthread_sigmask(SIG_BLOCK, nullptr, &blocked) == 0 && sigismember(&blocked, settings.signal_number) == 1) {
    cpu_sampler_refused_generation = settings.generation;
    char message[128];
    std::snprintf(message, sizeof message, "signal %d is blocked on this thread; its spans are not profiled",
                  settings.signal_number);
    report_error(ErrorCode::sampler_failed, message);
    return nullptr;
  }
  auto* words = new (std::nothrow) std::uint64_t[settings.buffer_words];
  if (!words) {
    report_error(ErrorCode::sampler_failed, "cannot allocate the per-thread sample buffer");
    return nullptr;
  }
  // Registered before the sampler's owner exists, so the counters outlive the
  // sampler at thread exit (thread_local destructors run in reverse order).
  ThreadCounters& counters = this_thread_counters();
  auto* sampler = new (std::nothrow) ThreadCpuSampler(settings, words, counters);
  if (!sampler) {
    delete[] words;
    report_error(ErrorCode::sampler_failed, "cannot allocate the per-thread sampler");
    return nullptr;
  }
  int perf_errno = 0;
  sampler->open_source(perf_errno);
  auto& list = cpu_sampler_list();
  if (perf_errno != 0) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(list.mutex);
      first = !list.reported_fallback;
      list.reported_fallback = true;
    }
    if (first || !sampler->has_source()) {
      char message[320];
      if (sampler->has_source()) {
        std::snprintf(message, sizeof message,
                      "perf_event_open refused (%s); sampling with POSIX CPU timers instead, which miss most "
                      "spans shorter than a few milliseconds",
                      std::strerror(perf_errno));
        report_error(ErrorCode::sampler_unavailable, message);
      } else {
        std::snprintf(message, sizeof message, "perf_event_open refused (%s) and no fallback allowed or possible",
                      std::strerror(perf_errno));
        report_error(ErrorCode::sampler_failed, message);
      }
    }
  } else if (!sampler->has_source()) {
    char message[160];
    std::snprintf(message, sizeof message, "cannot create a CPU timer for this thread: %s", std::strerror(errno));
    report_error(ErrorCode::sampler_failed, message);
  }
  cpu_sampler_owner.replace(sampler);
  return sampler;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_CAPTURE_CPU_SAMPLER_HPP_
