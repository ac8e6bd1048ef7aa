// How finished profiles travel from request threads to the uploaders when things
// go wrong: a full hand-off queue, a backend that fails or is gone.
#ifndef SPANPROF_DELIVERY_DELIVERY_POLICY_HPP_
#define SPANPROF_DELIVERY_DELIVERY_POLICY_HPP_

#include <spanprof/config.hpp>

#include <chrono>
#include <cstddef>
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

// How an uploader wants profiles: one per span, or the spans of a window merged.
//
// per_span   every kept span is one profile (targeted profiling: a file per span);
// batched    the kept spans' samples are merged into one profile per kind per
//            window, every sample keeping its span's labels, identical (stack,
//            span) samples summed; a window is cut early when it reaches
//            max_samples distinct samples or ~max_bytes of encoded pprof.
//            max_samples is Grafana Pyroscope's per-profile limit; max_bytes is
//            below its 4 MiB on purpose: a window in memory, symbolized, takes
//            ~5x its encoded size, and 1 MiB keeps the SDK's memory bounded
//            (docs/delivery.md). Raise it to the backend's limit for fewer
//            requests at very high volume.
struct Delivery {
  enum class Mode : std::uint8_t { per_span, batched };
  Mode mode = Mode::per_span;
  std::chrono::milliseconds window{10'000};
  std::size_t max_samples = 16'000;
  std::size_t max_bytes = std::size_t{1} << 20;

  static Delivery per_span() noexcept { return {}; }
  static Delivery batched(std::chrono::milliseconds window = std::chrono::milliseconds(10'000)) noexcept {
    Delivery d;
    d.mode = Mode::batched;
    d.window = window;
    return d;
  }
  bool is_batched() const noexcept { return mode == Mode::batched; }
  friend bool operator==(const Delivery& a, const Delivery& b) noexcept {
    return a.mode == b.mode && a.window == b.window && a.max_samples == b.max_samples && a.max_bytes == b.max_bytes;
  }
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DELIVERY_DELIVERY_POLICY_HPP_
