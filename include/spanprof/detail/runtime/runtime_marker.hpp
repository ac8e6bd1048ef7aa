// Finds the other copies of spanprof's runtime in this process.
//
// A process has one runtime when every shared object links the compiled library
// as a shared library, or when the copies' symbols meet (the executable exports
// them, -rdynamic). A plugin built header-only with -fvisibility=hidden, loaded
// into an executable that does not export its symbols, gets a copy of its own:
// another signal, another worker, its own options. Nothing in the symbol tables
// says so, so each copy leaves a marker in its address space that the others can
// read: a one-page private mapping of a memfd named "spanprof-runtime", which
// /proc/self/maps lists by name, holding the copy's process id and identity.
// A forked child inherits its parent's markers; the process id tells them apart.
#ifndef SPANPROF_DETAIL_RUNTIME_RUNTIME_MARKER_HPP_
#define SPANPROF_DETAIL_RUNTIME_RUNTIME_MARKER_HPP_

#include <spanprof/config.hpp>

#if SPANPROF_ENABLED

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline constexpr char runtime_marker_name[] = "spanprof-runtime";

struct RuntimeMarker {
  char magic[24];      // "spanprof runtime marker"
  std::int64_t pid;    // the process that made it
  const void* owner;   // the copy that made it: its GuardHostState
  char abi[64];        // that copy's ABI namespace and version
};
inline constexpr char runtime_marker_magic[] = "spanprof runtime marker";
static_assert(sizeof runtime_marker_magic <= sizeof RuntimeMarker{}.magic);

// The ABI names of the other live copies' markers in this process ("" when none),
// comma-separated. `owner` identifies this copy.
inline std::string other_runtimes(const void* owner) {
  std::string maps, found;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return found;
  char buffer[16384];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    maps.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::int64_t pid = ::getpid();
  std::size_t at = 0;
  while (at < maps.size()) {
    std::size_t end = maps.find('\n', at);
    if (end == std::string::npos) end = maps.size();
    const std::string_view line(maps.data() + at, end - at);
    at = end + 1;
    if (line.find("/memfd:spanprof-runtime") == std::string_view::npos) continue;
    const std::uintptr_t start = std::strtoull(std::string(line.substr(0, line.find('-'))).c_str(), nullptr, 16);
    if (start == 0) continue;
    const auto* marker = reinterpret_cast<const RuntimeMarker*>(start);
    if (std::memcmp(marker->magic, runtime_marker_magic, sizeof runtime_marker_magic) != 0) continue;
    if (marker->pid != pid || marker->owner == owner) continue;
    if (!found.empty()) found += ", ";
    found.append(marker->abi, ::strnlen(marker->abi, sizeof marker->abi));
  }
  return found;
}

// Leaves this copy's marker; false when the kernel refused (then other copies
// cannot see this one, which changes nothing else).
inline bool leave_runtime_marker(const void* owner) noexcept {
  const int fd = ::memfd_create(runtime_marker_name, MFD_CLOEXEC);
  if (fd < 0) return false;
  const long page = ::sysconf(_SC_PAGESIZE);
  void* memory = MAP_FAILED;
  if (page > 0 && ::ftruncate(fd, page) == 0)
    memory = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the memfd alive and named
  if (memory == MAP_FAILED) return false;
  auto* marker = static_cast<RuntimeMarker*>(memory);
  std::memcpy(marker->magic, runtime_marker_magic, sizeof runtime_marker_magic);
  marker->pid = ::getpid();
  marker->owner = owner;
  std::strncpy(marker->abi, SPANPROF_ABI_NAME " " SPANPROF_VERSION_STRING, sizeof marker->abi - 1);
  ::mprotect(memory, static_cast<std::size_t>(page), PROT_READ);
  return true;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_RUNTIME_RUNTIME_MARKER_HPP_
