// How finished profiles travel from request threads to the uploaders when things
// go wrong: a full hand-off queue, a backend that fails or is gone.
#ifndef SPANPROF_DELIVERY_DELIVERY_POLICY_HPP_
#define SPANPROF_DELIVERY_DELIVERY_POLICY_HPP_

#include <spanprof/config.hpp>

#include <chrono>
#include <cstdint>

SPANPROF_NAMESPACE_BEGIN

// What a request thread does when the hand-off queue is full. Never blocks.
enum class OverflowPolicy : std::uint8_t {
  drop_newest,  // the profile being handed over is dropped
  drop_oldest,  // the oldest queued profile is dropped to make room
};

// Retries of a retryable failure (connection error, timeout, 408, 429, 5xx).
// Permanent failures (other 4xx) are never retried.
struct RetryPolicy {
  int max_attempts = 3;                                 // per profile, first try included
  std::chrono::milliseconds initial_backoff{250};       // doubles per failure...
  std::chrono::milliseconds max_backoff{30'000};        // ...up to this; also caps Retry-After
  double jitter = 0.2;                                  // +-20%: processes do not retry in step
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_DELIVERY_POLICY_HPP_
