// A bounded on-disk spool: payloads an uploader could not deliver during an
// outage wait here and are re-sent later, also by the next process after a
// restart. A payload is what the uploader sends (a gzip'd pprof, an OTLP request,
// a Pyroscope push), stored with the profile's metadata the uploader needs to send
// it again, so a re-send never re-encodes.
//
// This header keeps the directory: its lock, its index, the bound. What a file
// holds is detail/delivery/spool_format.hpp's, what it is called
// detail/delivery/spool_names.hpp's; both are included here, so an includer of this
// header sees all three.
//
// A file appears whole or not at all: it is written under a hidden temporary name
// (".<name>.tmp", mode 0600) and renamed into place; a failed write removes the
// temporary file, and temporary files a crash left behind are deleted by open().
// Files are not fsync'ed unless asked (sync_to_disk): a process crash loses
// nothing either way, and after a power loss an unsynced file is at worst found
// corrupt by its CRC and dropped — losing a few profiles of an outage is cheaper
// than a disk flush per profile while the outage lasts.
//
// The spool is bounded: after each store, the oldest files (of any uploader) are
// deleted until the spool's files fit in max_bytes again. A profile that alone
// exceeds the bound is refused instead of emptying the spool for it.
//
// Threads and processes: a Spool is owned by one thread (the upload worker) and
// has no locking of its own. open() takes an advisory lock (flock) on a lock
// file in the directory, so a second Spool on the same directory — in this or
// another process — fails to open instead of interleaving sequence numbers and
// deleting the other's temporary files.
//
// Nothing here throws: every failure comes back as a Status (upload_failed).
#ifndef SPANPROF_DETAIL_DELIVERY_SPOOL_HPP_
#define SPANPROF_DETAIL_DELIVERY_SPOOL_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/filesystem.hpp>
#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/detail/delivery/spool_format.hpp>
#include <spanprof/detail/delivery/spool_names.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct SpoolItem {
  std::string uploader;
  std::uint64_t sequence = 0;
  std::int64_t stored_unix_ns = 0;  // wall clock when stored; informative, not the order
  std::uint64_t size_bytes = 0;
  std::string file_name;  // relative to the spool directory
};

struct SpoolCounters {
  std::uint64_t stored = 0;           // profiles written
  std::uint64_t evicted = 0;          // oldest files deleted to stay within max_bytes
  std::uint64_t corrupt_removed = 0;  // files that failed verification and were deleted
  std::uint64_t temp_removed = 0;     // temporary files of an interrupted store, deleted by open()
};

class Spool {
 public:
  // sync_to_disk: fsync each file before its rename and the directory after it,
  // so stored profiles survive a power loss too (see the top of this file).
  Spool(std::string directory, std::uint64_t max_bytes, bool sync_to_disk = false) noexcept
      : directory_(std::move(directory)), max_bytes_(max_bytes), sync_to_disk_(sync_to_disk) {
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  }

  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;
  ~Spool() { close(); }

  const std::string& directory() const noexcept { return directory_; }
  std::uint64_t max_bytes() const noexcept { return max_bytes_; }
  bool is_open() const noexcept { return dir_fd_ >= 0; }

