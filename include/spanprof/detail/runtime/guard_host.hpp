// What an opening guard reads inline from the process-wide runtime, and nothing
// more: whether spanprof runs, and what the head sampler needs to turn a span down.
// Everything else a guard does is compiled once per program, with the runtime
// (config.hpp: SPANPROF_IMPLEMENTATION or the compiled library), so that a source
// file that opens guards compiles only this fast path.
#ifndef SPANPROF_DETAIL_RUNTIME_GUARD_HOST_HPP_
#define SPANPROF_DETAIL_RUNTIME_GUARD_HOST_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/config.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/span/span_context.hpp>

#if SPANPROF_ENABLED

#include <atomic>
#include <cstdint>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The part of one start()'s configuration an opening guard reads inline. The rest
// is in RunningConfig (running_config.hpp), which derives from it.
struct GuardGate {
  // The head sampler's trace_id_threshold() (0 when there is none): decides_by_call
  // asks it.
  std::uint64_t head_threshold = 0;
  bool has_trigger = false;  // an AdaptiveTrigger times turned-down spans
  // The continuous profile labels its samples with the spans open on each thread
  // (Options::continuous): every guard pushes its span, profiled or not.
  bool labels_spans = false;
};

class GuardHost;  // the runtime, as guards see it (running_config.hpp)

struct GuardHostState {
  std::atomic<const GuardGate*> config{nullptr};  // null: not running
  std::atomic<GuardHost*> host{nullptr};          // null: no runtime in this program
  std::atomic<bool> reported_missing{false};
};

// Constant-initialized: the guard's fast path is one load of `config`.
SPANPROF_API inline GuardHostState& guard_host_state() noexcept {
  static GuardHostState state;
  return state;
}

// Compiled with the runtime: the slow paths of opening a guard.
SPANPROF_API void config_for_first_guard() noexcept;
SPANPROF_API bool head_sampler_declines(const GuardGate& gate, const SpanContext& span,
                                        std::string_view span_name) noexcept;

// Defined where the runtime is compiled. Every other source file that includes a
// guard refers to it, so a program without the runtime fails to link naming it,
// rather than running without profiles (and a static compiled library's runtime is
// linked in by that reference).
SPANPROF_API extern const char define_SPANPROF_IMPLEMENTATION_in_one_source_file;
#if !SPANPROF_DEFINE_RUNTIME
[[maybe_unused]] __attribute__((used)) static const char* const spanprof_runtime_reference =
    &define_SPANPROF_IMPLEMENTATION_in_one_source_file;
#endif

// This thread's counters and configuration reader, registered; null on a thread
// whose counters are already gone (a guard in a late thread-exit destructor),
// where nothing is profiled.
SPANPROF_ALWAYS_INLINE inline ThreadCounters* guard_thread() noexcept {
  ThreadCounters& t = thread_counters;
  if (SPANPROF_LIKELY(t.registered) || register_thread_counters()) return &t;
  return nullptr;
}

// The head sampler turns this span down. Inlined into the guard's constructor.
SPANPROF_ALWAYS_INLINE inline bool head_declines(const GuardGate& gate, const SpanContext& span,
                                                 std::string_view span_name) noexcept {
  if (SPANPROF_LIKELY(gate.head_threshold != HeadSampler::decides_by_call))
    return trace_id_randomness(span.trace_id) < gate.head_threshold;
  return head_sampler_declines(gate, span, span_name);
}

// Enters the thread's reading section and loads the configuration (null: not
// running). The caller pins what it keeps and leaves the section with `inside`.
SPANPROF_ALWAYS_INLINE inline const GuardGate* enter_config_section(ConfigReader& reader,
                                                                   std::uint64_t& inside) noexcept {
  inside = reader.enter();
  const GuardGate* config = guard_host_state().config.load(std::memory_order_acquire);
  if (SPANPROF_LIKELY(config != nullptr)) return config;
  // start() frees what no section reads: not this thread's own, then.
  reader.leave(inside);
  config_for_first_guard();
  inside = reader.enter();
  return guard_host_state().config.load(std::memory_order_acquire);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_RUNTIME_GUARD_HOST_HPP_
