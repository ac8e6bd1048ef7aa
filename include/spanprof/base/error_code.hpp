// What failed, as a code: the key of the error channel's counts (error.hpp), of a
// Status (status.hpp) and of a TraceparentParse. Light on purpose: span_context.hpp
// includes it.
#ifndef SPANPROF_BASE_ERROR_CODE_HPP_
#define SPANPROF_BASE_ERROR_CODE_HPP_

#include <spanprof/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

enum class ErrorCode : std::uint8_t {
  invalid_span_context,   // a guard was given an invalid trace or span id
  invalid_traceparent,    // a traceparent header failed strict W3C parsing
  sampler_unavailable,    // the preferred sampling source was refused; a fallback runs
  sampler_failed,         // no sampling source could be armed on a thread
  sample_buffer_full,     // a span's samples overflowed the per-thread buffer
  heap_unavailable,       // heap profiling needs tcmalloc as the process's allocator
  profiler_busy,          // the classic engine was already profiling another scope
  profiler_failed,        // gperftools refused to start or wrote an unreadable file
  queue_full,             // a finished profile was dropped: the hand-off queue was full
  symbolization_failed,   // an object file could not be read for symbols
  encoding_failed,        // compression or encoding of a profile failed
  upload_failed,          // an uploader could not deliver a profile
  invalid_configuration,  // an option or environment variable had a bad value
  timed_out,              // flush() or shutdown() ended at its timeout with profiles still pending
  not_running,            // spanprof is compiled out (SPANPROF_ENABLED=0) or did not start
  span_moved,             // a guard closed on another thread than it opened, or out of order: its samples were dropped
  no_samples,             // a span kept as slow, erroring or triggered had not one sample: no profile was made
  process_context_failed, // the OTEL_CTX process context (OTEP 4719) could not be published
  internal,               // an exception escaped a component and was contained
};
inline constexpr std::size_t error_code_count = static_cast<std::size_t>(ErrorCode::internal) + 1;

constexpr std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_span_context: return "invalid_span_context";
    case ErrorCode::invalid_traceparent: return "invalid_traceparent";
    case ErrorCode::sampler_unavailable: return "sampler_unavailable";
    case ErrorCode::sampler_failed: return "sampler_failed";
    case ErrorCode::sample_buffer_full: return "sample_buffer_full";
    case ErrorCode::heap_unavailable: return "heap_unavailable";
    case ErrorCode::profiler_busy: return "profiler_busy";
    case ErrorCode::profiler_failed: return "profiler_failed";
    case ErrorCode::queue_full: return "queue_full";
    case ErrorCode::symbolization_failed: return "symbolization_failed";
    case ErrorCode::encoding_failed: return "encoding_failed";
    case ErrorCode::upload_failed: return "upload_failed";
    case ErrorCode::invalid_configuration: return "invalid_configuration";
    case ErrorCode::timed_out: return "timed_out";
    case ErrorCode::not_running: return "not_running";
    case ErrorCode::span_moved: return "span_moved";
    case ErrorCode::no_samples: return "no_samples";
    case ErrorCode::process_context_failed: return "process_context_failed";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_BASE_ERROR_CODE_HPP_
