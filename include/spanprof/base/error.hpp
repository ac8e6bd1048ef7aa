// The one error channel. Every failure the SDK meets — a malformed traceparent, a
// refused perf event, an unwritable directory — is counted and reported here and
// never thrown into the host application.
#ifndef SPANPROF_BASE_ERROR_HPP_
#define SPANPROF_BASE_ERROR_HPP_

#include <spanprof/base/error_code.hpp>
#include <spanprof/config.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

namespace detail {
// Assigning a message can itself run out of memory; the error path must not throw.
inline void set_error_message(std::string& error, std::string_view message) noexcept {
  SPANPROF_TRY {
    error.assign(message.data(), message.size());
  } SPANPROF_CATCH_ALL {
    error.clear();
  }
}
}  // namespace detail

// A setting whose value was refused, from the environment or from code, and what
// was done instead.
struct ConfigurationProblem {
  std::string setting;  // the variable ("SPANPROF_FREQUENCY") or the option ("frequency_hz")
  std::string message;  // one line: the value, why it is wrong, what is used instead
};

struct Error {
  ErrorCode code;
  std::string_view message;  // valid only during the handler call
};

// Called from any thread, request threads included: keep it short and never throw
// (an exception from a handler is swallowed).
using ErrorHandler = std::function<void(const Error&)>;

// Writes at most one line per interval to stderr and says how many it held back,
// so a storm of identical failures cannot flood a service's logs.
class RateLimitedStderrHandler {
 public:
  explicit RateLimitedStderrHandler(std::chrono::milliseconds interval = std::chrono::seconds(1)) noexcept
      : interval_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count()) {}

  void operator()(const Error& error) const noexcept {
    auto& state = *state_;
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    std::int64_t last = state.last_ns.load(std::memory_order_relaxed);
    if (last != 0 && now - last < interval_ns_) {
      state.suppressed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (!state.last_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
      state.suppressed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const auto held_back = state.suppressed.exchange(0, std::memory_order_relaxed);
    const auto name = to_string(error.code);
    if (held_back != 0) {
      std::fprintf(stderr, "spanprof: %.*s: %.*s (%llu more held back)\n", static_cast<int>(name.size()),
                   name.data(), static_cast<int>(error.message.size()), error.message.data(),
                   static_cast<unsigned long long>(held_back));
    } else {
      std::fprintf(stderr, "spanprof: %.*s: %.*s\n", static_cast<int>(name.size()), name.data(),
                   static_cast<int>(error.message.size()), error.message.data());
    }
  }

 private:
  struct State {
    std::atomic<std::int64_t> last_ns{0};
    std::atomic<std::uint64_t> suppressed{0};
  };
  std::int64_t interval_ns_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

namespace detail {

struct ErrorChannel {
  std::mutex mutex;  // guards handler replacement only; reporting copies nothing under it
  std::shared_ptr<const ErrorHandler> handler =
      std::make_shared<const ErrorHandler>(RateLimitedStderrHandler{});
  std::atomic<std::uint64_t> counts[error_code_count] = {};

  // In a forked child: a parent thread may have held the mutex at the fork.
  void reset_after_fork() noexcept { new (&mutex) std::mutex(); }
};

SPANPROF_API inline ErrorChannel& error_channel() noexcept {
  static ErrorChannel channel;
  return channel;
}

}  // namespace detail

// Replaces the handler; an empty handler silences reporting (errors are still counted).
inline void set_error_handler(ErrorHandler handler) noexcept {
  auto& channel = detail::error_channel();
  SPANPROF_TRY {
    auto next = std::make_shared<const ErrorHandler>(std::move(handler));
    std::lock_guard<std::mutex> held(channel.mutex);
    channel.handler = std::move(next);
  } SPANPROF_CATCH_ALL {
  }
}

inline std::uint64_t error_count(ErrorCode code) noexcept {
  return detail::error_channel().counts[static_cast<std::size_t>(code)].load(std::memory_order_relaxed);
}

// Counts without reporting: for paths that must not call user code (e.g. a hot
// path hit a million times), the count is still visible in stats.
inline void count_error(ErrorCode code) noexcept {
  detail::error_channel().counts[static_cast<std::size_t>(code)].fetch_add(1, std::memory_order_relaxed);
}

inline void report_error(ErrorCode code, std::string_view message) noexcept {
  auto& channel = detail::error_channel();
  count_error(code);
  std::shared_ptr<const ErrorHandler> handler;
  {
    std::lock_guard<std::mutex> held(channel.mutex);
    handler = channel.handler;
  }
  if (handler && *handler) {
    SPANPROF_TRY {
      (*handler)(Error{code, message});
    } SPANPROF_CATCH_ALL {
    }
  }
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_BASE_ERROR_HPP_
