// The descriptors the HTTP client's libcurl holds, for fork and exec: a forked
// child closes the parent's connections, and the multi handle's wake-up socketpair
// is marked close-on-exec. Plain POSIX: nothing here calls libcurl.
#ifndef SPANPROF_DETAIL_DELIVERY_HTTP_SOCKETS_HPP_
#define SPANPROF_DETAIL_DELIVERY_HTTP_SOCKETS_HPP_

#include <spanprof/config.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The descriptors this process has open, sorted; empty if /proc is not there.
inline std::vector<int> http_open_descriptors() {
  std::vector<int> descriptors;
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return descriptors;
  const int own = ::dirfd(directory);  // closed below: the next descriptor opened may reuse it
  while (const dirent* entry = ::readdir(directory)) {
    int fd = 0;
    const char* c = entry->d_name;
    if (*c < '0' || *c > '9') continue;
    for (; *c >= '0' && *c <= '9' && fd < 1'000'000'000; ++c) fd = fd * 10 + (*c - '0');
    if (fd != own) descriptors.push_back(fd);
  }
  ::closedir(directory);
  std::sort(descriptors.begin(), descriptors.end());
  return descriptors;
}

// Every socket libcurl holds for spanprof, so that a forked child can close them
// (http_close_sockets_after_fork): the child never uses the parent's
// connections, and keeping them open would keep them from closing when the
// parent closes them. Lock-free, for the fork handler; a socket that finds no
// free slot is simply not closed in a child.
struct HttpSocketRegistry {
  static constexpr std::size_t slots = 256;
  std::atomic<int> fds[slots];

  HttpSocketRegistry() noexcept {
    for (auto& fd : fds) fd.store(-1, std::memory_order_relaxed);
  }
  void add(int fd) noexcept {
    for (auto& slot : fds) {
      int empty = -1;
      if (slot.compare_exchange_strong(empty, fd, std::memory_order_acq_rel)) return;
    }
  }
  void remove(int fd) noexcept {
    for (auto& slot : fds) {
      int expected = fd;
      if (slot.compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) return;
    }
  }
};

SPANPROF_API inline HttpSocketRegistry& http_socket_registry() noexcept {
  static HttpSocketRegistry registry;
  return registry;
}

// In a forked child (async-signal-safe): closes the parent's libcurl sockets.
inline void http_close_sockets_after_fork() noexcept {
  for (auto& slot : http_socket_registry().fds) {
    const int fd = slot.exchange(-1, std::memory_order_acq_rel);
    if (fd >= 0) ::close(fd);
  }
}

// libcurl before 8.17 creates its multi handle's wake-up socketpair without
// close-on-exec, and has no option for it: a host that forks and execs would
// hand both ends to the new program. The Unix-domain sockets that appeared while
// the handle was created (`before`: the descriptors open just before) are marked
// close-on-exec and returned. (A host thread creating one at that very moment
// would get the flag too; it is only ever set on a descriptor nobody asked to
// inherit.)
inline std::vector<int> http_close_new_sockets_on_exec(const std::vector<int>& before) noexcept {
  std::vector<int> marked;
  SPANPROF_TRY {
    for (const int fd : http_open_descriptors()) {
      if (std::binary_search(before.begin(), before.end(), fd)) continue;
      int domain = 0;
      socklen_t length = sizeof domain;
      if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) != 0 || domain != AF_UNIX) continue;
      const int flags = ::fcntl(fd, F_GETFD);
      if (flags < 0 || (flags & FD_CLOEXEC) != 0) continue;
      ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
      marked.push_back(fd);
    }
  } SPANPROF_CATCH_ALL {
    // Out of memory listing descriptors: they stay as libcurl made them.
  }
  return marked;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_HTTP_SOCKETS_HPP_
