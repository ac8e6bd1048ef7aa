// Process-wide lifecycle: start, flush, shutdown, stats.
//
// spanprof::start(options) is optional: the first guard of a process that never
// called it starts spanprof with Options() (the built-in defaults and the
// environment). After spanprof::shutdown() guards do nothing until start() is
// called again.
//
// Declared here, defined in runtime-inl.hpp: in the source file that defines
// SPANPROF_IMPLEMENTATION, or in the compiled library (config.hpp).
//
// With SPANPROF_ENABLED=0 these functions exist and do nothing: start() answers
// "not started", stats() all zeros.
#ifndef SPANPROF_RUNTIME_RUNTIME_HPP_
#define SPANPROF_RUNTIME_RUNTIME_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/runtime/stats.hpp>

#include <chrono>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

// What start() did: ok when profiling runs (not_running when spanprof is compiled
// out), and every configuration problem it met on the way (from the environment,
// values it had to clamp), each also reported through the error channel. A
// problem does not stop the start: the setting's default is used instead.
struct StartResult : Status {
  StartResult() noexcept = default;
  explicit StartResult(Status status) noexcept : Status(std::move(status)) {}
  std::vector<ConfigurationProblem> problems;
};

#if SPANPROF_ENABLED

// Starts (or restarts with new options) profiling. Every configuration problem is
// reported through the error handler and returned.
SPANPROF_API StartResult start(Options options = Options()) noexcept;

// Waits until every profile finished so far has been delivered (or failed, or
// spooled). timed_out: profiles were still pending at the timeout.
SPANPROF_API Status flush(std::chrono::milliseconds timeout = std::chrono::seconds(5)) noexcept;

// Stops profiling; delivers what it can within the timeout. timed_out: profiles
// were still pending at the timeout (counted as dropped, stats()).
SPANPROF_API Status shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(5)) noexcept;

SPANPROF_API Stats stats() noexcept;

#else  // SPANPROF_ENABLED == 0

inline StartResult start(const Options& = Options()) noexcept {
  return StartResult(Status(ErrorCode::not_running, "spanprof is compiled out (SPANPROF_ENABLED=0)"));
}
inline Status flush(std::chrono::milliseconds = std::chrono::seconds(5)) noexcept { return Status::ok(); }
inline Status shutdown(std::chrono::milliseconds = std::chrono::seconds(5)) noexcept { return Status::ok(); }
inline Stats stats() noexcept { return {}; }

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_RUNTIME_HPP_
