// A thread's sampler: the log of the stacks sampled on the thread, the span its
// guards published, and (defined in detail/capture/signal_side.hpp) the signal
// handler that records a stack on a CPU tick (from the thread's CpuTickSource,
// detail/capture/cpu_tick_source.hpp) or a wall tick (from the wall ticker,
// detail/capture/wall_ticker.hpp). detail/capture/stack_sampler.hpp
// keeps the samplers of all threads and makes this one when a thread needs it;
// it says why the engine is shaped as it is.
//
// Three threads touch a sampler, each its own part, and the sections below say
// which: its own thread (the guards, and the handler that interrupts them), the
// watchdog (the worker) and the wall ticker. The handler is async-signal-safe: it
// touches only this thread's preallocated log, lock-free atomics and a stack
// walker that takes no lock (detail/capture/stack_walker.hpp).
#ifndef SPANPROF_DETAIL_CAPTURE_THREAD_STACK_SAMPLER_HPP_
#define SPANPROF_DETAIL_CAPTURE_THREAD_STACK_SAMPLER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/base/loader_lock_gate.hpp>
#include <spanprof/detail/capture/cpu_tick_source.hpp>
#include <spanprof/detail/capture/internal_lock_waits.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
#include <spanprof/detail/capture/thread_status.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/profile/profile.hpp>

// Compiled out with the SDK: nothing here may reach gperftools then (the walker's
// fallback, stack_walker.hpp, includes it).
#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>

#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class ThreadStackSampler {
 public:
  // `counters` is the creating thread's block in the counter registry: the signal
  // handler reaches it through this pointer, never through thread_local storage.
  ThreadStackSampler(const StackSamplerSettings& settings, std::uint64_t* words, ThreadCounters& counters) noexcept
      : settings_(settings),
        words_(words),
        counters_(&counters),
        tid_(static_cast<pid_t>(::syscall(SYS_gettid))),
#if SPANPROF_HAS_CFI_WALKER
        stack_top_(this_thread_stack_top()),
        system_call_objects_(&SystemCallObjects::process()),
