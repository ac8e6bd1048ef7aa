// Internal. What one spanprof::start() configured, as guards and requests read it
// on their slow paths, and the runtime as they hand profiles to it.
#ifndef SPANPROF_DETAIL_RUNTIME_RUNNING_CONFIG_HPP_
#define SPANPROF_DETAIL_RUNTIME_RUNNING_CONFIG_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/detail/capture/captured_profile.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/detail/capture/heap_sampler.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>
#include <spanprof/config.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/runtime/guard_host.hpp>

#include <memory>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What guards and requests read on their slow paths (RunningConfig holds it),
// fed by the start plan (start_plan.hpp).
struct CaptureSettings {
  ProfileKinds profiles{};
  CpuEngine cpu_engine{};
  HeapEngine heap_engine{};
  StackSamplerSettings sampler{};
  HeapSettings heap{};
  bool time_split{};  // guards read their thread's times at open and close
  std::shared_ptr<HeadSampler> head_sampler;  // null: profile every span
  std::shared_ptr<TailPolicy> tail_policy;    // null: keep every profile
  std::shared_ptr<AdaptiveTrigger> trigger;   // null: off
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#if SPANPROF_ENABLED

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Immutable once published; freed after a restart once no guard reads it
// (config_retirement.hpp).
struct RunningConfig : GuardGate, CaptureSettings {};

// Every published gate is a RunningConfig's.
inline const RunningConfig& running_config(const GuardGate& gate) noexcept {
  return static_cast<const RunningConfig&>(gate);
}

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

inline bool submit_captured(std::unique_ptr<CapturedProfile> captured) noexcept {
  if (GuardHost* host = guard_host_state().host.load(std::memory_order_acquire)) return host->submit(std::move(captured));
  discard_captured_profile(*captured);
  return false;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_RUNTIME_RUNNING_CONFIG_HPP_