  // Creates the directory (0700) if needed, locks it, deletes leftover temporary
  // files, indexes the spool files already there and resumes the sequence after
  // the highest. Trims to max_bytes, oldest first, in case the bound shrank
  // since they were written. Calling it again rescans.
  Status open() noexcept {
    close();
    SPANPROF_TRY {
      if (directory_.empty()) return failure("spool: no directory configured");
      if (!detail::make_directories(directory_)) return errno_failure("cannot create directory", directory_);
      dir_fd_ = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir_fd_ < 0) return errno_failure("cannot open directory", directory_);
      lock_fd_ = ::openat(dir_fd_, std::string(spool_format::lock_name).c_str(),
                          O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (lock_fd_ < 0) return close_after(errno_failure("cannot create", path_of(spool_format::lock_name)));
      if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
          return close_after(failure("spool: " + directory_ + " is in use by another spool (lock held on " +
                                     path_of(spool_format::lock_name) + ")"));
        }
        return close_after(errno_failure("cannot lock", path_of(spool_format::lock_name)));
      }
      if (Status scanned = scan(); !scanned) return close_after(std::move(scanned));
      enforce_bound();
      return Status::ok();
    } SPANPROF_CATCH_ALL {
      close();
      return failure("spool: out of memory while opening");
    }
    return failure("unreachable");  // -fno-exceptions: the try is an if (true)
  }

  // Writes one payload for `uploader` with the profile's metadata, then evicts the
  // oldest files while the spool exceeds max_bytes. On failure nothing new is left
  // in the directory.
  Status store(std::string_view uploader, const EncodedProfile& metadata, std::string_view payload) noexcept {
    if (!is_open()) return failure("spool: not open");
    SPANPROF_TRY {
      const std::uint64_t size = spool_format::encoded_size(uploader, metadata, payload);
      if (size > max_bytes_) {
        return failure("spool: a profile of " + std::to_string(size) + " bytes exceeds the spool's bound of " +
                       std::to_string(max_bytes_) + " bytes; not stored");
      }
      const std::string bytes = spool_format::encode(uploader, metadata, payload);
      // A failed attempt still consumes its number: a name is never reused.
      const std::uint64_t sequence = next_sequence_++;
      const std::int64_t stored_ns = now_unix_ns();
      std::string component = spool_format::uploader_component(uploader);
      std::string name = spool_format::file_name(sequence, stored_ns, component);
      // Indexed before it is written, so no allocation can fail between a file
      // appearing and the spool knowing about it.
      const auto it =
          entries_.emplace(Key{sequence, std::move(name)}, Entry{std::move(component), stored_ns, bytes.size()}).first;
      if (Status written = write_file(it->first.second, bytes); !written) {
        entries_.erase(it);
        return written;
      }
      bytes_ += bytes.size();
      ++counters_.stored;
      enforce_bound();
      return Status::ok();
    } SPANPROF_CATCH_ALL {
      return failure("spool: out of memory while storing");
    }
    return failure("unreachable");
  }

  // The items stored for `uploader`, oldest first. Empty when there are none,
  // and also when the list cannot be allocated (retried on the next call).
  std::vector<SpoolItem> pending(std::string_view uploader) const noexcept {
    std::vector<SpoolItem> items;
    SPANPROF_TRY {
      const std::string component = spool_format::uploader_component(uploader);
      for (const auto& [key, entry] : entries_) {
        if (entry.component != component) continue;
        items.push_back(SpoolItem{std::string(uploader), key.first, entry.stored_unix_ns, entry.size, key.second});
      }
    } SPANPROF_CATCH_ALL {
      items.clear();
    }
    return items;
  }

  // Reads and verifies an item. A file that fails verification is deleted and
  // counted (retrying it could never succeed); a transient failure (e.g. too many
  // open files) leaves it in place.
  Status load(const SpoolItem& item, EncodedProfile& metadata, std::string& payload) noexcept {
    SPANPROF_TRY {
      const auto it = entries_.find(Key{item.sequence, item.file_name});
      if (Status owned = check_owner(item, it); !owned) return owned;
      std::string bytes;
      bool corrupt = false;
      if (Status read = read_file(it, bytes, corrupt); !read) return corrupt ? remove_corrupt(it, read) : read;
      EncodedProfile decoded;
      std::string decoded_payload;
      if (Status valid = spool_format::decode(bytes, item.uploader, decoded, decoded_payload); !valid)
        return remove_corrupt(it, valid);
      metadata = std::move(decoded);
      payload = std::move(decoded_payload);
      return Status::ok();
    } SPANPROF_CATCH_ALL {
      return failure("spool: out of memory while loading");
    }
    return failure("unreachable");
  }

  // Forgets an item and deletes its file (after a successful upload). Returns
  // false when the file could not be deleted; the item is forgotten anyway, so
  // this process does not send it twice, but it comes back after a restart.
  bool remove(const SpoolItem& item) noexcept {
    const auto it = entries_.find(Key{item.sequence, item.file_name});
    if (it == entries_.end()) return true;
    return erase(it);
  }

  std::uint64_t bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return entries_.size(); }
  SpoolCounters counters() const noexcept { return counters_; }

  // The size store() would write for this profile, for checking against the bound.
  static std::uint64_t stored_size(std::string_view uploader, const EncodedProfile& profile,
                                   std::string_view payload) noexcept {
    return spool_format::encoded_size(uploader, profile, payload);
  }

 private:
  using Key = std::pair<std::uint64_t, std::string>;  // (sequence, file name): sorts oldest first
  struct Entry {
    std::string component;
    std::int64_t stored_unix_ns = 0;
    std::uint64_t size = 0;
  };
  using Entries = std::map<Key, Entry>;

  // ---- errors -------------------------------------------------------------------------

  static Status failure(std::string_view message) noexcept { return Status(ErrorCode::upload_failed, message); }

  // "spool: <what> <path>: <strerror(errno)>", errno kept for the caller.
  static Status errno_failure(const char* what, const std::string& path) noexcept {
    const int saved = errno;
    std::string message;
    SPANPROF_TRY {
      message = std::string("spool: ") + what + " " + path + ": " + error_text(saved);
    } SPANPROF_CATCH_ALL {
    }
    errno = saved;
    return failure(message);
  }

  Status close_after(Status result) noexcept {
    close();
    return result;
  }

  std::string path_of(std::string_view name) const { return directory_ + "/" + std::string(name); }

  // ---- directory ----------------------------------------------------------------------

 public:
  // In a forked child, on the parent's spool: the child's copies of its
  // descriptors would keep the parent's lock alive after the parent exits.
  void close_files_after_fork() noexcept {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    if (dir_fd_ >= 0) ::close(dir_fd_);
    lock_fd_ = dir_fd_ = -1;
  }

 private:
  void close() noexcept {
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
    if (dir_fd_ >= 0) ::close(dir_fd_);
    lock_fd_ = dir_fd_ = -1;
    entries_.clear();
    bytes_ = 0;
    next_sequence_ = 1;
  }

  Status scan() {
    // A fresh open file description: fdopendir takes ownership of it, and sharing
    // dir_fd_'s offset would make a second scan start at the end.
    const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_failure("cannot list", directory_);
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      return errno_failure("cannot list", directory_);
    }
    std::uint64_t highest = 0;
    Status listed;
    SPANPROF_TRY {
      for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(dir);
        if (entry == nullptr) {
          if (errno != 0) listed = errno_failure("cannot list", directory_);
          break;
        }
        const std::string_view name = entry->d_name;
        spool_format::ParsedName parsed;
        if (spool_format::parse_file_name(name, parsed)) {
          struct stat st {};
          // Only regular files are ours; a directory or symlink with a matching
          // name is left alone (and never followed).
          if (::fstatat(dir_fd_, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
          const auto size = static_cast<std::uint64_t>(st.st_size);
          highest = std::max(highest, parsed.sequence);
          // Only a shrunken bound (or tampering) leaves a file bigger than the whole
          // spool; trimming oldest-first around it would delete everything else.
          if (size > max_bytes_) {
            if (::unlinkat(dir_fd_, entry->d_name, 0) == 0) ++counters_.evicted;
            continue;
          }
          entries_.emplace(Key{parsed.sequence, std::string(name)},
                           Entry{std::string(parsed.component), parsed.stored_unix_ns, size});
          bytes_ += size;
        } else if (spool_format::is_temp_name(name)) {
          // The lock proves no live store owns it: it is a crash's leftover.
          if (::unlinkat(dir_fd_, entry->d_name, 0) == 0) ++counters_.temp_removed;
        }
      }
    } SPANPROF_CATCH_ALL {
      ::closedir(dir);
      SPANPROF_RETHROW;
    }
    ::closedir(dir);
    next_sequence_ = highest + 1;
    return listed;
  }

  // ---- files --------------------------------------------------------------------------

  static std::int64_t now_unix_ns() noexcept {
    timespec ts{};
    if (::clock_gettime(CLOCK_REALTIME, &ts) != 0 || ts.tv_sec < 0) return 0;
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  Status write_file(const std::string& name, std::string_view bytes) {
    const std::string temp = spool_format::temp_name(name);
    // O_EXCL: sequence numbers are never reused, so an existing file is not ours
    // to overwrite. O_NOFOLLOW: never write through a planted symlink.
    const int fd = ::openat(dir_fd_, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return errno_failure("cannot create", path_of(temp));
    const char* data = bytes.data();
    std::size_t left = bytes.size();
    const char* failed = nullptr;
    int saved = 0;
    while (left > 0) {
      const ssize_t n = ::write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        saved = (n == 0) ? EIO : errno;
        failed = "cannot write";
        break;
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    if (failed == nullptr && sync_to_disk_ && ::fsync(fd) != 0) {
      saved = errno;
      failed = "cannot sync";
    }
    // close() reports late write errors on some file systems (NFS, quotas).
    if (::close(fd) != 0 && failed == nullptr) {
      saved = errno;
      failed = "cannot write";
    }
    if (failed == nullptr && ::renameat(dir_fd_, temp.c_str(), dir_fd_, name.c_str()) != 0) {
      saved = errno;
      failed = "cannot rename into place";
    }
    if (failed != nullptr) {
      ::unlinkat(dir_fd_, temp.c_str(), 0);
      errno = saved;
      return errno_failure(failed, path_of(temp));
    }
    // The file is complete either way; a failed directory sync only weakens the
    // power-loss guarantee, so it is not worth failing the store over.
    if (sync_to_disk_) (void)::fsync(dir_fd_);
    return Status::ok();
  }

  // Reads a whole file. `corrupt` tells a file that can never load (gone bad or
  // replaced) from a failure worth retrying.
  Status read_file(Entries::iterator it, std::string& bytes, bool& corrupt) {
    const std::string& name = it->first.second;
    // O_NONBLOCK: a FIFO planted under a spool name must not hang the worker.
    const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) {
        Status gone = errno_failure("cannot open", path_of(name));
        erase(it);  // someone deleted it: nothing to retry
        return gone;
      }
      corrupt = (errno == ELOOP);  // a symlink was planted under the name
      return errno_failure("cannot open", path_of(name));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      Status failed = errno_failure("cannot stat", path_of(name));
      ::close(fd);
      return failed;
    }
    // Stored files never exceed the bound (open() trims, store() refuses), so a
    // bigger one was changed behind our back; not reading it caps the memory.
    if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > max_bytes_) {
      ::close(fd);
      corrupt = true;
      return failure(S_ISREG(st.st_mode) ? "larger than the spool's bound" : "not a regular file");
    }
    bytes.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, &bytes[done], bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Status failed = errno_failure("cannot read", path_of(name));
        ::close(fd);
        return failed;
      }
      if (n == 0) break;  // shrank since fstat: decode reports it as truncated
      done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    ::close(fd);
    return Status::ok();
  }

  // `it` is where `item` was looked up: ok when it is pending and the uploader's.
  Status check_owner(const SpoolItem& item, Entries::const_iterator it) const {
    if (it == entries_.end()) return failure("spool: " + item.file_name + " is not pending (removed or evicted)");
    if (it->second.component != spool_format::uploader_component(item.uploader))
      return failure("spool: " + item.file_name + " does not belong to uploader " + item.uploader);
    return Status::ok();
  }

  bool erase(Entries::iterator it) noexcept {
    const int rc = ::unlinkat(dir_fd_, it->first.second.c_str(), 0);
    const bool gone = rc == 0 || errno == ENOENT;
    bytes_ -= std::min(bytes_, it->second.size);
    entries_.erase(it);
    return gone;
  }

  // Deletes a file that can never load; the answer says which file and why.
  Status remove_corrupt(Entries::iterator it, const Status& why) noexcept {
    std::string message;
    SPANPROF_TRY {
      constexpr std::string_view prefix = "spool: ";
      const std::string& text = why.message();
      const std::string_view reason =
          std::string_view(text).substr(text.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0);
      message = "spool: removed corrupt " + path_of(it->first.second) + ": " + std::string(reason);
    } SPANPROF_CATCH_ALL {
    }
    erase(it);
    ++counters_.corrupt_removed;
    return failure(message);
  }

  // Oldest first, whichever uploader it belongs to: under a long outage the
  // newest profiles are the ones still worth sending.
  void enforce_bound() noexcept {
    while (bytes_ > max_bytes_ && !entries_.empty()) {
      const auto oldest = entries_.begin();
      if (erase(oldest)) {
        ++counters_.evicted;
      } else {
        report_error(ErrorCode::upload_failed, "spool: cannot delete the oldest profile to stay within the bound");
      }
    }
  }

  std::string directory_;
  std::uint64_t max_bytes_;
  bool sync_to_disk_;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  Entries entries_;
  std::uint64_t bytes_ = 0;
  std::uint64_t next_sequence_ = 1;
  SpoolCounters counters_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_DELIVERY_SPOOL_HPP_
