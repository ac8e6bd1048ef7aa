// Internal. The process's continuous CPU profile (Options::continuous,
// docs/continuous.md): every thread of the process sampled on its own CPU clock,
// span or no span, each sample labelled with the span its thread runs in.
//
// Why it is shaped like this:
//  * One POSIX CPU timer per thread, made from another thread (the merger's, at
//    each of its looks: ProcessSampler::scan) on the thread's CPU clock and
//    signalling that thread alone (SIGEV_THREAD_ID), as Go and async-profiler do:
//    threads that existed before start(), that the program starts later, and that a
//    library starts are all found in /proc/self/task. An idle thread's timer never
//    fires; a thread that exits loses its timer at the next look. A thread that
//    computes moves itself to a perf_event task clock (continuous_ticks.hpp).
//  * The period is fixed and each signal counts the expirations the kernel merged
//    into it (si_overrun; an event's tick, its counter): a thread's samples times
//    the period is its CPU time to the period, whatever its load. Its first expiry
//    is drawn at random.
//  * The sample signal is spanprof's own (never SIGPROF); the timer's value names
//    its thread's slot, so the handler knows it from a span sampler's tick.
//  * The handler walks the stack and writes one record into the shared record
//    buffer (continuous_buffer.hpp), with the span its thread's label stack names
//    (span_labels.hpp). No lock, no allocation, no stdio. While the process's lock
//    waits are recorded, the lock hooks write theirs there too.
//  * What the handler may reach lives for the process: the slots and the buffer
//    are made once and reused by every later start(), so a signal still queued
//    after a stop finds them.
#ifndef SPANPROF_DETAIL_CAPTURE_PROCESS_SAMPLER_HPP_
#define SPANPROF_DETAIL_CAPTURE_PROCESS_SAMPLER_HPP_

#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/xorshift.hpp>
#include <spanprof/detail/capture/continuous_buffer.hpp>
#include <spanprof/detail/capture/continuous_ticks.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/span_labels.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
#include <spanprof/detail/capture/thread_status.hpp>
#include <spanprof/profile/profile.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What a continuous timer's signal carries (sigev_value): this tag and its slot.
inline constexpr std::uint64_t continuous_tick_tag = 0x5350'5052ull << 32;  // "SPPR"

class ProcessSampler {
 public:
  // The one per process: its slots and buffer outlive every start().
  static ProcessSampler& instance() noexcept {
    static ProcessSampler sampler;
    return sampler;
  }

  ProcessSampler(const ProcessSampler&) = delete;
  ProcessSampler& operator=(const ProcessSampler&) = delete;

