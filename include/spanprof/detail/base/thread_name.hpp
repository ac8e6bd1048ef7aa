// The names of spanprof's own threads, as `top -H`, `ps -L`, gdb and perf show
// them: a user who sees a thread of the host's process busy can tell that it is
// spanprof's, and which part. At most 15 characters (the kernel's limit).
#ifndef SPANPROF_DETAIL_BASE_THREAD_NAME_HPP_
#define SPANPROF_DETAIL_BASE_THREAD_NAME_HPP_

#include <spanprof/config.hpp>

#include <pthread.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// spanprof's threads, by what they do.
inline constexpr const char* merger_thread_name = "spanprof-merge";  // takes what request threads hand over
inline constexpr const char* sender_thread_name = "spanprof-send";   // symbolizes, encodes, uploads
inline constexpr const char* wall_thread_name = "spanprof-wall";     // ticks the wall-clock samples

// Best effort: a name that does not take leaves the thread as it was.
inline void name_this_thread(const char* name) noexcept { (void)::pthread_setname_np(::pthread_self(), name); }

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_THREAD_NAME_HPP_
