// The span a thread runs, published for profilers outside the process
// (OpenTelemetry OTEP 4947, "thread context", experimental): the thread-local
// pointer `otel_thread_ctx_v1`, exported in .dynsym, points at a record of the
// running span's trace id, span id and attributes, or is null.
//
// spanprof points it at a request's record while a fragment of the request runs
// on the thread (request.hpp), and puts back what was there when it closes. The
// record lives with the request and is written once, before any thread points at
// it; a reader (an eBPF profiler, or a signal handler) sees either pointer, both
// valid: only compiler fences are needed, as the OTEP says. The attribute key
// names (index 0: "span_name") are in the process context (OTEP 4719).
#ifndef SPANPROF_DETAIL_SPAN_THREAD_CONTEXT_HPP_
#define SPANPROF_DETAIL_SPAN_THREAD_CONTEXT_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span/span_context.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

// The record, as OTEP 4947 lays it out: a 28-byte header, then attributes as
// {key index, length, UTF-8 bytes}. Packed: readers take it byte for byte.
struct __attribute__((packed, aligned(2))) ThreadContextRecord {
  static constexpr std::size_t max_attribute_bytes = 2 + 255;  // one attribute: the span name

  std::uint8_t trace_id[16] = {};
  std::uint8_t span_id[8] = {};
  std::uint8_t valid = 0;        // 1: the ids and attributes are set
  std::uint8_t trace_flags = 0;  // W3C trace flags (01: sampled)
  std::uint16_t attrs_size = 0;  // bytes of attributes that follow
  std::uint8_t attrs[max_attribute_bytes] = {};
};
static_assert(offsetof(ThreadContextRecord, attrs) == 28, "OTEP 4947: a 28-byte header");

// Attribute key indexes, as the process context's threadlocal.attribute_key_map lists them.
inline constexpr const char* thread_context_attribute_keys[] = {"span_name"};
inline constexpr std::uint8_t thread_context_span_name_key = 0;

// Writes the record of a span; a name longer than 255 bytes is cut.
inline void fill_thread_context(ThreadContextRecord& record, const SpanContext& span,
                                std::string_view span_name) noexcept {
  std::memcpy(record.trace_id, span.trace_id.bytes().data(), sizeof record.trace_id);
  std::memcpy(record.span_id, span.span_id.bytes().data(), sizeof record.span_id);
  record.trace_flags = span.flags.value;
  const std::size_t length = span_name.size() < 255 ? span_name.size() : 255;
  record.attrs[0] = thread_context_span_name_key;
  record.attrs[1] = static_cast<std::uint8_t>(length);
  if (length != 0) std::memcpy(record.attrs + 2, span_name.data(), length);
  record.attrs_size = static_cast<std::uint16_t>(2 + length);
  record.valid = 1;
}

SPANPROF_NAMESPACE_END

// One per process: a unique symbol (the linker and loader keep one copy however
// many objects include this), default visibility so that a program or library can
// export it in .dynsym, trivially initialized so that reading it never runs a TLS
// constructor. Written only by its own thread. Compiled out, there is none.
#if SPANPROF_ENABLED
extern "C" {
__attribute__((visibility("default"))) inline thread_local const void* otel_thread_ctx_v1 = nullptr;
}
// Every object with a source file that includes spanprof defines it, as readers
// look for it in the executable's .dynsym (OTEP 4947): with spanprof's compiled
// library as a shared library the library's copy then binds to the executable's,
// which exports it (CMakeLists.txt). Only a function's reference: nothing runs.
namespace spanprof {
namespace detail_thread_context {
[[maybe_unused]] __attribute__((used)) static const void* const* defines_otel_thread_ctx_v1() noexcept {
  return &otel_thread_ctx_v1;
}
}  // namespace detail_thread_context
}  // namespace spanprof
#endif

#endif  // SPANPROF_DETAIL_SPAN_THREAD_CONTEXT_HPP_
