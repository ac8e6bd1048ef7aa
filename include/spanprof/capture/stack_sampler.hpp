// The sampling engine's per-thread half: a CPU-time source that signals only its
// own thread, a signal handler that records the stack of the thread's active span
// on a CPU tick or a wall tick (from the wall ticker, wall_ticker.hpp), and the
// per-thread sample log the guard reads back.
//
// Why it is shaped like this (see docs/engines.md, docs/wall.md):
//  * A sampler is armed once per thread and left running; a guard only publishes
//    its span in a thread-local pointer. Opening a guard then costs nanoseconds, and
//    sampling continues across spans, so short spans are sampled without bias.
//  * The CPU periods are drawn at random (exponential around the mean), so a
//    periodic workload cannot alias with the sampling and shift samples into or out
//    of its spans.
//  * The signal is a real-time signal, not SIGPROF: SIGPROF belongs to gperftools,
//    whose profiler stops gathering samples when someone else handles it.
//  * The handler is async-signal-safe: it touches only this thread's preallocated
//    log, lock-free atomics and a stack walker that takes no lock
//    (capture/stack_walker.hpp). No malloc, lock or stdio.
//  * Wall samples are weighted by the wall time since the thread's previous one,
//    measured on the thread itself, so a lost or dropped tick loses detail, never
//    time; the ticker only decides when to look, and confirms without a signal that
//    a blocked thread is still where its last sample found it.
#ifndef SPANPROF_CAPTURE_STACK_SAMPLER_HPP_
#define SPANPROF_CAPTURE_STACK_SAMPLER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/base/counters.hpp>
#include <spanprof/base/loader_lock_gate.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/capture/sample_records.hpp>
#include <spanprof/capture/stack_walker.hpp>
#include <spanprof/profile/profile.hpp>

// Compiled out with the SDK: nothing here may reach gperftools then.
#if SPANPROF_ENABLED

#include <gperftools/profiler.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
  ProfileKinds kinds;                 // what this span profiles: cpu and/or wall
  ProfileKinds recorded;              // kinds, and what the open spans around it profile
  std::size_t log_start = 0;          // where this span's samples begin in the log
  std::uint64_t dropped_at_start = 0;
  // Set (by another thread, possibly) when the span ended elsewhere: its samples
  // are no longer recorded. Null for a guard that can only end here.
  const std::atomic<bool>* stop = nullptr;
};

// Immutable sampler settings of one spanprof::start(); threads armed under an older
// generation rebuild their sampler at their next guard.
struct StackSamplerSettings {
  std::uint64_t generation = 0;
  CpuSampleSource source = CpuSampleSource::automatic;
  int signal_number = 0;
  std::int64_t period_ns = 10'000'000;       // mean CPU time between two CPU samples
  std::int64_t wall_period_ns = 10'000'000;  // mean wall time between two wall ticks
  int max_depth = 64;
  std::size_t buffer_words = 0;
  std::uint32_t idle_ticks_before_disarm = 200;
};

