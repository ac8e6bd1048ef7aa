// spanprof's own threads: their names, as `top -H`, `ps -L`, gdb and perf show
// them (a user who sees a thread of the host's process busy can tell that it is
// spanprof's, and which part; at most 15 characters, the kernel's limit), and
// the signals they leave to the host's threads.
#ifndef SPANPROF_DETAIL_BASE_THREAD_NAME_HPP_
#define SPANPROF_DETAIL_BASE_THREAD_NAME_HPP_

#include <spanprof/config.hpp>

#include <csignal>

#include <pthread.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// spanprof's threads, by what they do.
inline constexpr const char* merger_thread_name = "spanprof-merge";  // takes what request threads hand over
inline constexpr const char* sender_thread_name = "spanprof-send";   // symbolizes, encodes, uploads
inline constexpr const char* wall_thread_name = "spanprof-wall";     // ticks the wall-clock samples

// Called first by each of spanprof's threads: names it (best effort: a name that
// does not take leaves the thread as it was) and blocks every signal in it. A
// signal sent to the process (the host's own SIGPROF profiler, SIGTERM, SIGCHLD)
// goes to a thread that does not block it; one of spanprof's, asleep on a busy
// machine, could wait long for a core while it holds the signal pending, and a
// signal that does not queue (SIGPROF) loses every one sent meanwhile. A signal
// the thread raises itself (a fault) is still delivered: the kernel does not
// let it be blocked.
// Set on spanprof's own threads: the continuous profile leaves their lock waits
// out, as it leaves their CPU out (lock_hooks-inl.hpp). Constant-initialized.
inline thread_local bool on_spanprof_thread = false;

inline void begin_spanprof_thread(const char* name) noexcept {
  on_spanprof_thread = true;
  sigset_t all;
  sigfillset(&all);
  (void)::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  (void)::pthread_setname_np(::pthread_self(), name);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_THREAD_NAME_HPP_
