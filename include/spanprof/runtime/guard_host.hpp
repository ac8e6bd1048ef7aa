// What a guard needs from the process-wide runtime, and nothing more: the
// configuration of the current spanprof::start(), and a way to hand over what a
// span captured.
//
// The runtime (runtime/runtime.hpp) implements GuardHost and registers itself when
// a translation unit includes it. Keeping the guard below the runtime is what lets
// <spanprof/guard.hpp> stay light: a source file that only opens guards compiles
// none of the uploaders, encoders, spool or HTTP client. The program still needs
// <spanprof/spanprof.hpp> in one source file (where it calls spanprof::start); a
// guard in a program without it reports so once and profiles nothing.
#ifndef SPANPROF_RUNTIME_GUARD_HOST_HPP_
#define SPANPROF_RUNTIME_GUARD_HOST_HPP_

#include <spanprof/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/capture/captured_profile.hpp>
#include <spanprof/capture/thread_stack_sampler.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/capture/heap_sampler.hpp>
#include <spanprof/config.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>

#if SPANPROF_ENABLED

#include <atomic>
#include <memory>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What one start() configured, as guards read it. Immutable once published;
// freed after a restart once no guard reads it (config_retirement.hpp).
struct RunningConfig {
  ProfileKinds profiles = cpu;
  CpuEngine cpu_engine = CpuEngine::sampling;
  HeapEngine heap_engine = HeapEngine::sampling;
  StackSamplerSettings sampler;
  HeapSettings heap;
  std::shared_ptr<HeadSampler> head_sampler;  // null: profile every span
  // head_sampler's trace_id_threshold() (0 when null): not decides_by_call, the
  // guard decides inline.
  std::uint64_t head_threshold = 0;
  std::shared_ptr<TailPolicy> tail_policy;    // null: keep every profile
  std::shared_ptr<AdaptiveTrigger> trigger;   // null: off
};

class GuardHost {
 public:
  // A guard found no running configuration: start from the environment if
  // spanprof never started (the first guard of a process that never called
  // start()). The guard then loads the configuration again.
  virtual void start_for_guard() noexcept = 0;
  // Called on the request thread; must not block. False: dropped (counted).
  virtual bool submit(std::unique_ptr<CapturedProfile> captured) noexcept = 0;

 protected:
  ~GuardHost() = default;
};

struct GuardHostState {
  std::atomic<const RunningConfig*> config{nullptr};  // null: not running
  std::atomic<GuardHost*> host{nullptr};              // null: no runtime in this program
  std::atomic<bool> reported_missing{false};
};

// Constant-initialized: the guard's fast path is one load of `config`.
SPANPROF_API inline GuardHostState& guard_host_state() noexcept {
  static GuardHostState state;
  return state;
}

// With SPANPROF_COMPILED_LIB defined in the compiled library: a guard's reference
// to it is what links the library's runtime into a program that never calls
// start() (a static library's object is linked only when referenced).
#if !SPANPROF_DEFINE_RUNTIME
SPANPROF_API void config_for_first_guard() noexcept;
#else
SPANPROF_API SPANPROF_NOINLINE SPANPROF_LIB_INLINE void config_for_first_guard() noexcept {
  GuardHostState& state = guard_host_state();
  if (GuardHost* host = state.host.load(std::memory_order_acquire)) {
    host->start_for_guard();
    return;
  }
  if (!state.reported_missing.exchange(true, std::memory_order_relaxed)) {
    report_error(ErrorCode::invalid_configuration,
                 "a guard opened but spanprof's runtime is not in this program: include <spanprof/spanprof.hpp> "
                 "in one source file; nothing is profiled");
  }
}
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
SPANPROF_ALWAYS_INLINE inline bool head_declines(const RunningConfig& config, const SpanContext& span,
                                                 std::string_view span_name) noexcept {
  if (SPANPROF_LIKELY(config.head_threshold != HeadSampler::decides_by_call))
    return trace_id_randomness(span.trace_id) < config.head_threshold;
  return !config.head_sampler->should_profile(span, span_name);
}

// Enters the thread's reading section and loads the configuration (null: not
// running). The caller pins what it keeps and leaves the section with `inside`.
SPANPROF_ALWAYS_INLINE inline const RunningConfig* enter_config_section(ConfigReader& reader,
                                                                        std::uint64_t& inside) noexcept {
  inside = reader.enter();
  const RunningConfig* config = guard_host_state().config.load(std::memory_order_acquire);
  if (SPANPROF_LIKELY(config != nullptr)) return config;
  // start() frees what no section reads: not this thread's own, then.
  reader.leave(inside);
  config_for_first_guard();
  inside = reader.enter();
  return guard_host_state().config.load(std::memory_order_acquire);
}

inline bool submit_captured(std::unique_ptr<CapturedProfile> captured) noexcept {
  if (GuardHost* host = guard_host_state().host.load(std::memory_order_acquire)) return host->submit(std::move(captured));
  discard_captured_profile(*captured);
  return false;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_RUNTIME_GUARD_HOST_HPP_