inline std::int64_t monotonic_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (vDSO)
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A random interval with mean `mean_ns`: half the mean, plus an exponentially
// distributed rest. A random period gives a periodic workload nothing to alias with
// (fixed periods shift its samples into or out of its spans); the fixed half keeps
// the sample rate bounded, so a signal handler slower than a short draw cannot
// fall behind and pile up queued signals. From a per-thread xorshift state;
// async-signal-safe (log() touches no shared state).
inline std::int64_t random_interval_ns(std::uint64_t& state, std::int64_t mean_ns) noexcept {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  const double unit = (static_cast<double>(state >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0, 1)
  const double half = static_cast<double>(mean_ns) / 2;
  const double draw = half - std::log(unit) * half;
  const double high = static_cast<double>(mean_ns) * 16;  // the tail beyond holds a 1e-13 share
  return static_cast<std::int64_t>(draw > high ? high : draw);
}

// What a wall tick carries (sigqueue value): a tag, and the thread's wall
// generation when the ticker looked, so a tick that arrives after the span changed
// is dropped.
inline constexpr std::uint64_t wall_tick_tag = 0x5350'574Cull << 32;  // "SPWL"

// Where a thread is blocked, as /proc/self/task/<tid>/syscall tells: its user
// stack pointer and instruction pointer. The same site at two ticks, with
// little CPU time between them, is the same wait.
struct BlockedSite {
  std::uint64_t sp = 0;
  std::uint64_t pc = 0;
  friend bool operator==(const BlockedSite& a, const BlockedSite& b) noexcept { return a.sp == b.sp && a.pc == b.pc; }
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

// The sample signal whose handler the host replaced (0: none). Samplers on it
// are not armed again; the next spanprof::start() picks another signal.
SPANPROF_API inline std::atomic<int>& sample_signal_lost() noexcept {
  static std::atomic<int> lost{0};
  return lost;
}

class ThreadStackSampler {
 public:
  // `counters` is the creating thread's block in the counter registry: the signal
  // handler reaches it through this pointer, never through thread_local storage.
  ThreadStackSampler(const StackSamplerSettings& settings, std::uint64_t* words, ThreadCounters& counters) noexcept
      : settings_(settings),
        words_(words),
        counters_(&counters),
        tid_(static_cast<pid_t>(::syscall(SYS_gettid))),
#if SPANPROF_HAS_CFI_WALKER
        stack_top_(this_thread_stack_top()),
#endif
        pid_(::getpid()),
        random_(0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(tid_) << 32) ^
                static_cast<std::uint64_t>(monotonic_now_ns())) {}

  ThreadStackSampler(const ThreadStackSampler&) = delete;
  ThreadStackSampler& operator=(const ThreadStackSampler&) = delete;

  ~ThreadStackSampler() {
    if (perf_fd_ >= 0) {
      ::ioctl(perf_fd_, PERF_EVENT_IOC_DISABLE, 0);
      ::close(perf_fd_);
    }
    if (has_timer_) ::timer_delete(timer_);
    if (ticker_.syscall_fd >= 0) ::close(ticker_.syscall_fd);
    delete[] words_;
  }

  // Picks and creates the sampling source for this thread (not armed yet).
  // `perf_errno` receives the reason perf_event was refused, if it was.
  // `automatic` is the POSIX CPU timer: a perf event costs its thread at every
  // context switch, even between spans (docs/cost.md). A perf_event the kernel
  // refuses falls back to the timer.
  CpuSampleSource open_source(int& perf_errno) noexcept {
    perf_errno = 0;
    if (settings_.source == CpuSampleSource::perf_event) {
      if (open_perf_event()) return source_ = CpuSampleSource::perf_event;
      perf_errno = errno == 0 ? EINVAL : errno;
    }
    if (open_posix_timer()) return source_ = CpuSampleSource::posix_timer;
    if (settings_.source == CpuSampleSource::automatic && open_perf_event()) return source_ = CpuSampleSource::perf_event;
    return source_ = CpuSampleSource::automatic;  // nothing could be armed
  }

  bool has_source() const noexcept { return source_ != CpuSampleSource::automatic; }

  // In a forked child, on a sampler the parent made: its perf event is the
  // parent's too (disabling it would stop the parent's samples), its timer does
  // not exist here, and its thread ids are the parent's. Closes the child's copies
  // and keeps the log, which an open guard on the forking thread still reads.
  void forget_source_after_fork() noexcept {
    if (perf_fd_ >= 0) ::close(perf_fd_);
    perf_fd_ = -1;
    has_timer_ = false;
    if (ticker_.syscall_fd >= 0) ::close(ticker_.syscall_fd);
    ticker_.syscall_fd = -1;
    source_ = CpuSampleSource::automatic;
    armed_.store(false, std::memory_order_relaxed);
    registry_prev = registry_next = nullptr;
  }
  bool in_wall_span() const noexcept { return wall_spans_.load(std::memory_order_relaxed) != 0; }
  CpuSampleSource source() const noexcept { return source_; }
  const StackSamplerSettings& settings() const noexcept { return settings_; }
  bool armed() const noexcept { return armed_.load(std::memory_order_relaxed); }

  // Starts delivering samples to this thread. Called on the request thread, only
  // when the sampler is not armed (first guard, or after an idle disarm).
  bool arm() noexcept {
    if (SPANPROF_UNLIKELY(signal_blocked_.load(std::memory_order_relaxed) ||
                          sample_signal_lost().load(std::memory_order_relaxed) == settings_.signal_number)) {
      armed_.store(false, std::memory_order_relaxed);
      return false;
    }
    idle_ticks_.store(0, std::memory_order_relaxed);
    cpu_mark_ = 0;  // the periods start afresh
    cpu_period_ = 0;
    bool ok = false;
    if (perf_fd_ >= 0) {
      ok = schedule_next_cpu_tick() && ::ioctl(perf_fd_, PERF_EVENT_IOC_ENABLE, 0) == 0;
    } else if (has_timer_) {
      ok = schedule_next_cpu_tick();
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
    span.recorded = span.parent != nullptr ? span.kinds | span.parent->recorded : span.kinds;
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
    wall_busy_ = true;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    used_.store(0, std::memory_order_relaxed);
    last_wall_record_ = no_wall_record;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    wall_busy_ = false;
  }

  // ---- wall spans, on this thread -------------------------------------------------

  // A wall-profiled span opens. `now_ns` is CLOCK_MONOTONIC. Returns true when this
  // thread had no wall span open before (the ticker then has one more thread).
  bool wall_span_opened(std::int64_t now_ns) noexcept {
    begin_wall_update();
    const std::uint32_t open = wall_spans_.load(std::memory_order_relaxed);
    // The time so far belongs to the stack sampled last (an outer wall span's).
    if (open != 0) settle_wall_time(now_ns);
    else wall_accounted_ns_ = now_ns;
    wall_spans_.store(open + 1, std::memory_order_release);
    end_wall_update();
    return open == 0;
  }

  // A wall-profiled span closes: the time since the last sample goes to the stack
  // sampled last. Returns true when it was the thread's last open wall span.
  bool wall_span_closed(std::int64_t now_ns) noexcept {
    begin_wall_update();
    settle_wall_time(now_ns);
    const std::uint32_t open = wall_spans_.load(std::memory_order_relaxed);
    wall_spans_.store(open > 0 ? open - 1 : 0, std::memory_order_release);
    end_wall_update();
    return open == 1;
  }

  // ---- signal handler ----------------------------------------------------------

  void on_signal(const siginfo_t* info, const void* ucontext) noexcept {
    // Queued while the thread blocked the signal: they would all land on the point
    // where it unblocks, so none is recorded.
    if (SPANPROF_UNLIKELY(signal_blocked_.load(std::memory_order_relaxed))) return;
    if (info->si_code == SI_QUEUE && info->si_pid == pid_) {
      const auto value = reinterpret_cast<std::uintptr_t>(info->si_value.sival_ptr);
      if ((value & ~std::uint64_t{0xFFFF'FFFF}) == wall_tick_tag) on_wall_tick(static_cast<std::uint32_t>(value), ucontext);
      return;
    }
    if (perf_fd_ >= 0) {
      if (info->si_fd != perf_fd_) return;  // not our event: someone else's signal
    } else if (has_timer_) {
      if (info->si_code != SI_TIMER) return;
    } else {
      return;
    }
    cpu_ticks_handled_.store(cpu_ticks_handled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // The next period starts now, before the unwinding: the CPU time this handler
    // takes counts toward it. (Drawn at the end, each sample's handler time would
    // go unsampled: -9% at 1 kHz, -30% at 4 kHz, measured.)
    const ActiveSpan* active = active_.load(std::memory_order_relaxed);
    if (active == nullptr) {
      const auto idle = idle_ticks_.load(std::memory_order_relaxed) + 1;
      idle_ticks_.store(idle, std::memory_order_relaxed);
      if (idle >= settings_.idle_ticks_before_disarm) disarm();
      else schedule_next_cpu_tick();
      return;
    }
    std::uint64_t periods = 0;
    schedule_next_cpu_tick(&periods);
    if (periods == 0) return;  // a timer signal before its expiry: not a sample
    // A span that ended on another thread is still on this thread's stack until the
    // thread pops it; it records nothing, and it is not idleness either.
    if (active->stop != nullptr && active->stop->load(std::memory_order_relaxed)) return;
    idle_ticks_.store(0, std::memory_order_relaxed);
    if (active->recorded.contains(ProfileKind::cpu)) record_sample(periods, ucontext);
  }

  // ---- the watchdog's side (the worker's thread, under the sampler list's mutex) ----

  // True when this armed thread has run four CPU periods without taking a tick,
  // twice in a row, blocking the sample signal both times: the sampler is then
  // disarmed for good. Left armed, the real-time signals queued against the mask
  // would overflow into SIGIO, whose default action kills the process. Twice,
  // because a runtime may block every signal for a moment while it runs the
  // handlers it deferred (ThreadSanitizer does): one look can catch that moment
  // after ticks that were only late; a second window without a tick cannot.
  bool refuse_if_signal_blocked() noexcept {
    if (!armed() || signal_blocked_.load(std::memory_order_relaxed)) {
      watch_cpu_ns_ = -1;
      return false;
    }
    const std::int64_t cpu = thread_cpu_ns();
    const std::uint64_t ticks = cpu_ticks_handled_.load(std::memory_order_relaxed);
    if (cpu < 0) return false;
    if (watch_cpu_ns_ < 0 || ticks != watch_ticks_ || cpu - watch_cpu_ns_ < 4 * settings_.period_ns) {
      if (watch_cpu_ns_ < 0 || ticks != watch_ticks_) {
        watch_cpu_ns_ = cpu;
        watch_ticks_ = ticks;
        watch_saw_blocked_ = false;
      }
      return false;
    }
    watch_cpu_ns_ = cpu;
    const bool seen_before = watch_saw_blocked_;
    watch_saw_blocked_ = blocks_sample_signal();
    if (!watch_saw_blocked_ || !seen_before) return false;
    signal_blocked_.store(true, std::memory_order_relaxed);
    disarm();
    return true;
  }
  pid_t thread_id() const noexcept { return tid_; }

  // ---- the wall ticker's side (its thread only, under the sampler list's mutex) ----

  // One wall tick for this thread: nothing when it has no wall span open; when it is
  // still blocked where its last wall sample found it, a confirmation and no signal
  // (a signal would make an interrupted nanosleep, poll or epoll_wait return
  // EINTR); otherwise a signal, whose handler records the stack. True when a
  // signal was sent.
  enum class WallTick : std::uint8_t { none, confirmed, signalled, failed };
  WallTick wall_tick(std::int64_t now_ns, std::int64_t mean_period_ns) noexcept {
    if (signal_blocked_.load(std::memory_order_relaxed) ||
        sample_signal_lost().load(std::memory_order_relaxed) == settings_.signal_number)
      return WallTick::none;
    if (wall_spans_.load(std::memory_order_acquire) == 0) {
      ticker_.sampled_blocked = false;
      return WallTick::none;
    }
    const std::uint32_t generation = wall_generation_.load(std::memory_order_acquire);
    BlockedSite site;
    const bool blocked = read_blocked_site(site);
    const std::int64_t cpu_ns = thread_cpu_ns();
    // "Still": almost no CPU time since the last sample found it blocked, and
    // blocked at the same site now — or running for a moment between two waits at
    // it (a loop around a short sleep counts as one wait, as in async-profiler's
    // check).
    const std::int64_t still_cpu_ns = std::min<std::int64_t>(500'000, mean_period_ns / 2);
    if ((!blocked || site == ticker_.site) && ticker_.sampled_blocked && ticker_.generation == generation &&
        cpu_ns >= 0 && cpu_ns - ticker_.cpu_ns < still_cpu_ns) {
      const auto micros = static_cast<std::uint64_t>(now_ns / 1000) & ((std::uint64_t{1} << 48) - 1);
      wall_confirmed_.store((static_cast<std::uint64_t>(generation & 0xFFFF) << 48) | micros,
                            std::memory_order_release);
      ticker_.cpu_ns = cpu_ns;
      return WallTick::confirmed;
    }
    siginfo_t info{};
    info.si_signo = settings_.signal_number;
    info.si_code = SI_QUEUE;
    info.si_pid = pid_;
    info.si_uid = ::getuid();
    info.si_value.sival_ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(wall_tick_tag | generation));
    if (::syscall(SYS_rt_tgsigqueueinfo, pid_, tid_, settings_.signal_number, &info) != 0) {
      ticker_.sampled_blocked = false;
      return WallTick::failed;  // the thread exited, or its signal queue is full
    }
    ticker_.sampled_blocked = blocked;
    ticker_.site = site;
    ticker_.generation = generation;
    ticker_.cpu_ns = cpu_ns;
    return WallTick::signalled;
  }

 private:
  // The interrupted stack, its interrupted instruction first; 0 frames when the
  // walk must be skipped. The handler's own frames are never part of it.
  int walk_interrupted_stack(const void* ucontext, void** trace) noexcept {
#if SPANPROF_HAS_CFI_WALKER
    // Call frame information, read without a lock (capture/stack_walker.hpp).
    return walk_stack(registers_from_ucontext(ucontext), stack_top_, trace, settings_.max_depth);
#else
    // gperftools' unwinder. Depending on the unwind method the trace begins with
    // this handler and the kernel's signal trampoline (libunwind) or directly at
    // the interrupted instruction (frame pointers): find the interrupted PC in the
    // first frames and start there. The walk takes the loader lock: not while a
    // fork is under way (base/loader_lock_gate.hpp).
    constexpr int handler_frames_searched = 8;
    void* raw[max_stack_depth_limit + handler_frames_searched];
    if (!loader_lock_gate().enter()) return 0;
    const int n = ProfilerGetStackTrace(raw, settings_.max_depth + handler_frames_searched, 0, ucontext);
    loader_lock_gate().leave();
    const std::uintptr_t pc = interrupted_pc(ucontext);
    int first = -1;
    for (int i = 0; i < n && i < handler_frames_searched; ++i) {
      if (reinterpret_cast<std::uintptr_t>(raw[i]) == pc) {
        first = i;
        break;
      }
    }
    // PC not in the trace (an unwinder that stops at the signal frame): keep the
    // PC alone rather than a stack that starts inside spanprof.
    const int callers_from = first >= 0 ? first + 1 : n;
    int depth = 1 + std::max(0, n - callers_from);
    if (depth > settings_.max_depth) depth = settings_.max_depth;
    trace[0] = reinterpret_cast<void*>(pc);
    for (int i = 1; i < depth; ++i) trace[i] = raw[callers_from + i - 1];
    return depth;
#endif
  }

  // Records the interrupted stack; returns the record's offset in the log, or
  // no_wall_record when the log is full (or the walk was skipped).
  std::size_t record_sample(std::uint64_t weight, const void* ucontext) noexcept {
    const bool wall = (weight & wall_record_tag) != 0;
    void* trace[max_stack_depth_limit];
    const int depth = walk_interrupted_stack(ucontext, trace);
    const std::size_t used = used_.load(std::memory_order_relaxed);
    const std::size_t need = stack_record_words(depth);
    if (depth <= 0 || used + need > settings_.buffer_words) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      counters_->add(wall ? Counter::wall_samples_dropped : Counter::cpu_samples_dropped, 1);
      return no_wall_record;
    }
    write_stack_record(words_ + used, weight, reinterpret_cast<std::uintptr_t>(trace[0]), trace + 1, depth);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    used_.store(used + need, std::memory_order_relaxed);
    // A CPU record stands for `weight` samples, as the profile's sample count says.
    if (wall) counters_->add(Counter::wall_samples_captured, 1);
    else counters_->add(Counter::cpu_samples_captured, weight);
    return used;
  }

  // ---- wall accounting (this thread: its handler, and its guards between
  // begin_wall_update() and end_wall_update(), when the handler keeps out) ----

  void on_wall_tick(std::uint32_t generation, const void* ucontext) noexcept {
    if (wall_busy_ || generation != wall_generation_.load(std::memory_order_relaxed)) return;
    const ActiveSpan* active = active_.load(std::memory_order_relaxed);
    if (active == nullptr || !active->recorded.contains(ProfileKind::wall)) return;
    if (active->stop != nullptr && active->stop->load(std::memory_order_relaxed)) return;
    const std::int64_t now = monotonic_now_ns();
    apply_wall_confirmation();
    const std::int64_t elapsed = now > wall_accounted_ns_ ? now - wall_accounted_ns_ : 0;
    const std::size_t at = record_sample(wall_record_tag | static_cast<std::uint64_t>(elapsed), ucontext);
    // A full log keeps the time unaccounted: the next sample (or the close) gets it.
    if (at == no_wall_record) return;
    last_wall_record_ = at;
    last_wall_generation_ = generation;
    wall_accounted_ns_ = now;
  }

  // The ticker saw the thread still blocked where its last wall sample was taken,
  // up to a time: that time is the last sample's.
  void apply_wall_confirmation() noexcept {
    const std::uint64_t confirmed = wall_confirmed_.load(std::memory_order_acquire);
    // Only for the sample the ticker's last signal took (its generation is now's).
    const std::uint64_t generation = wall_generation_.load(std::memory_order_relaxed) & 0xFFFF;
    if ((confirmed >> 48) != generation || (last_wall_generation_ & 0xFFFF) != generation) return;
    const std::int64_t until = static_cast<std::int64_t>(confirmed & ((std::uint64_t{1} << 48) - 1)) * 1000;
    // The µs clock wraps every 8.9 years of uptime: compare in its range.
    const std::int64_t accounted_us = (wall_accounted_ns_ / 1000) & ((std::int64_t{1} << 48) - 1);
    const std::int64_t gained = until - accounted_us * 1000;
    if (gained <= 0 || last_wall_record_ == no_wall_record) return;
    add_wall_time(words_ + last_wall_record_, static_cast<std::uint64_t>(gained));
    wall_accounted_ns_ += gained;
  }

  // The time up to `now_ns` goes to the stack sampled last (none: lost, rare: a
  // span shorter than a tick or a full log).
  void settle_wall_time(std::int64_t now_ns) noexcept {
    apply_wall_confirmation();
    if (last_wall_record_ != no_wall_record && now_ns > wall_accounted_ns_)
      add_wall_time(words_ + last_wall_record_, static_cast<std::uint64_t>(now_ns - wall_accounted_ns_));
    if (now_ns > wall_accounted_ns_) wall_accounted_ns_ = now_ns;
  }

  // The handler keeps out of the wall accounting while the thread itself changes
  // it (a tick then is dropped: it loses detail, not time). Bumping the generation
  // voids the ticks and confirmations the ticker sent for the spans before.
  void begin_wall_update() noexcept {
    wall_busy_ = true;
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  void end_wall_update() noexcept {
    wall_generation_.store(wall_generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    wall_busy_ = false;
  }

  // ---- CPU periods ----

  // Sets the CPU time until the next CPU tick (async-signal-safe). `periods`, when
  // given, receives how many sampling points the thread's CPU time passed since the
  // tick before: the weight of the sample being taken.
  bool schedule_next_cpu_tick(std::uint64_t* periods = nullptr) noexcept {
    if (perf_fd_ >= 0) {
      // The next tick is placed a random interval after the one that just fired,
      // not after this handler ran: the signal arrives tens of microseconds after
      // the overflow (~50 µs measured here), and restarting the period from the
      // handler would leave that time unsampled at every sample (-5% at 1 kHz).
      const std::int64_t draw = random_interval_ns(random_, settings_.period_ns);
      std::int64_t period = draw;
      std::uint64_t count = 0;  // the thread's task clock, ns
      if (::read(perf_fd_, &count, sizeof count) == static_cast<ssize_t>(sizeof count)) {
        if (cpu_period_ != 0) {
          const std::int64_t late = static_cast<std::int64_t>(count - cpu_mark_) - cpu_period_;
          // Not below a quarter of the mean: a period shorter than this handler would
          // queue signals faster than it takes them.
          const std::int64_t floor = std::max<std::int64_t>(settings_.period_ns / 4, 20'000);
          if (late > 0) period = std::max(draw - late, floor);
        }
        cpu_mark_ = count;
        cpu_period_ = period;
      } else {
        cpu_period_ = 0;
      }
      if (periods != nullptr) *periods = 1;
      std::uint64_t value = static_cast<std::uint64_t>(period);
      return ::ioctl(perf_fd_, PERF_EVENT_IOC_PERIOD, &value) == 0;
    }
    if (has_timer_) {
      // The kernel looks at CPU timers only on the scheduler tick (4 ms at
      // HZ=250), so the signal comes at the first tick after the sampling point,
      // and at more than 250 Hz several points fall between two ticks. Each point
      // the thread's CPU time has passed is one sample of the stack found now:
      // counted as such, samples x period stays the thread's CPU time at any rate.
      // The next point is drawn from the last one, never from the late signal.
      timespec now{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
      const std::int64_t now_ns = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
      std::uint64_t passed = 0;
      std::int64_t next = static_cast<std::int64_t>(cpu_mark_);
      if (cpu_mark_ == 0) {
        next = now_ns + random_interval_ns(random_, settings_.period_ns);  // armed afresh
      } else {
        constexpr std::uint64_t most_periods = 256;  // beyond: the thread ran with the signal held
        while (next <= now_ns && passed < most_periods) {
          ++passed;
          next += random_interval_ns(random_, settings_.period_ns);
        }
        if (next <= now_ns) next = now_ns + random_interval_ns(random_, settings_.period_ns);
      }
      if (periods != nullptr) *periods = passed;
      cpu_mark_ = static_cast<std::uint64_t>(next);
      itimerspec spec{};
      spec.it_value.tv_sec = next / 1'000'000'000;
      spec.it_value.tv_nsec = next % 1'000'000'000;
      return ::timer_settime(timer_, TIMER_ABSTIME, &spec, nullptr) == 0;
    }
    return false;
  }

  // ---- what the ticker reads about this thread ----

  // /proc/self/task/<tid>/syscall: "running", or "<nr> <6 args> <sp> <pc>" (nr -1
  // when blocked outside a system call). False when running or unreadable.
  bool read_blocked_site(BlockedSite& site) noexcept {
    if (ticker_.syscall_fd < 0) {
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(tid_));
      ticker_.syscall_fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (ticker_.syscall_fd < 0) return false;
    }
    char text[256];
    const ssize_t n = ::pread(ticker_.syscall_fd, text, sizeof text - 1, 0);
    if (n <= 0) return false;
    text[n] = '\0';
    if (text[0] == 'r') return false;  // "running"
    // The last two fields.
    std::uint64_t fields[2] = {0, 0};
    int found = 0;
    const char* end = text + n;
    while (end > text && (end[-1] == '\n' || end[-1] == ' ')) --end;
    for (int f = 1; f >= 0; --f) {
      const char* start = end;
      while (start > text && start[-1] != ' ') --start;
      if (start == end) break;
      std::uint64_t value = 0;
      const char* c = start;
      if (end - c > 2 && c[0] == '0' && c[1] == 'x') c += 2;
      for (; c < end; ++c) {
        const char d = *c;
        const int digit = d >= '0' && d <= '9' ? d - '0' : d >= 'a' && d <= 'f' ? d - 'a' + 10 : -1;
        if (digit < 0) return false;
        value = value * 16 + static_cast<std::uint64_t>(digit);
      }
      fields[f] = value;
      ++found;
      end = start > text ? start - 1 : start;
    }
    if (found != 2) return false;
    site.sp = fields[0];
    site.pc = fields[1];
    return true;
  }

  // The thread's CPU time, read from another thread (-1 when unreadable).
  std::int64_t thread_cpu_ns() const noexcept {
    // Linux's per-thread CPU clock id, as glibc's pthread_getcpuclockid makes it.
    const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid_) << 3) | 6);
    timespec ts{};
    if (::clock_gettime(clock, &ts) != 0) return -1;
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  // SigBlk in /proc/self/task/<tid>/status has the sample signal's bit.
  bool blocks_sample_signal() const noexcept {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/status", static_cast<int>(tid_));
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
    const int bit = settings_.signal_number - 1;
    return bit >= 0 && bit < 64 && ((mask >> bit) & 1) != 0;
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

  StackSamplerSettings settings_;
  std::uint64_t* words_;
  ThreadCounters* counters_;
  pid_t tid_;
#if SPANPROF_HAS_CFI_WALKER
  std::uint64_t stack_top_;  // the walker reads the stack up to here without a check
#endif
  int perf_fd_ = -1;
  timer_t timer_{};
  bool has_timer_ = false;
  CpuSampleSource source_ = CpuSampleSource::automatic;
  pid_t pid_;
  std::uint64_t random_;        // the handler's: the next CPU period
  std::uint64_t cpu_mark_ = 0;  // perf: the task clock when the period was last set; timer: its next expiry
  std::int64_t cpu_period_ = 0; // perf: that period (0: unknown, after a disarm)
  std::atomic<ActiveSpan*> active_{nullptr};
  std::atomic<std::size_t> used_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<bool> armed_{false};
  std::atomic<std::uint32_t> idle_ticks_{0};
  std::atomic<std::uint64_t> cpu_ticks_handled_{0};  // written by the handler
  std::atomic<bool> signal_blocked_{false};          // set by the watchdog: never armed again
  std::int64_t watch_cpu_ns_ = -1;                   // the watchdog's: thread CPU time at its mark
  std::uint64_t watch_ticks_ = 0;                    // the watchdog's: ticks handled at its mark
  bool watch_saw_blocked_ = false;                   // the watchdog's: blocked at its last window

  // Wall accounting. Written by this thread only (its guards and its handler).
  static constexpr std::size_t no_wall_record = ~std::size_t{0};
  std::atomic<std::uint32_t> wall_spans_{0};       // open wall spans (the ticker reads it)
  std::atomic<std::uint32_t> wall_generation_{0};  // bumped at every wall span open and close
  volatile bool wall_busy_ = false;                // the thread is changing the accounting
  std::int64_t wall_accounted_ns_ = 0;             // wall time given to samples up to here
  std::size_t last_wall_record_ = no_wall_record;  // the newest wall record in the log
  std::uint32_t last_wall_generation_ = 0;         // the generation it was taken under
  // The ticker's confirmation: generation (16 bits) | the µs until which the thread
  // was seen still blocked where its last wall sample found it.
  std::atomic<std::uint64_t> wall_confirmed_{0};
  // The ticker's own view of this thread (its thread, under the list's mutex).
  struct TickerView {
    int syscall_fd = -1;
    bool sampled_blocked = false;  // the last signal found the thread blocked at `site`
    BlockedSite site;
    std::uint32_t generation = 0;
    std::int64_t cpu_ns = 0;
  } ticker_;

 public:
  ThreadStackSampler* registry_prev = nullptr;  // linked under StackSamplerList's mutex
  ThreadStackSampler* registry_next = nullptr;
};

// The handler reads this pointer only: it is trivially destructible, so reading it
// from a signal handler never runs a TLS constructor.
inline thread_local ThreadStackSampler* current_stack_sampler = nullptr;

inline void on_sample_signal(int, siginfo_t* info, void* ucontext) noexcept {
  const int saved_errno = errno;
  if (ThreadStackSampler* sampler = current_stack_sampler) sampler->on_signal(info, ucontext);
  errno = saved_errno;
}

// All live CPU samplers, so shutdown() can disarm them and stats() can count the
// armed ones. (What they count lives in the counter registry.)
struct StackSamplerList {
  std::mutex mutex;
  ThreadStackSampler* head = nullptr;
  CpuSampleSource last_source = CpuSampleSource::automatic;
  bool reported_fallback = false;

  void add(ThreadStackSampler* sampler) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    sampler->registry_next = head;
    if (head) head->registry_prev = sampler;
    head = sampler;
    last_source = sampler->source();
  }

  void remove(ThreadStackSampler* sampler) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    if (sampler->registry_prev) sampler->registry_prev->registry_next = sampler->registry_next;
    else if (head == sampler) head = sampler->registry_next;
    if (sampler->registry_next) sampler->registry_next->registry_prev = sampler->registry_prev;
  }

  // In a forked child (one thread, the mutex held since before the fork): the
  // parent's samplers are left to the parent, and the list starts empty.
  void reset_after_fork() noexcept {
    for (ThreadStackSampler* s = head; s != nullptr;) {
      ThreadStackSampler* next = s->registry_next;
      s->forget_source_after_fork();
      s = next;
    }
    head = nullptr;
    new (&mutex) std::mutex();
  }
};

SPANPROF_API inline StackSamplerList& stack_sampler_list() noexcept {
  static StackSamplerList list;
  return list;
}

// Owns this thread's sampler; its destructor runs at thread exit. The handler
// never sees it, only current_stack_sampler.
struct ThreadStackSamplerOwner {
  ThreadStackSampler* sampler = nullptr;

  void replace(ThreadStackSampler* next) noexcept {
    ThreadStackSampler* old = sampler;
    current_stack_sampler = nullptr;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (old) {
      stack_sampler_list().remove(old);
      delete old;  // disables the source before freeing the log
    }
    sampler = next;
    if (next) stack_sampler_list().add(next);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    current_stack_sampler = next;
  }

  ~ThreadStackSamplerOwner() { replace(nullptr); }
};

inline thread_local ThreadStackSamplerOwner stack_sampler_owner;

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

inline int install_sample_signal_handler(int wanted) noexcept {
  SampleSignalInstallation& installation = sample_signal_installation();
  int (&installed)[65] = installation.installed;
  std::lock_guard<std::mutex> lock(installation.mutex);
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
    std::snprintf(message, sizeof message, "cannot install a handler for signal %d: %s", chosen, std::strerror(errno));
    report_error(ErrorCode::sampler_failed, message);
    return 0;
  }
  installed[chosen] = 1;
  return chosen;
}

// Run by the worker about every 100 ms. Notices a host that replaced the sample
// signal's handler (its handler would get spanprof's signals, and spanprof none)
// or a thread that blocked the signal after its sampler was armed; stops sampling
// there, and reports each once.
inline void watch_sample_signal(int signal_number) noexcept {
  if (signal_number <= 0 || signal_number >= 65) return;
  StackSamplerList& list = stack_sampler_list();
  struct sigaction current {};
  if (::sigaction(signal_number, nullptr, &current) == 0 &&
      !((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_sample_signal)) {
    if (sample_signal_lost().exchange(signal_number, std::memory_order_relaxed) == signal_number) return;
    {
      SampleSignalInstallation& installation = sample_signal_installation();
      std::lock_guard<std::mutex> lock(installation.mutex);
      installation.installed[signal_number] = 0;  // the host's now: the next start() picks another
    }
    {
      std::lock_guard<std::mutex> lock(list.mutex);
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
  int refused = 0;
  pid_t thread = 0;
  {
    std::lock_guard<std::mutex> lock(list.mutex);
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

// Slow path of a guard: the thread has no sampler for the current settings yet.
// Runs once per thread (and again after spanprof::start() changes the settings).
// The settings generation under which this thread was refused a sampler, so its
// later guards return at once instead of asking the kernel and reporting again.
inline thread_local std::uint64_t stack_sampler_refused_generation = 0;

inline ThreadStackSampler* make_stack_sampler(const StackSamplerSettings& settings) noexcept {
  if (stack_sampler_refused_generation == settings.generation) return nullptr;
  // A thread that blocks the sample signal would queue real-time signals until the
  // kernel falls back to SIGIO, whose default action kills the process: such a
  // thread is not sampled at all (until spanprof::start() is called again).
  sigset_t blocked;
  if (::pthread_sigmask(SIG_BLOCK, nullptr, &blocked) == 0 && sigismember(&blocked, settings.signal_number) == 1) {
    stack_sampler_refused_generation = settings.generation;
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
  auto* sampler = new (std::nothrow) ThreadStackSampler(settings, words, counters);
  if (!sampler) {
    delete[] words;
    report_error(ErrorCode::sampler_failed, "cannot allocate the per-thread sampler");
    return nullptr;
  }
  int perf_errno = 0;
  sampler->open_source(perf_errno);
  const int timer_errno = errno;
  if (!sampler->has_source()) {
    char message[160];
    std::snprintf(message, sizeof message, "cannot create a CPU timer for this thread: %s", std::strerror(timer_errno));
    report_error(ErrorCode::sampler_failed, message);
  } else if (perf_errno != 0) {
    auto& list = stack_sampler_list();
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(list.mutex);
      first = !list.reported_fallback;
      list.reported_fallback = true;
    }
    if (first) {
      char message[240];
      std::snprintf(message, sizeof message,
                    "perf_event_open refused (%s); sampling with POSIX CPU timers instead, which the kernel checks "
                    "only on the scheduler tick",
                    std::strerror(perf_errno));
      report_error(ErrorCode::sampler_unavailable, message);
    }
  }
  stack_sampler_owner.replace(sampler);
  return sampler;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_CAPTURE_STACK_SAMPLER_HPP_