  // Starts sampling every thread at each scan; false (and why) when the buffer
  // cannot be made. `signal_number` is the sample signal's, with its handler in.
  bool start(const ContinuousSettings& settings, int signal_number, std::string& why) noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    stop_locked();
    if (!buffer_.make()) {
      why = "cannot allocate the continuous profile's record buffer";
      return false;
    }
    period_ns_ = settings.period_ns;
    ticks_.start(settings.source, settings.period_ns, signal_number);
    max_depth_.store(std::min(settings.max_depth, max_stack_depth_limit), std::memory_order_relaxed);
    span_labels_.store(settings.span_labels, std::memory_order_relaxed);
    signal_number_ = signal_number;
    own_pid_ = ::getpid();
    timer_failures_reported_ = false;
    listed_once_ = false;
    task_dir_fd_ = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    running_.store(true, std::memory_order_release);
    return true;
  }

  // Deletes every timer. The records already written stay for take().
  void stop() noexcept {
    std::lock_guard<std::mutex> held(mutex_);
    stop_locked();
  }

  bool running() const noexcept { return running_.load(std::memory_order_acquire); }

  // In a forked child: the timers were the parent's (a child has none) and its
  // threads are gone but the forking one; the next start() begins afresh.
  void forget_after_fork() noexcept {
    for (auto& [tid, slot] : threads_) {
      if (slot != nullptr) release_slot(*slot, false);
    }
    in_flight_.store(0, std::memory_order_relaxed);  // the parent's other threads' handlers
    threads_.clear();
    blocking_since_.clear();
    if (task_dir_fd_ >= 0) ::close(task_dir_fd_);  // the parent's threads
    task_dir_fd_ = -1;
    if (loadavg_fd_ >= 0) ::close(loadavg_fd_);
    loadavg_fd_ = -2;
  }

  // The merger's look: a timer for every thread that has none, none for threads
  // that are gone. Threads that block the sample signal (spanprof's own among
  // them) are left out: their signals would wait forever.
  struct ScanResult {
    std::size_t threads = 0;        // sampled now
    std::size_t timers_made = 0;
    std::size_t timers_deleted = 0;
    std::size_t refused = 0;         // timers the kernel would not make this time
    int refused_errno = 0;
    bool report_refusal = false;     // the first refusal since start(): say so once
    std::size_t blocking = 0;        // threads left out because they block the signal
  };
  ScanResult scan() noexcept {
    ScanResult result;
    std::lock_guard<std::mutex> held(mutex_);
    if (!running_.load(std::memory_order_relaxed)) return result;
    SPANPROF_TRY {
      // Listing the threads costs ~0.3 µs each. A look lists them only when
      // something changed: their count (an fstat of the open /proc/self/task,
      // whose link count is theirs + 2), or the last pid the kernel gave out in the
      // process's pid namespace (/proc/loadavg), which a new thread takes even when
      // it replaces one that exited. Where that pid does not move (a /proc/loadavg
      // a container serves), a look lists them as often as keeps the listing
      // under 0.1 % of a core.
      struct stat task{};
      const std::int64_t now = monotonic_now_ns();
      const bool counted = task_dir_fd_ >= 0 && ::fstat(task_dir_fd_, &task) == 0;
      const long last_pid = pids_move_ ? last_pid_given_out(loadavg_fd_) : -1;
      const bool pids_known = last_pid >= 0;
      if (counted && task.st_nlink == listed_links_ && (pids_known ? last_pid == listed_last_pid_ : now - listed_at_ns_ < listing_interval_ns_)) {
        ask_again_those_that_ran(result);
        result.threads = threads_sampled_.fetch_add(result.timers_made, std::memory_order_relaxed) + result.timers_made;
        result.blocking = threads_left_out_.fetch_sub(result.timers_made, std::memory_order_relaxed) - result.timers_made;
        return result;
      }
      const bool pid_unchanged = pids_known && last_pid == listed_last_pid_;
      listed_links_ = counted ? task.st_nlink : 0;
      listed_last_pid_ = last_pid;
      listed_at_ns_ = now;
      const std::int64_t listing_started = this_thread_cpu_ns();
      if (!list_threads(task_dir_fd_, present_)) return result;
      // The merger's CPU for the listing: its wall time stretches on a busy machine.
      listing_interval_ns_ = std::min(full_scan_interval_ns, 1000 * (this_thread_cpu_ns() - listing_started));
      for (const pid_t tid : present_) {
        auto [it, inserted] = threads_.try_emplace(tid, nullptr);
        if (!inserted) {
          if (it->second == nullptr) ++result.blocking;
          continue;
        }
        // A thread new since a listing that saw the same last pid: that pid
        // does not tell of new threads here.
        if (listed_once_ && pid_unchanged) pids_move_ = false;
        const std::int64_t ran = thread_cpu_ns(tid);
        if (thread_blocks_signal(tid, signal_number_)) {
          ++result.blocking;  // stays in threads_ as null
          blocking_since_.push_back({tid, ran, 0});
          continue;
        }
        if (!sample_thread(it, result, listed_once_)) threads_.erase(it);  // asked again at the next listing
      }
      ask_again_those_that_ran(result);
      // Threads that were not listed are gone.
      result.blocking = 0;
      for (auto it = threads_.begin(); it != threads_.end();) {
        if (!std::binary_search(present_.begin(), present_.end(), it->first)) {
          if (it->second != nullptr) {
            release_slot(*it->second, true);
            ++result.timers_deleted;
          }
          it = threads_.erase(it);
        } else {
          ++(it->second != nullptr ? result.threads : result.blocking);
          ++it;
        }
      }
      listed_once_ = true;
      learn_stack_tops();
      threads_sampled_.store(result.threads, std::memory_order_relaxed);
      threads_left_out_.store(result.blocking, std::memory_order_relaxed);
    } SPANPROF_CATCH_ALL {}
    return result;
  }

  // Takes what the handlers wrote since the last take (the merger's).
  void take(ContinuousSamples& out) {
    out.dropped += buffer_.take([&](const std::uint64_t* words, std::size_t count) {
      read_continuous_records(words, count, period_ns_, out);
    });
  }

  // The sample signal's handler, for a continuous tick (its timer's: SI_TIMER
  // with the tag; its event's: POLL_IN from the descriptor its slot holds): true
  // when the signal was one (async-signal-safe).
  bool on_signal(const siginfo_t* info, const void* ucontext) noexcept {
    const bool event_tick = info->si_code == POLL_IN;
    ThreadSlot* slot = event_tick ? continuous_event_slot : nullptr;
    if (event_tick) {
      if (slot == nullptr || info->si_fd < 0 || slot->perf_fd.load(std::memory_order_acquire) != info->si_fd)
        return false;  // a span sampler's event, or one since closed
    } else {
      const auto value = reinterpret_cast<std::uintptr_t>(info->si_value.sival_ptr);
      if (info->si_code != SI_TIMER || (value & ~std::uint64_t{0xFFFF'FFFF}) != continuous_tick_tag) return false;
      slot = slot_at(static_cast<std::uint32_t>(value));
    }
    InFlight in_flight(in_flight_);  // stop() closes no descriptor a handler is using
    if (!running_.load(std::memory_order_seq_cst)) return true;
    const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
    if (slot == nullptr || slot->tid.load(std::memory_order_acquire) != tid) return true;  // a timer since deleted
    // The event closed meanwhile (stop, then start): a tick of no period.
    if (event_tick && slot->perf_fd.load(std::memory_order_relaxed) != info->si_fd) return true;
    std::uint64_t periods =
        event_tick ? ticks_.event_periods(*slot) : 1 + static_cast<std::uint64_t>(std::max(0, info->si_overrun));
    if (periods == 0) return true;
    // Only this thread's handler takes from what it owes once the merger set it.
    const std::uint32_t owed = slot->owed_periods.load(std::memory_order_relaxed);
    if (owed != 0) {
      const std::uint32_t paid = std::min(owed, max_owed_periods_per_tick);
      slot->owed_periods.store(owed - paid, std::memory_order_relaxed);
      periods += paid;
    }
    record(*slot, periods, periods * static_cast<std::uint64_t>(period_ns_), ucontext);
    ticks_.choose(*slot, tid);
    return true;
  }

  // A lock wait (or a release that ended others') of any thread, while the process's
  // lock waits are recorded (lock_hooks-inl.hpp): into the same buffer, outside a
  // signal handler, with the span its thread's label stack names. `tid`: the thread's.
  void record_lock_wait(std::uint64_t tid, const LockWait& wait, void* const* frames, std::size_t depth) noexcept {
    InFlight in_flight(in_flight_);
    if (!running_.load(std::memory_order_seq_cst) || depth == 0) return;
    SpanLabel* span = current_span_label();
    RecordedSpan label{};
    if (span != nullptr) label = RecordedSpan{span->trace_id, span->span_id, span->name, span->name_length};
    const RecordedSpan* labelled = span != nullptr ? &label : nullptr;
    if (buffer_.write(continuous_lock_record_words(labelled, wait, depth), [&](std::uint64_t* out) {
          write_continuous_lock_record(out, tid, labelled, wait, frames, depth);
        }) &&
        span != nullptr)
      span->sampled.store(true, std::memory_order_relaxed);
  }

  std::int64_t period_ns() const noexcept { return period_ns_; }
  int max_depth() const noexcept { return max_depth_.load(std::memory_order_relaxed); }
  // At the last scan: threads sampled, and threads left out (they block the signal).
  std::size_t threads_sampled() const noexcept { return threads_sampled_.load(std::memory_order_relaxed); }
  std::size_t threads_left_out() const noexcept { return threads_left_out_.load(std::memory_order_relaxed); }
  std::size_t threads_on_events() const noexcept { return ticks_.threads_on_events(); }

  // fork(): the scan's state is whole in the child (the parent's merger may be
  // scanning), and the child forgets the parent's timers and threads.
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork_in_parent() noexcept { mutex_.unlock(); }
  void reset_after_fork_in_child() noexcept {
    new (&mutex_) std::mutex();
    running_.store(false, std::memory_order_release);
    forget_after_fork();
    threads_sampled_.store(0, std::memory_order_relaxed);
    threads_left_out_.store(0, std::memory_order_relaxed);
  }

 private:
  ProcessSampler() = default;

  static constexpr std::int64_t full_scan_interval_ns = 1'000'000'000;
  static constexpr std::size_t slots_per_chunk = 256;
  static constexpr std::size_t max_chunks = 256;  // 65,536 threads at once
  // A tick weighs at most this many periods of the CPU its thread ran before its
  // timer on top of its own: that CPU is spread over the points where the thread
  // spends its next CPU, never lumped on one.
  static constexpr std::uint32_t max_owed_periods_per_tick = 2;
  static constexpr int max_asks_of_blocking = 3;

  using ThreadSlot = ContinuousThreadSlot;

  // Counts the handlers running: stop() waits for none before it closes events.
  class InFlight {
   public:
    explicit InFlight(std::atomic<std::uint32_t>& count) noexcept : count_(count) {
      count_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~InFlight() { count_.fetch_sub(1, std::memory_order_release); }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    std::atomic<std::uint32_t>& count_;
  };

  void stop_locked() noexcept {
    running_.store(false, std::memory_order_seq_cst);
    wait_for_none(in_flight_);
    listed_links_ = 0;
    if (task_dir_fd_ >= 0) ::close(task_dir_fd_);
    task_dir_fd_ = -1;
    if (loadavg_fd_ >= 0) ::close(loadavg_fd_);
    loadavg_fd_ = -2;
    for (auto& [tid, slot] : threads_)
      if (slot != nullptr) release_slot(*slot, true);
    threads_.clear();
    blocking_since_.clear();
    threads_sampled_.store(0, std::memory_order_relaxed);
    threads_left_out_.store(0, std::memory_order_relaxed);
  }

  ThreadSlot* slot_at(std::uint32_t index) const noexcept {
    const std::size_t chunk = index / slots_per_chunk;
    if (chunk >= max_chunks) return nullptr;
    ThreadSlot* slots = chunks_[chunk].load(std::memory_order_acquire);
    return slots == nullptr ? nullptr : &slots[index % slots_per_chunk];
  }

  ThreadSlot* free_slot() {
    if (!free_.empty()) {
      ThreadSlot* slot = free_.back();
      free_.pop_back();
      return slot;
    }
    const std::size_t chunk = slot_count_ / slots_per_chunk;
    if (chunk >= max_chunks) return nullptr;
    if (chunks_[chunk].load(std::memory_order_relaxed) == nullptr) {
      auto* slots = new (std::nothrow) ThreadSlot[slots_per_chunk];
      if (slots == nullptr) return nullptr;
      for (std::size_t i = 0; i < slots_per_chunk; ++i)
        slots[i].index = static_cast<std::uint32_t>(chunk * slots_per_chunk + i);
      chunks_[chunk].store(slots, std::memory_order_release);
    }
    ThreadSlot* slot = &chunks_[chunk].load(std::memory_order_relaxed)[slot_count_ % slots_per_chunk];
    ++slot_count_;
    return slot;
  }

  ThreadSlot* make_timer(pid_t tid, ScanResult& result) {
    ThreadSlot* slot = free_slot();
    if (slot == nullptr) {
      refuse(ENOMEM, result);
      return nullptr;
    }
    slot->stack_top.store(0, std::memory_order_relaxed);
    slot->sample_sp.store(0, std::memory_order_relaxed);
    slot->owed_periods.store(0, std::memory_order_relaxed);
    slot->adapt_cpu_ns = 0;
    slot->adapt_switches = 0;
    if (!create_thread_signal_timer(thread_cpu_clock(tid), tid, signal_number_,
                                    reinterpret_cast<void*>(continuous_tick_tag | slot->index), slot->timer)) {
      const int error = errno;
      free_.push_back(slot);
      if (error != EINVAL && error != ESRCH) refuse(error, result);  // EINVAL: the thread is gone already
      return nullptr;
    }
    // What the thread's handler reads, published before its first tick. The first
    // expiry at a random point of the first period: threads started together do
    // not all tick at once.
    slot->tid.store(tid, std::memory_order_release);
    if (!ticks_.arm_timer(*slot, random_)) {
      ::timer_delete(slot->timer);
      slot->tid.store(0, std::memory_order_release);
      free_.push_back(slot);
      return nullptr;
    }
    return slot;
  }

  // A timer for the thread `it` names. A thread started since the last look ran
  // without one until now (`found_late`): its ticks make up for that CPU.
  bool sample_thread(std::unordered_map<pid_t, ThreadSlot*>::iterator it, ScanResult& result, bool found_late) {
    const std::int64_t ran = found_late ? thread_cpu_ns(it->first) : 0;
    ThreadSlot* slot = make_timer(it->first, result);
    if (slot == nullptr) return false;
    it->second = slot;
    ++result.timers_made;
    if (ran > 0) slot->owed_periods.store(static_cast<std::uint32_t>((ran + period_ns_ / 2) / period_ns_), std::memory_order_relaxed);
    return true;
  }

  // glibc starts a thread with every signal blocked and gives it its creator's
  // mask once it runs: a thread listed in between seems to block the sample
  // signal. A thread found blocking it is asked again when its CPU clock moves,
  // up to three times (it may be preempted inside that start-up); one that still
  // blocks it then is left out for good.
  void ask_again_those_that_ran(ScanResult& result) {
    for (std::size_t i = 0; i < blocking_since_.size();) {
      FoundBlocking& found = blocking_since_[i];
      const std::int64_t cpu = thread_cpu_ns(found.tid);
      if (cpu >= 0 && cpu == found.cpu) {
        ++i;
        continue;
      }
      const auto it = threads_.find(found.tid);
      const bool gone = cpu < 0 || it == threads_.end() || it->second != nullptr;
      const bool blocks = !gone && thread_blocks_signal(found.tid, signal_number_);
      if (blocks && ++found.asked < max_asks_of_blocking) {
        found.cpu = cpu;
        ++i;
        continue;
      }
      found = blocking_since_.back();
      blocking_since_.pop_back();
      if (!gone && !blocks && !sample_thread(it, result, true)) threads_.erase(it);
    }
  }

  void refuse(int error, ScanResult& result) noexcept {
    ++result.refused;
    result.refused_errno = error;
    if (!timer_failures_reported_) {
      timer_failures_reported_ = true;
      result.report_refusal = true;
    }
  }

  // `in_process`: false in a forked child, where the timer is not and the event is
  // the parent's thread's too.
  void release_slot(ThreadSlot& slot, bool in_process) {
    if (in_process) {
      ::timer_delete(slot.timer);
      // Its thread is gone or the profile stopped: no handler uses the slot. The
      // wait orders the handlers' last use before the close and the slot's reuse
      // for a race detector too, which does not see a thread's exit in /proc.
      wait_for_none(in_flight_);
      ticks_.close_event(slot);
    } else {
      ticks_.forget_event_after_fork(slot);
    }
    slot.tid.store(0, std::memory_order_release);
    free_.push_back(&slot);
  }

  // The top of each stack a sample was seen on, from the mapping around its stack
  // pointer (a thread's stack is one mapping, its top the mapping's end).
  void learn_stack_tops() {
    const auto unknown_top = [](const ThreadSlot* slot) {
      return slot != nullptr && slot->stack_top.load(std::memory_order_relaxed) == 0 &&
             slot->sample_sp.load(std::memory_order_relaxed) != 0;
    };
    if (std::none_of(threads_.begin(), threads_.end(), [&](const auto& entry) { return unknown_top(entry.second); }))
      return;
    const auto ranges = writable_mappings();
    for (const auto& [tid, slot] : threads_) {
      if (!unknown_top(slot)) continue;
      const std::uint64_t sp = slot->sample_sp.load(std::memory_order_relaxed);
      for (const auto& [low, high] : ranges)
        if (sp >= low && sp < high) {
          slot->stack_top.store(high, std::memory_order_relaxed);
          break;
        }
    }
  }

  // ---- the handler's part -----------------------------------------------------------

  void record(ThreadSlot& slot, std::uint64_t periods, std::uint64_t cpu_ns, const void* ucontext) noexcept {
    void* trace[max_stack_depth_limit];
    const int max_depth = max_depth_.load(std::memory_order_relaxed);
#if SPANPROF_HAS_CFI_WALKER
    const cfi::Registers registers = registers_from_ucontext(ucontext);
    const std::uint64_t stack_top = slot.stack_top.load(std::memory_order_relaxed);
    if (stack_top == 0 && registers.has(cfi::sp_register))
      slot.sample_sp.store(registers.value[cfi::sp_register], std::memory_order_relaxed);
    const int depth = walk_stack(registers, stack_top, trace, max_depth);
#else
    const int depth = walk_with_gperftools(ucontext, trace, max_depth);
#endif
    if (depth <= 0) return;
    SpanLabel* span = current_span_label();
    RecordedSpan label{};
    if (span != nullptr) label = RecordedSpan{span->trace_id, span->span_id, span->name, span->name_length};
    const RecordedSpan* labelled = span != nullptr ? &label : nullptr;
    const std::uint64_t weight = cpu_record_weight(periods, cpu_ns);
    const auto tid = static_cast<std::uint64_t>(slot.tid.load(std::memory_order_relaxed));
    if (buffer_.write(continuous_record_words(labelled, depth), [&](std::uint64_t* out) {
          write_continuous_record(out, tid, labelled, weight, reinterpret_cast<std::uintptr_t>(trace[0]), trace + 1,
                                  depth);
        }) &&
        span != nullptr)
      span->sampled.store(true, std::memory_order_relaxed);
  }

  // The span the calling thread's samples carry now (span_labels.hpp), or null.
  SpanLabel* current_span_label() const noexcept {
    SpanLabelStack* labels = current_span_labels;
    return labels != nullptr ? labels->label_for_sample(span_labels_.load(std::memory_order_relaxed)) : nullptr;
  }

  // The handler's: written by start(), read in the handler.
  std::atomic<bool> running_{false};
  std::atomic<int> max_depth_{64};
  std::atomic<ContinuousSpanLabels> span_labels_{ContinuousSpanLabels::local_root};
  std::int64_t period_ns_ = 10'000'000;
  std::atomic<ThreadSlot*> chunks_[max_chunks] = {};
  ContinuousBuffer buffer_;
  std::atomic<std::size_t> threads_sampled_{0};
  std::atomic<std::size_t> threads_left_out_{0};
  std::atomic<std::uint32_t> in_flight_{0};  // handlers between their check of running_ and their return
  ContinuousTicks ticks_;

  // The merger's, under mutex_.
  std::mutex mutex_;
  int signal_number_ = 0;
  pid_t own_pid_ = 0;             // read by the handler too, written before running_
  int task_dir_fd_ = -1;          // /proc/self/task, open while running
  bool listed_once_ = false;      // the threads were listed since start()
  std::size_t slot_count_ = 0;
  std::vector<ThreadSlot*> free_;
  std::unordered_map<pid_t, ThreadSlot*> threads_;  // null: left out (blocks the signal)
  std::vector<pid_t> present_;
  struct FoundBlocking {
    pid_t tid;
    std::int64_t cpu;  // its CPU clock when last asked
    int asked;         // times asked again
  };
  std::vector<FoundBlocking> blocking_since_;  // threads found blocking the signal
  nlink_t listed_links_ = 0;      // /proc/self/task's link count at the last listing (0: none since start)
  long listed_last_pid_ = -1;     // and the last pid given out then
  int loadavg_fd_ = -2;           // /proc/loadavg (-2: not opened yet)
  std::int64_t listed_at_ns_ = 0;
  std::int64_t listing_interval_ns_ = 0;  // without a moving last pid: at most 0.1 % of a core
  bool pids_move_ = true;         // /proc/loadavg's last pid moves with each new thread
  std::uint64_t random_ = 0x9E3779B97F4A7C15ull;
  bool timer_failures_reported_ = false;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_PROCESS_SAMPLER_HPP_
