// Writes each profile as <dir>/<span_id>-<start unix ns>-<kind>.pb.gz: one file per
// span (targeted profiling), its repeated stacks merged. With batched delivery, and
// for the process's continuous profile (Options::continuous), one file per window
// and kind: <dir>/window-<start unix ns>-<kind>.pb.gz (-2, -3... for the parts of a
// window cut early at its limits).
//
// A profile appears whole or not at all: it is written to a hidden temporary file
// and renamed into place, so a reader (a sidecar shipping the directory, a person
// running `go tool pprof`) never sees half a file. Files are 0600: profiles carry
// function names and ids that are nobody else's business.
#ifndef SPANPROF_DELIVERY_FILE_UPLOADER_HPP_
#define SPANPROF_DELIVERY_FILE_UPLOADER_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/filesystem.hpp>
#include <spanprof/delivery/uploader.hpp>

#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN

class FileUploader final : public Uploader {
 public:
  static constexpr const char* default_directory = "./profiles";

  // An empty directory means ./profiles. (SPANPROF_OUTPUT_DIR sets
  // Options::output_directory, where the default FileUploader writes.)
  explicit FileUploader(std::string directory = {}, Delivery delivery = Delivery::per_span())
      : Uploader("file", delivery), directory_(std::move(directory)) {
    if (directory_.empty()) directory_ = default_directory;
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  }

  const std::string& directory() const noexcept { return directory_; }

  // The name a profile is written under, relative to directory().
  static std::string file_name_for(const EncodedProfile& profile) {
    // A span's own profile carries its ids; a window's record (of batched spans, or
    // of the continuous profile) has none, however many spans it holds.
    const std::string owner =
        profile.record.span.span_id.valid() ? profile.record.span.span_id.to_hex() : std::string("window");
    return owner + "-" + std::to_string(profile.record.start_unix_ns) + "-" + std::string(to_string(profile.record.kind)) + ".pb.gz";
  }

 protected:
  UploadResult do_send(const EncodedProfile& profile, std::string_view payload, const UploadContext&) override {
    if (!detail::make_directories(directory_)) return failure("cannot create directory", directory_);
    const std::string final_path = directory_ + "/" + file_name_for(profile);
    const std::string temp_path = directory_ + "/." + file_name_for(profile) + ".tmp";
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return failure("cannot create", temp_path);
    const char* data = payload.data();
    std::size_t left = payload.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int saved = errno;
        ::close(fd);
        ::unlink(temp_path.c_str());
        errno = saved;
        return failure("cannot write", temp_path);
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) {
      const int saved = errno;
      ::unlink(temp_path.c_str());
      errno = saved;
      return failure("cannot write", temp_path);
    }
    // Into place under its name, or, when a profile of the same window and kind is
    // there already (the continuous profile's window cut early at its limits, in
    // parts), under the next free <name>-<part>.pb.gz: no part replaces another.
    // A file system without hard links (vfat, some FUSE) takes a rename instead.
    std::string placed = final_path;
    for (int part = 2; ::link(temp_path.c_str(), placed.c_str()) != 0; ++part) {
      const bool no_links = errno == EPERM || errno == ENOTSUP || errno == EOPNOTSUPP;
      if (no_links && ::rename(temp_path.c_str(), placed.c_str()) == 0) return UploadResult::ok();
      if (errno != EEXIST || part > 10'000) {
        const int saved = errno;
        ::unlink(temp_path.c_str());
        errno = saved;
        return failure("cannot move into", placed);
      }
      placed = final_path.substr(0, final_path.size() - 6) + "-" + std::to_string(part) + ".pb.gz";
    }
    ::unlink(temp_path.c_str());
    return UploadResult::ok();
  }

 private:
  // A full disk may clear up and a directory may be fixed by an operator: both are
  // worth retrying; nothing here is permanent.
  static UploadResult failure(const char* what, const std::string& path) {
    return UploadResult::retryable(std::string(what) + " " + path + ": " + detail::error_text(errno));
  }

  std::string directory_;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_FILE_UPLOADER_HPP_
