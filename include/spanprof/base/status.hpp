// The one answer of a fallible call. Every public call that can fail returns a
// Status, or a result that is one (StartResult, UploadResult derive from it):
//
//   if (auto status = spanprof::flush(); !status)
//     log("spanprof: {}: {}", spanprof::to_string(status.code()), status.message());
//
// Nothing throws: a failure is this value, and what fails later, off the caller's
// thread, goes to the error channel (error.hpp). docs/errors-and-stats.md.
#ifndef SPANPROF_BASE_STATUS_HPP_
#define SPANPROF_BASE_STATUS_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>

#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

class Status {
 public:
  Status() noexcept = default;  // ok

  // A failure. A message that cannot be copied (out of memory) is left empty; the
  // code still says what failed.
  Status(ErrorCode code, std::string_view message) noexcept : ok_(false), code_(code) {
    detail::set_error_message(message_, message);
  }

  static Status ok() noexcept { return Status(); }

  bool is_ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }

  // Meaningful only for a failure.
  ErrorCode code() const noexcept { return code_; }
  // One line: what failed and why. Empty when ok.
  const std::string& message() const noexcept { return message_; }

  // "ok", or "code: message": for logs and test failures.
  std::string to_string() const {
    if (ok_) return "ok";
    std::string text(spanprof::to_string(code_));
    text += ": ";
    text += message_;
    return text;
  }

 private:
  bool ok_ = true;
  ErrorCode code_ = ErrorCode::internal;
  std::string message_;
};

namespace detail {
// A failure that arrived as an exception: "context" followed by its what().
inline Status status_from_exception(ErrorCode code, std::string_view context, const char* what) noexcept {
  std::string message;
  set_error_message(message, context);
  SPANPROF_TRY { message += what; } SPANPROF_CATCH_ALL {}
  return Status(code, message);
}
}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_BASE_STATUS_HPP_
