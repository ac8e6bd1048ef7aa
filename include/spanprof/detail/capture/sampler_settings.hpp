// What a thread's stack sampler is told by one spanprof::start(), and what its
// signal carries: the sampler's settings, the tags of the ticker's signals, the
// interrupted program counter, the clocks its records use.
#ifndef SPANPROF_DETAIL_CAPTURE_SAMPLER_SETTINGS_HPP_
#define SPANPROF_DETAIL_CAPTURE_SAMPLER_SETTINGS_HPP_

#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int max_stack_depth_limit = 256;

// Immutable sampler settings of one spanprof::start(); threads armed under an older
// generation rebuild their sampler at their next guard.
struct StackSamplerSettings {
  std::uint64_t generation{};
  CpuSampleSource source{};
  int signal_number{};
  std::int64_t period_ns{};       // mean CPU time between two CPU samples
  std::int64_t wall_period_ns{};  // mean wall time between two wall ticks
  int max_depth{};
  std::size_t buffer_words{};
  std::uint32_t idle_ticks_before_disarm{};
  bool watch_cpu{};  // Options::watch_cpu_ticks
};

// What one spanprof::start() asks of the process's continuous profile
// (process_sampler.hpp).
struct ContinuousSettings {
  bool on{};
  std::int64_t period_ns{};  // CPU time between two samples of a thread
  int max_depth{};
  ContinuousSpanLabels span_labels{};
  CpuSampleSource source{};  // which threads tick on a perf_event task clock (continuous_ticks.hpp)
};

inline std::int64_t monotonic_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (vDSO)
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The kernel's tick (1/HZ: 4 ms at HZ=250), the resolution of its coarse clocks:
// it looks at a thread's POSIX CPU timers only then. Read once per process.
inline std::int64_t kernel_tick_ns() noexcept {
  static const std::int64_t tick = [] {
    timespec resolution{};
    if (::clock_getres(CLOCK_MONOTONIC_COARSE, &resolution) != 0) return std::int64_t{4'000'000};
    const std::int64_t ns = static_cast<std::int64_t>(resolution.tv_sec) * 1'000'000'000 + resolution.tv_nsec;
    return ns > 0 && ns <= 100'000'000 ? ns : std::int64_t{4'000'000};
  }();
  return tick;
}

// The calling thread's CPU clock, in ns; -1 if it cannot be read (async-signal-safe).
inline std::int64_t this_thread_cpu_ns() noexcept {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The wall clock, for a profile's start time.
inline std::int64_t realtime_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// What a wall tick carries (sigqueue value): a tag, and the thread's wall
// generation when the ticker looked, so a tick that arrives after the span changed
// is dropped.
inline constexpr std::uint64_t wall_tick_tag = 0x5350'574Cull << 32;  // "SPWL"

// What the ticker's CPU tick carries: the POSIX timer's sampling point it saw the
// thread's CPU clock pass, which the kernel had not delivered yet (cpu_watch).
inline constexpr std::uint64_t cpu_tick_tag = 0x5350'4350ull << 32;  // "SPCP"

// What the ticker's lock tick carries: the slot of a wait on one of glibc's own
// locks it found the thread in (internal_lock_waits.hpp), whose stack to take.
inline constexpr std::uint64_t lock_tick_tag = 0x5350'4C4Bull << 32;  // "SPLK"

// Queues `signal_number` to thread `tid` of process `pid` with `value` (a tag and
// its data), as sigqueue does for a process: the handler tells its senders apart by
// the value. False when the thread is gone or its queue is full.
inline bool queue_signal_to_thread(pid_t pid, pid_t tid, int signal_number, std::uint64_t value) noexcept {
  siginfo_t info{};
  info.si_signo = signal_number;
  info.si_code = SI_QUEUE;
  info.si_pid = pid;
  info.si_uid = ::getuid();
  info.si_value.sival_ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(value));
  return ::syscall(SYS_rt_tgsigqueueinfo, pid, tid, signal_number, &info) == 0;
}

// A POSIX timer on `clock` whose expirations send `signal_number` with `value` to
// thread `tid` alone (SIGEV_THREAD_ID), whichever thread creates it.
inline bool create_thread_signal_timer(clockid_t clock, pid_t tid, int signal_number, void* value,
                                       timer_t& timer) noexcept {
  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = signal_number;
  event.sigev_notify_thread_id = tid;
  event.sigev_value.sival_ptr = value;
  return ::timer_create(clock, &event, &timer) == 0;
}

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

