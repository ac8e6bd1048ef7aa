// Process-wide lifecycle: start, flush, shutdown, stats.
//
// spanprof::start(options) is optional: the first guard of a process that never
// called it starts spanprof with Options() (the built-in defaults and the
// environment). After spanprof::shutdown() guards do nothing until start() is
// called again.
//
// Declared here, defined in runtime-inl.hpp: by the umbrella header
// (header-only), or in the compiled library (SPANPROF_COMPILED_LIB, config.hpp).
//
// With SPANPROF_ENABLED=0 these functions exist and do nothing: start() answers
// "not started", stats() all zeros.
#ifndef SPANPROF_RUNTIME_RUNTIME_HPP_
#define SPANPROF_RUNTIME_RUNTIME_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/runtime/stats.hpp>

#include <chrono>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

// What start() did: whether profiling runs, and every configuration problem it met
// (from the environment, and values it had to clamp), each also reported through
// the error channel.
struct StartResult {
  bool started = false;  // false also when spanprof is compiled out (SPANPROF_ENABLED=0)
  std::vector<ConfigurationProblem> problems;
  explicit operator bool() const noexcept { return started; }
};

#if SPANPROF_ENABLED

// Starts (or restarts with new options) profiling. Every configuration problem is
// reported through the error handler and returned.
SPANPROF_API SPANPROF_LIB_INLINE StartResult start(Options options = Options()) noexcept;

// Waits until every profile finished so far has been uploaded, or the timeout.
SPANPROF_API SPANPROF_LIB_INLINE bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(5)) noexcept;

// Stops profiling; delivers what it can within the timeout. Returns false if
// profiles were still pending when the timeout expired.
SPANPROF_API SPANPROF_LIB_INLINE bool shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(5)) noexcept;

SPANPROF_API SPANPROF_LIB_INLINE Stats stats() noexcept;

#else  // SPANPROF_ENABLED == 0

inline StartResult start(const Options& = Options()) noexcept { return {}; }
inline bool flush(std::chrono::milliseconds = std::chrono::seconds(5)) noexcept { return true; }
inline bool shutdown(std::chrono::milliseconds = std::chrono::seconds(5)) noexcept { return true; }
inline Stats stats() noexcept { return {}; }

#endif

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_RUNTIME_HPP_
