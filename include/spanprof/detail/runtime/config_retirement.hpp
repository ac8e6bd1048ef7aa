// Frees the running configurations that spanprof::start() and shutdown()
// replaced, once no guard can still read them.
//
// A configuration owns the samplers, tail policy and adaptive trigger it was
// started with (an adaptive trigger is ~70 kB): a service that restarts spanprof
// to change a setting must not grow with every restart. A guard on another thread
// may have loaded the old pointer just before the restart, so the old one is
// freed only when
//   1. every thread has left the section in which it may have loaded it
//      (counters.hpp, ConfigReader): after membarrier(2), a thread either shows
//      that section as open or loads the new pointer; and
//   2. no open guard pins its generation.
// The guards pay two thread-local stores for this; the fence is the restart's.
#ifndef SPANPROF_DETAIL_RUNTIME_CONFIG_RETIREMENT_HPP_
#define SPANPROF_DETAIL_RUNTIME_CONFIG_RETIREMENT_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/runtime/running_config.hpp>

#if SPANPROF_ENABLED

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// A full memory barrier on every running thread of the process. False when the
// kernel offers none (before Linux 4.3, or a seccomp filter): then nothing is freed.
inline bool barrier_on_every_thread() noexcept {
  if (::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0) return true;
  // Registration is per process, and a forked child starts unregistered.
  if (errno == EPERM && ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0 &&
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0)
    return true;
  // Slower (a scheduler grace period), but restarts are rare.
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0) == 0;
}

class ConfigRetirement {
 public:
  // How long reclaim() waits for a thread caught inside its section (a few
  // instructions, or a user head sampler) before leaving the rest to the next
  // restart.
  static constexpr std::chrono::milliseconds section_wait{5};

  // Under the runtime's lifecycle mutex, like every call below.
  void retire(std::unique_ptr<RunningConfig> config) noexcept {
    if (!config) return;
    SPANPROF_TRY {
      retired_.push_back(std::move(config));
    } SPANPROF_CATCH_ALL {
      (void)config.release();  // kept forever rather than freed under a reader
    }
  }

  // Frees every retired configuration no thread can read any more.
  void reclaim() noexcept {
    if (retired_.empty()) return;
    if (!barrier_on_every_thread()) {
      if (!reported_no_barrier_) {
        reported_no_barrier_ = true;
        report_error(ErrorCode::internal,
                     "membarrier(2) is unavailable: configurations replaced by spanprof::start() are kept, not freed");
      }
      return;
    }
    std::vector<std::unique_ptr<RunningConfig>> freed;
    {
      CounterRegistry& registry = counter_registry();
      std::lock_guard<std::mutex> held(registry.mutex);
      if (!all_sections_passed(registry)) return;
      SPANPROF_TRY {
        freed.reserve(retired_.size());
      } SPANPROF_CATCH_ALL {
        return;
      }
      std::size_t kept = 0;
      for (auto& config : retired_) {
        if (pinned(registry, config->sampler.generation)) retired_[kept++] = std::move(config);
        else freed.push_back(std::move(config));
      }
      retired_.resize(kept);
    }
    // The policies' destructors are the user's code: run outside the registry's lock.
    freed.clear();
  }

  std::size_t retained() const noexcept { return retired_.size(); }

  // A forked child's copy: the parent's threads are gone, but what they read is
  // not ours to free (a guard open on the forking thread may hold any of it).
  void forget_after_fork() noexcept {
    for (auto& config : retired_) (void)config.release();
    retired_.clear();
  }

 private:
  // Every thread seen inside a section has left it since the barrier.
  static bool all_sections_passed(const CounterRegistry& registry) noexcept {
    const auto deadline = std::chrono::steady_clock::now() + section_wait;
    for (const ThreadCounters* t = registry.head; t; t = t->next) {
      const std::uint64_t seen = t->config_reader.section.load(std::memory_order_acquire);
      if ((seen & 1) == 0) continue;
      while (t->config_reader.section.load(std::memory_order_acquire) == seen) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::yield();
      }
    }
    return true;
  }

  static bool pinned(const CounterRegistry& registry, std::uint64_t generation) noexcept {
    if (registry.exited_pins_floor != 0 && generation >= registry.exited_pins_floor) return true;
    for (const ThreadCounters* t = registry.head; t; t = t->next)
      if (t->config_reader.pins(generation)) return true;
    return false;
  }

  std::vector<std::unique_ptr<RunningConfig>> retired_;
  bool reported_no_barrier_ = false;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_RUNTIME_CONFIG_RETIREMENT_HPP_