// Where the interrupted thread stands, as its code says.
struct SystemCallSite {
  // At a system call instruction or just after it: the thread was in a call
  // (blocked, or preempted at its return), where the kernel hands signals over on
  // the way back to user code.
  bool at_call = false;
  // And the call only waits (a sleep, a poll, a futex, an accept): it runs next to
  // no CPU of its own, so a CPU point passed by the time it returns passed before
  // the call. aarch64 keeps the call's number in x8; on x86-64 it is known where
  // the number is loaded just before the call, as libc's wrappers load it
  // (`mov $n, %eax`).
  bool waits = false;
};

// The system calls that only wait, by number.
constexpr bool is_wait_call(long number) noexcept {
#if defined(__x86_64__)
  switch (number) {
    case 7: case 23: case 34: case 35: case 43: case 61: case 128: case 130: case 202: case 208: case 230:
    case 232: case 247: case 270: case 271: case 281: case 288: case 333: case 441:
      return true;  // poll select pause nanosleep accept wait4 rt_sigtimedwait rt_sigsuspend futex
                    // io_getevents clock_nanosleep epoll_wait waitid pselect6 ppoll epoll_pwait accept4
                    // io_pgetevents epoll_pwait2
  }
#elif defined(__aarch64__)
  switch (number) {
    case 4: case 22: case 72: case 73: case 95: case 98: case 101: case 115: case 133: case 137: case 202:
    case 242: case 260: case 292: case 441:
      return true;  // io_getevents epoll_pwait pselect6 ppoll waitid futex nanosleep clock_nanosleep
                    // rt_sigsuspend rt_sigtimedwait accept accept4 wait4 io_pgetevents epoll_pwait2
  }
#endif
  (void)number;
  return false;
}

// The code is read with process_vm_readv, which fails where a plain read would
// fault (a page before the pc that is not mapped, execute-only code): then not at a
// call, as far as the handler can tell.
inline SystemCallSite system_call_site(const void* ucontext) noexcept {
  SystemCallSite site;
#if defined(__x86_64__) || defined(__aarch64__)
  const std::uintptr_t pc = interrupted_pc(ucontext);
  const auto read = [pc](unsigned char* code, std::size_t before, std::size_t size) {
    iovec local{code, size};
    iovec remote{reinterpret_cast<void*>(pc - before), size};
    return pc >= before && ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
  };
#if defined(__x86_64__)
  // [mov $n, %eax: b8 n32] [syscall: 0f 05] pc, or restarted: [b8 n32] pc [0f 05]
  unsigned char code[9];
  const bool whole = read(code, 7, sizeof code);
  if (!whole && !read(code + 5, 2, 4)) return site;
  const auto number_at = [&](std::size_t at) -> long {
    if (!whole || code[at] != 0xB8) return -1;
    std::uint32_t n;
    std::memcpy(&n, code + at + 1, 4);
    return static_cast<long>(n);
  };
  if (code[5] == 0x0F && code[6] == 0x05) {
    site.at_call = true;
    site.waits = is_wait_call(number_at(0));
  } else if (code[7] == 0x0F && code[8] == 0x05) {
    site.at_call = true;
    site.waits = is_wait_call(number_at(2));
  }
#else
  // [svc #0] pc, or restarted: pc [svc #0]. The call's number stays in x8.
  std::uint32_t code[2];
  if (!read(reinterpret_cast<unsigned char*>(code), 4, sizeof code)) return site;
  constexpr std::uint32_t svc = 0xD4000001;
  site.at_call = code[0] == svc || code[1] == svc;
  site.waits = site.at_call && is_wait_call(static_cast<long>(static_cast<const ucontext_t*>(ucontext)->uc_mcontext.regs[8]));
#endif
#else
  (void)ucontext;
#endif
  return site;
}

// The interrupted code's return-value register holds -EINTR: at a system call
// (system_call_site), the call was a wait a handled signal cut short (nanosleep,
// poll, epoll_wait return so even with SA_RESTART). Elsewhere it means nothing.
inline bool result_is_eintr(const void* ucontext) noexcept {
  const auto* uc = static_cast<const ucontext_t*>(ucontext);
#if defined(__x86_64__)
  return static_cast<long long>(uc->uc_mcontext.gregs[REG_RAX]) == -EINTR;
#elif defined(__aarch64__)
  return static_cast<long long>(uc->uc_mcontext.regs[0]) == -EINTR;
#else
  (void)uc;
  return false;
#endif
}

// The sample signal whose handler the host replaced (0: none). Samplers on it
// are not armed again; the next spanprof::start() picks another signal.
SPANPROF_API inline std::atomic<int>& sample_signal_lost() noexcept {
  static std::atomic<int> lost{0};
  return lost;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_SAMPLER_SETTINGS_HPP_