#endif
        pid_(::getpid()),
        long_span_ns_(std::max(cpu_watch_slack_ns(), kernel_tick_ns() * 5 / 4)),
        cpu_(settings.source, settings.signal_number, settings.period_ns, tid_,
             0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(tid_) << 32) ^
                 static_cast<std::uint64_t>(monotonic_now_ns())) {}

  ThreadStackSampler(const ThreadStackSampler&) = delete;
  ThreadStackSampler& operator=(const ThreadStackSampler&) = delete;

  ~ThreadStackSampler() { release_log_and_source(); }

  // The thread exits while a guard it opened is still open on another thread, which
  // will mark its slot dead: the slots stay (this object is left behind, a few KiB),
  // the timer, the log and the descriptor go.
  void release_log_and_source() noexcept {
    cpu_.close();  // no tick after the log is freed
    if (ticker_.syscall_fd >= 0) ::close(ticker_.syscall_fd);
    ticker_.syscall_fd = -1;
    delete[] words_;
    words_ = nullptr;
  }

  // Picks and creates the CPU tick source for this thread (not armed yet);
  // CpuTickSource::open says how. `perf_errno` receives the reason perf_event was
  // refused, if it was.
  CpuSampleSource open_source(int& perf_errno) noexcept { return cpu_.open(perf_errno); }

  bool has_source() const noexcept { return cpu_.has_source(); }

  // In a forked child, on a sampler the parent made: its perf event is the
  // parent's too (disabling it would stop the parent's samples), its timer does
  // not exist here, and its thread ids are the parent's. Closes the child's copies
  // and keeps the log, which an open guard on the forking thread still reads.
  void forget_source_after_fork() noexcept {
    cpu_.forget_after_fork();
    if (ticker_.syscall_fd >= 0) ::close(ticker_.syscall_fd);
    ticker_.syscall_fd = -1;
    armed_.store(false, std::memory_order_relaxed);
    queued_ticks_.store(0, std::memory_order_relaxed);  // a child has no pending signals
    internal_lock_waits_.reset_after_fork();
    registry_prev = registry_next = nullptr;
  }
  bool in_wall_span() const noexcept { return wall_spans_.load(std::memory_order_relaxed) != 0; }
  CpuSampleSource source() const noexcept { return cpu_.source(); }
  // What a CPU or wall profile of this sampler says it was taken by, and one sample's period.
  const char* engine_name(ProfileKind kind) const noexcept {
    if (kind == ProfileKind::wall) return "sampling:wall";
    return cpu_.source() == CpuSampleSource::perf_event ? "sampling:perf_event" : "sampling:posix_timer";
  }
  std::int64_t period_ns(ProfileKind kind) const noexcept {
    return kind == ProfileKind::wall ? settings_.wall_period_ns : settings_.period_ns;
  }
  const StackSamplerSettings& settings() const noexcept { return settings_; }
  bool armed() const noexcept { return armed_.load(std::memory_order_relaxed); }

  // Starts delivering samples to this thread. Called on the request thread, only
  // when the sampler is not armed (first guard, or after an idle disarm).
  bool arm() noexcept {
    if (SPANPROF_UNLIKELY(signal_blocked_.load(std::memory_order_relaxed) ||
                          sample_signal_lost().load(std::memory_order_relaxed) == settings_.signal_number)) {
      armed_.store(false, std::memory_order_relaxed);
      return false;
    }
    idle_ticks_.store(0, std::memory_order_relaxed);
    const bool ok = cpu_.start();  // the periods start afresh
    armed_.store(ok, std::memory_order_relaxed);
    return ok;
  }

  // Async-signal-safe: used from the handler when the thread has been idle.
  void disarm() noexcept {
    cpu_.stop();
    armed_.store(false, std::memory_order_relaxed);
  }

  // ---- used by the guard on this thread ---------------------------------------

  // Opens a span slot on top of the thread's stack (this thread only). Invalid
  // ticket: max_open_spans are open already.
  // `now_ns`: the monotonic time if the caller has read it (-1: read it here, if
  // the watch needs it). `holder`: the guard, if the span's edges may take the
  // timer's points (settle_edge).
  SpanSlotTicket push(ProfileKinds kinds, std::int64_t now_ns = -1, const void* holder = nullptr) noexcept {
    forget_dead_spans();
    if (SPANPROF_UNLIKELY(slots_in_use_ == all_span_slots)) return {};
    const auto index = static_cast<std::uint32_t>(__builtin_ctz(~slots_in_use_));
    const std::uint32_t top = top_.load(std::memory_order_relaxed);
    ActiveSpan& span = spans_[index];
    span.kinds = kinds;
    span.recorded = top != 0 ? kinds | spans_[top - 1].recorded : kinds;
    span.log_start = used_.load(std::memory_order_relaxed);
    span.dropped_at_start = dropped_.load(std::memory_order_relaxed);
    span.stop = nullptr;
    span.parent.store(top, std::memory_order_relaxed);
    span.frame = on_this_stack(holder) ? reinterpret_cast<std::uintptr_t>(holder) : 0;
    span.edge_holder = 0;
    if (top == 0 && long_spans_ && settings_.watch_cpu && span.frame != 0) {
      span.cpu_at_open_ns = settle_edge(nullptr);
      if (span.cpu_at_open_ns >= 0) span.edge_holder = reinterpret_cast<std::uintptr_t>(holder);
    }
    const std::uint32_t sequence = next_sequence_++ & 0x3FFF'FFFF;
    span.state.store(sequence << 2 | span_slot_open, std::memory_order_relaxed);
    slots_in_use_ |= std::uint32_t{1} << index;
    if (top == 0) {
      // What a sample may carry into the span starts here (keep_within_outer_span).
      outer_changed_ns_.store(now_ns >= 0 ? now_ns : monotonic_now_ns(), std::memory_order_relaxed);
      if (settings_.watch_cpu) cpu_captured_at_outer_open_ = cpu_samples_captured();
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    top_.store(index + 1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return {index, sequence};
  }

  // The slot of an open span (this thread only).
  ActiveSpan& span(SpanSlotTicket ticket) noexcept { return spans_[ticket.index]; }

  // Whether the innermost open span, or one around it, records lock waits (this
  // thread only): the lock hooks' first test.
  bool lock_span_open() const noexcept {
    const ActiveSpan* span = innermost_open_span();
    return span != nullptr && span->recorded.contains(ProfileKind::lock);
  }

  // The innermost open span that records lock waits itself (this thread only;
  // lock_hooks-inl.hpp), or null.
  const ActiveSpan* innermost_lock_span() const noexcept {
    const ActiveSpan* span = innermost_open_span();
    for (std::uint32_t steps = 0; span != nullptr && steps < max_open_spans; ++steps) {
      if (span->kinds.contains(ProfileKind::lock) && (span->state.load(std::memory_order_relaxed) & 3) == span_slot_open)
        return span;
      const std::uint32_t parent = span->parent.load(std::memory_order_relaxed);
      span = parent != 0 ? &spans_[parent - 1] : nullptr;
    }
    return nullptr;
  }

  // The guard of the innermost span begins to close it (its decision, its
  // engines); the close calls the program's code meanwhile. signal_side.hpp says
  // what a tick in between stands for.
  inline void begin_close(SpanSlotTicket ticket, const void* holder) noexcept;
  inline void pause_close() noexcept;

  // Closes the span on its own thread; true when it was the innermost open span.
  inline bool pop(SpanSlotTicket ticket) noexcept;

  // From a thread other than this sampler's: the span (still open) is never
  // recorded again, and the owning thread frees its slot. The caller touches the
  // sampler no more after this: once the slot is dead, its thread may exit and
  // free the sampler.
  bool close_elsewhere(SpanSlotTicket ticket) noexcept {
    std::uint32_t expected = ticket.sequence << 2 | span_slot_open;
    return spans_[ticket.index].state.compare_exchange_strong(expected, ticket.sequence << 2 | span_slot_dead,
                                                               std::memory_order_acq_rel, std::memory_order_relaxed);
  }

  // Whether a guard still holds a slot (this thread only): dead slots go first.
  bool has_open_span() noexcept {
    forget_dead_spans();
    return top_.load(std::memory_order_relaxed) != 0;
  }

  // This thread's block in the counter registry: counting through it costs no TLS
  // lookup on the guard's path.
  ThreadCounters& counters() noexcept { return *counters_; }

  std::size_t used_words() const noexcept { return used_.load(std::memory_order_relaxed); }
  // From another thread, while a span of this thread stays open (so the log is
  // neither reset nor freed): the records written so far are complete.
  std::size_t used_words_published() const noexcept { return used_.load(std::memory_order_acquire); }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  const std::uint64_t* words() const noexcept { return words_; }

  // The outermost span closed: its samples have been copied out.
  void reset_log() noexcept {
    wall_busy_ = true;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    used_.store(0, std::memory_order_relaxed);
    last_wall_record_ = no_wall_record;
    last_cpu_record_ = no_record;
    provisional_record_ = no_record;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    wall_busy_ = false;
  }

  // A guard closed here and copied its samples out.
  void span_closed() noexcept { forget_dead_spans(); }

  // A span's edges take the timer's points passed near them, on the side of the
  // edge where they were passed, by sending the thread its own tick (signal_side.hpp
  // says when and why): at an open (`closing` null) or at the close of `closing`.
  // Each returns the thread's CPU clock read at the edge; -1 when the edges are
  // left to the kernel.
  inline std::int64_t settle_edge(const ActiveSpan* closing) noexcept;
  inline std::int64_t edge_cut_ns() const noexcept;
  inline void take_ticks_to(std::int64_t cut) noexcept;

  // The CPU samples this thread's handler has recorded (its counter block).
  std::uint64_t cpu_samples_captured() const noexcept {
    return counters_->values[static_cast<std::size_t>(Counter::cpu_samples_captured)].load(std::memory_order_relaxed);
  }

  bool on_this_stack(const void* address) const noexcept {
#if SPANPROF_HAS_CFI_WALKER
    const auto at = reinterpret_cast<std::uintptr_t>(address);
    return at > reinterpret_cast<std::uintptr_t>(&at) && at < stack_top_;
#else
    (void)address;
    return false;
#endif
  }

  // ---- wall spans, on this thread -------------------------------------------------

  // A wall-profiled span opens. `now_ns` is CLOCK_MONOTONIC. Returns true when this
  // thread had no wall span open before (the ticker then has one more thread).
  bool wall_span_opened(std::int64_t now_ns) noexcept {
    begin_wall_update();
    const std::uint32_t open = wall_spans_.load(std::memory_order_relaxed);
    // The time so far belongs to the stack sampled last (an outer wall span's).
    if (open != 0) {
      settle_wall_time(now_ns);
    } else {
      wall_accounted_ns_ = now_ns;
      wall_accounted_cpu_ns_ = this_thread_cpu_ns();
    }
    wall_spans_.fetch_add(1, std::memory_order_release);  // a guard elsewhere may decrement it
    end_wall_update();
    return open == 0;
  }

  // A wall-profiled span closes: the time since the last sample goes to the stack
  // sampled last. Returns true when it was the thread's last open wall span.
  bool wall_span_closed(std::int64_t now_ns) noexcept {
    begin_wall_update();
    settle_wall_time(now_ns);
    const std::uint32_t open = decrement_wall_spans();
    end_wall_update();
    return open == 1;
  }

  // A wall-profiled span of this thread closed on another thread: the time since the
  // last sample stays with it (only this thread may settle it). True when it was the
  // thread's last open wall span.
  bool wall_span_closed_elsewhere() noexcept { return decrement_wall_spans() == 1; }

  // ---- signal handler ----------------------------------------------------------

  // A CPU tick (the kernel's, the watch's or an edge's) or a wall tick for this
  // thread; async-signal-safe (signal_side.hpp).
  inline void on_signal(const siginfo_t* info, const void* ucontext) noexcept;
  inline void keep_within_outer_span(CpuTickSource::TickWeight& weight) const noexcept;

  // ---- the watchdog's side (the worker's thread, under the sampler list's mutex) ----

  // True when the thread blocks the sample signal for good: it is disarmed then
  // (signal_side.hpp).
  inline bool refuse_if_signal_blocked() noexcept;
  pid_t thread_id() const noexcept { return tid_; }

  // ---- the ticker's side (its thread only, under the sampler list's mutex) ----

  // The CPU watch, for the POSIX timer. The kernel checks a CPU timer only at a
  // scheduler tick that finds the thread on its core: with more runnable threads
  // than cores a thread's slices can fall between ticks, and a sampling point is
  // then delivered tens or hundreds of milliseconds of the thread's CPU late, in
  // whatever span is open by then. The ticker reads the thread's CPU clock at
  // short wall intervals and, when it has passed the timer's point by more than
  // the slack below, sends the tick itself: once per point, and only to a thread on
  // its core.
  enum class CpuWatch : std::uint8_t {
    nothing,    // not looked at, or its point is not overdue
    late,       // overdue, but the thread is off its core: looked at again next time
    signalled,  // overdue: the tick was sent
  };
  // Between spans too, since a point passed there and delivered late would land in
  // the next span with the time between in its weight; but a thread that stood
  // still at its last two looks with no span open (most of a server's pool, waiting
  // for work) is read one look in eight (`look` counts the ticker's looks). `now`:
  // the ticker's monotonic clock.
  inline CpuWatch cpu_watch(std::uint64_t look, std::int64_t now) noexcept;  // ticker_side.hpp

  // How late the kernel may be with a point before the ticker sends it: half a
  // period, at most 2 ms. Sooner, and the ticker would mostly race the kernel's own
  // tick on a machine with a core to spare; and its signals, which wait for the
  // thread's next instant on a core, land more often than the kernel's at the
  // system call that let the scheduler in (docs/engines.md).
  std::int64_t cpu_watch_slack_ns() const noexcept { return std::min<std::int64_t>(settings_.period_ns / 2, 2'000'000); }

  // The CPU the last outermost span must have run for the next one's edges to be
  // read (settle_edge): the watch's slack, and never less than a little more than
  // the kernel's own tick. A shorter span passes points the kernel delivers within
  // a tick on a machine with a core to spare, at a moment of the thread's work; its
  // edges would take them at the open or the close instead, shifted by the slack
  // into the gap before (a loop of 0.5 ms spans at 1 kHz had half its samples at
  // the guard's close so, and the gap's points came with them).
  std::int64_t long_span_ns() const noexcept { return long_span_ns_; }

  // Whether the CPU watch looks at this thread (an armed POSIX timer), and whether
  // it has a span open now (the ticker parks once none has for a while).
  bool cpu_watch_wanted() const noexcept { return settings_.watch_cpu && cpu_.next_point_ns() != 0 && armed(); }
  bool span_open_now() const noexcept { return top_.load(std::memory_order_relaxed) != 0; }
  // Whether the thread's outermost span has been open for `ns` or more of wall time
  // at the ticker's monotonic clock `now`.
  bool outermost_span_older_than(std::int64_t now, std::int64_t ns) const noexcept {
    return span_open_now() && now - outer_changed_ns_.load(std::memory_order_relaxed) >= ns;
  }

  // ---- the wall ticker's side (its thread only, under the sampler list's mutex) ----

  // One wall tick for this thread: nothing when it has no wall span open; when it is
  // still blocked where its last wall sample found it, a confirmation and no signal
  // (a signal would make an interrupted nanosleep, poll or epoll_wait return
  // EINTR); otherwise a signal, whose handler records the stack. True when a
  // signal was sent.
  enum class WallTick : std::uint8_t { none, confirmed, signalled, failed };
  // A wall tick's data: the wall generation the ticker looked at (its low 30 bits)
  // and the ThreadState it found the thread in (the top two).
  static constexpr std::uint32_t wall_tick_generation_mask = 0x3FFF'FFFF;
  static constexpr unsigned wall_tick_state_shift = 30;
  inline WallTick wall_tick(std::int64_t now_ns, std::int64_t mean_period_ns) noexcept;  // ticker_side.hpp
  // A look for a wait on glibc's own locks (internal_lock_waits.hpp); true while one lasts.
  inline bool look_for_internal_lock_wait(std::int64_t now_ns, bool due) noexcept;  // ticker_side.hpp
  InternalLockWaits& internal_lock_waits() noexcept { return internal_lock_waits_; }

 private:
  // The ticker's signal to this thread, carrying `value` (a tag and its data).
  bool send_tick(std::uint64_t value) noexcept {
    queued_ticks_.fetch_add(1, std::memory_order_relaxed);
    if (queue_signal_to_thread(pid_, tid_, settings_.signal_number, value)) return true;
    queued_ticks_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }

  // Returns the count before.
  std::uint32_t decrement_wall_spans() noexcept {
    std::uint32_t open = wall_spans_.load(std::memory_order_relaxed);
    while (open != 0 && !wall_spans_.compare_exchange_weak(open, open - 1, std::memory_order_release,
                                                            std::memory_order_relaxed)) {
    }
    return open;
  }

  // The span the handler records for: the innermost slot still open (a dead one
  // above it ended on another thread and waits for this thread to free it).
  const ActiveSpan* innermost_open_span() const noexcept {
    std::uint32_t at = top_.load(std::memory_order_relaxed);
    for (std::uint32_t steps = 0; at != 0 && steps < max_open_spans; ++steps) {
      const ActiveSpan& span = spans_[at - 1];
      if ((span.state.load(std::memory_order_relaxed) & 3) == span_slot_open) return &span;
      at = span.parent.load(std::memory_order_relaxed);
    }
    return nullptr;
  }

  // Dead slots go, and once no span is open nobody reads the log: it starts over.
  void forget_dead_spans() noexcept {
    reap_dead_spans();
    if (top_.load(std::memory_order_relaxed) == 0 && used_.load(std::memory_order_relaxed) != 0) reset_log();
  }

  // Unlinks and frees the dead slots anywhere in the stack (this thread only): the
  // slot of a span that ended elsewhere is reused as soon as this thread looks. A
  // handler that interrupts sees each link before or after its change, both valid.
  void reap_dead_spans() noexcept {
    std::atomic<std::uint32_t>* link = &top_;
    std::uint32_t at = link->load(std::memory_order_relaxed);
    for (std::uint32_t steps = 0; at != 0 && steps < max_open_spans; ++steps) {
      ActiveSpan& span = spans_[at - 1];
      const std::uint32_t parent = span.parent.load(std::memory_order_relaxed);
      if ((span.state.load(std::memory_order_acquire) & 3) == span_slot_dead) {
        link->store(parent, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        span.state.store(span_slot_free, std::memory_order_relaxed);
        slots_in_use_ &= ~(std::uint32_t{1} << (at - 1));
      } else {
        link = &span.parent;
      }
      at = parent;
    }
  }

  // The handler's own steps (signal_side.hpp).
  inline int walk_interrupted_stack(const void* ucontext, void** trace) noexcept;
  // `past_the_call`: the walk starts at the caller of the system call the thread
  // stands at (pass_over_system_call), and the record is provisional (not the
  // span's last CPU record).
  inline std::size_t record_sample(std::uint64_t weight, const void* ucontext, bool past_the_call = false) noexcept;
  // Where a tick's points passed, when not where it finds the thread: before the
  // system call it stands at, or before a call that only waits.
  enum class PassedBefore : std::uint8_t { nothing, a_call, a_wait, a_close };
  inline PassedBefore passed_before_a_call(const void* ucontext, bool watched, std::int64_t first_point_ns) noexcept;
  inline PassedBefore perf_tick_passed_before(const void* ucontext) noexcept;
  inline bool repeat_last_cpu_record(const ActiveSpan& span, std::uint64_t weight) noexcept;
  inline bool has_own_cpu_sample(const ActiveSpan& span) const noexcept;
  inline bool has_provisional_record(const ActiveSpan& span) const noexcept;
  inline void keep_provisional(const ActiveSpan& span, std::uint64_t weight, const void* ucontext) noexcept;
  inline void take_provisional_weight(const ActiveSpan& span, std::size_t at) noexcept;
  inline std::size_t copy_record(std::size_t from, std::uint64_t weight) noexcept;

  // ---- wall accounting (this thread: its handler, and its guards between
  // begin_wall_update() and end_wall_update(), when the handler keeps out) ----

  inline void on_wall_tick(std::uint32_t data, const void* ucontext) noexcept;  // signal_side.hpp
  inline void on_lock_tick(std::uint32_t slot, const void* ucontext) noexcept;   // signal_side.hpp

  // The ticker saw the thread still blocked where its last wall sample was taken,
  // up to a time: that time is the last sample's.
  void apply_wall_confirmation() noexcept {
    const std::uint64_t confirmed = wall_confirmed_.load(std::memory_order_acquire);
    // Only for the sample the ticker's last signal took (its generation is now's).
    const std::uint64_t generation = wall_generation_.load(std::memory_order_relaxed) & 0xFFFF;
    if ((confirmed >> 48) != generation || (last_wall_generation_ & 0xFFFF) != generation) return;
    const std::int64_t until = static_cast<std::int64_t>(confirmed & ((std::uint64_t{1} << 48) - 1)) * 1000;
    // The µs clock wraps every 8.9 years of uptime: compare in its range.
    const std::int64_t accounted_us = (wall_accounted_ns_ / 1000) & ((std::int64_t{1} << 48) - 1);
    const std::int64_t gained = until - accounted_us * 1000;
    if (gained <= 0 || last_wall_record_ == no_wall_record) return;
    add_wall_time(words_ + last_wall_record_, static_cast<std::uint64_t>(gained));
    wall_accounted_ns_ += gained;
  }

  // The time up to `now_ns` goes to the stack sampled last (none: lost, rare: a
  // span shorter than a tick or a full log).
  void settle_wall_time(std::int64_t now_ns) noexcept {
    apply_wall_confirmation();
    if (last_wall_record_ != no_wall_record && now_ns > wall_accounted_ns_)
      add_wall_time(words_ + last_wall_record_, static_cast<std::uint64_t>(now_ns - wall_accounted_ns_));
    if (now_ns > wall_accounted_ns_) wall_accounted_ns_ = now_ns;
    wall_accounted_cpu_ns_ = this_thread_cpu_ns();
  }

  // The handler keeps out of the wall accounting while the thread itself changes
  // it (a tick then is dropped: it loses detail, not time). Bumping the generation
  // voids the ticks and confirmations the ticker sent for the spans before.
  void begin_wall_update() noexcept {
    wall_busy_ = true;
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  void end_wall_update() noexcept {
    wall_generation_.store(wall_generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    wall_busy_ = false;
  }

  StackSamplerSettings settings_;
  std::uint64_t* words_;
  ThreadCounters* counters_;
  pid_t tid_;
#if SPANPROF_HAS_CFI_WALKER
  std::uint64_t stack_top_;  // the walker reads the stack up to here without a check
  const SystemCallObjects* system_call_objects_;
#endif
  pid_t pid_;
  std::int64_t long_span_ns_;  // long_span_ns()
  CpuTickSource cpu_;
  // The open spans: a stack linked through ActiveSpan::parent, innermost first.
  static constexpr std::uint32_t all_span_slots = 0xFFFF'FFFFu;
  static_assert(max_open_spans == 32, "slots_in_use_ is a 32-bit mask");
  ActiveSpan spans_[max_open_spans];
  std::atomic<std::uint32_t> top_{0};  // 1 + the innermost slot's index; 0: none
  std::atomic<std::int64_t> outer_changed_ns_{0};  // monotonic, when the outermost span last opened or closed
  std::uint32_t slots_in_use_ = 0;     // open or dead, this thread's only
  std::uint32_t next_sequence_ = 1;
  std::atomic<std::size_t> used_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<bool> armed_{false};
  std::atomic<std::uint32_t> idle_ticks_{0};
  std::atomic<std::uint64_t> cpu_ticks_handled_{0};  // written by the handler
  std::atomic<bool> signal_blocked_{false};          // set by the watchdog: never armed again
  // Ticks sent with send_tick (the wall's, the CPU watch's, an edge's) that the
  // handler has not taken yet: one of them pending is no perf event backlog.
  std::atomic<std::uint32_t> queued_ticks_{0};
  std::int64_t watch_cpu_ns_ = -1;                   // the watchdog's: thread CPU time at its mark
  std::uint64_t watch_ticks_ = 0;                    // the watchdog's: ticks handled at its mark
  bool watch_saw_blocked_ = false;                   // the watchdog's: blocked at its last window

  // Wall accounting. Written by this thread only (its guards and its handler).
  static constexpr std::size_t no_wall_record = ~std::size_t{0};
  static constexpr std::size_t no_record = ~std::size_t{0};
  std::atomic<std::uint32_t> wall_spans_{0};       // open wall spans (the ticker reads it)
  std::atomic<std::uint32_t> wall_generation_{0};  // bumped at every wall span open and close
  volatile bool wall_busy_ = false;                // the thread is changing the accounting
  // A span's edge (take_ticks_to): its tick's data. While the thread closes its
  // innermost span (begin_close to pop): closing_; and the guard, whose frame
  // starts the walk of a sample taken (0: not on this stack).
  static constexpr std::uint32_t edge_tick_data = 1;
  volatile bool closing_ = false;
  volatile std::uintptr_t walk_from_ = 0;
  volatile std::int64_t edge_cut_ns_ = CpuTickSource::no_cut;  // the edge's tick takes the points up to here
  std::uint64_t cpu_captured_at_outer_open_ = 0;  // this thread's CPU samples when its outermost span opened
  // The last outermost span ran at least the CPU watch's slack; true before the
  // first, which has no history: under load the first span of a process, while
  // the ticker is just starting, would otherwise leave its points to the kernel,
  // which can deliver them after its close.
  bool long_spans_ = true;
  bool close_edge_settled_ = false;  // and its close read the thread's CPU clock (settle_edge)
  std::int64_t wall_accounted_ns_ = 0;             // wall time given to samples up to here
  std::int64_t wall_accounted_cpu_ns_ = -1;        // and the thread's CPU clock then (-1: not read)
  std::size_t last_wall_record_ = no_wall_record;  // the newest wall record in the log
  std::size_t last_cpu_record_ = no_record;        // and CPU record (repeat_last_cpu_record)
  // The innermost span's provisional record: the weight of its ticks found at a
  // call before it had a sample of its own (keep_provisional), for its next sample.
  std::size_t provisional_record_ = no_record;
  // The thread's CPU clock when the CPU watch last found it off its core past a
  // point (-1: not since the last tick; passed_before_a_call).
  std::atomic<std::int64_t> off_core_past_point_cpu_ns_{-1};
  std::uint32_t last_wall_generation_ = 0;         // the generation it was taken under
  // The ticker's confirmation: generation (16 bits) | the µs until which the thread
  // was seen still blocked where its last wall sample found it.
  std::atomic<std::uint64_t> wall_confirmed_{0};
  TickerView ticker_;  // the ticker's own view of this thread (its thread, under the list's mutex)
  InternalLockWaits internal_lock_waits_;
#if SPANPROF_HAS_CFI_WALKER
  cfi::RulesCache rules_cache_;  // the handler's only
#endif

 public:
  ThreadStackSampler* registry_prev = nullptr;  // linked under StackSamplerList's mutex
  ThreadStackSampler* registry_next = nullptr;
};

// The handler reads this pointer only: it is trivially destructible, so reading it
// from a signal handler never runs a TLS constructor.
inline thread_local ThreadStackSampler* current_stack_sampler = nullptr;

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_THREAD_STACK_SAMPLER_HPP_
