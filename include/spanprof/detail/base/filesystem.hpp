// Directory creation shared by the file uploader and the spool.
#ifndef SPANPROF_DETAIL_BASE_FILESYSTEM_HPP_
#define SPANPROF_DETAIL_BASE_FILESYSTEM_HPP_

#include <spanprof/config.hpp>

#include <cerrno>
#include <string>

#include <sys/stat.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// `mkdir -p` with mode 0700 (profiles are nobody else's business). False with errno
// set when a component cannot be created or the path is not a directory.
inline bool make_directories(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    errno = ENOTDIR;
    return false;
  }
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  if (::stat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return false;
  }
  return true;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_FILESYSTEM_HPP_
