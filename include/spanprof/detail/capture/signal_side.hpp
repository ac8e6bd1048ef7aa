// The signal's side of a thread's stack sampler (thread_stack_sampler.hpp): the
// handler, which records a stack for a CPU tick (the kernel's, the CPU watch's, or
// one a span's edge sends its own thread) or a wall tick; the edges that send
// those; and the watchdog, which disarms a thread that keeps the signal blocked.
// The handler is async-signal-safe: it touches only its thread's preallocated
// log, lock-free atomics and a stack walker that takes no lock.
#ifndef SPANPROF_DETAIL_CAPTURE_SIGNAL_SIDE_HPP_
#define SPANPROF_DETAIL_CAPTURE_SIGNAL_SIDE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/cpu_tick_source.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/capture/stack_walker.hpp>
#include <spanprof/detail/capture/process_sampler.hpp>
#include <spanprof/detail/capture/thread_stack_sampler.hpp>
#include <spanprof/detail/capture/thread_status.hpp>

#if SPANPROF_ENABLED

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>

#include <time.h>
#include <ucontext.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// ---- a span's edges, on its thread ----------------------------------------------

// The POSIX timer's points at a span's edges. Under load the kernel delivers a
// point late (and the CPU watch signals only a thread on its core): a point passed
// in a span lands after its close, in whatever runs next, and one passed before
// it lands inside. In aggregate that evens out; per span it does not, and a short
// span often ends with none of its own samples. So on a thread whose last
// outermost span ran at least the watch's slack and took a sample (a server's
// short requests, which could not pay a clock read per edge, are left to the
// kernel and the watch), the next outermost span's edges read the thread's CPU
// clock, and the points overdue by the slack (edge_cut_ns) are taken on the side of
// the edge where it was passed: at the open before the span is on the stack (no
// sample: the time between spans), at the close before it leaves (a sample of the
// span). A signal a thread sends itself is handled before the call returns.
//
// Both edges or neither, and only points known to be the span's or the gap's: a
// point can stay undelivered for many spans under load, and taken at an edge it
// would always land on one side of it (a periodic workload of short spans came out
// at 1.5 or 0.8 of its CPU so). An open takes points only when the close before
// it was settled (then they were passed between the two); when it finds an older
// one overdue, the span's edges are left to the kernel.
//
// The sample taken at a close (the edge's own tick, or the kernel's at the return
// of the edge's clock read) has the stack of the span's last CPU sample
// (repeat_last_cpu_record); in a span that has none, the stack of the close: its
// walk starts at the frame that holds the guard (in the function that opened the
// span), at the call that closed it, passing spanprof's own frames over. So only a
// guard on this thread's stack, with the lock-free walker (which can pass frames
// over).
//
// Each returns the thread's CPU clock, read at the edge; -1 when the edges are
// left to the kernel.
inline std::int64_t ThreadStackSampler::settle_edge(const ActiveSpan* closing) noexcept {
  const std::int64_t cut = edge_cut_ns();
  if (cut < 0) return -1;
  if (cpu_.next_point_ns() <= cut) {
    if (closing == nullptr && !close_edge_settled_) return -1;
    // A span with no CPU sample of its own (nor a provisional record) has no stack
    // to give its points: they are left to the kernel, and the next span's edges
    // with them.
    if (closing != nullptr && !has_own_cpu_sample(*closing) && !has_provisional_record(*closing)) return -1;
    take_ticks_to(cut);
    if (closing != nullptr) counters_->add(Counter::cpu_ticks_at_close, 1);
  }
  return cut + cpu_watch_slack_ns();
}

// The innermost span's guard begins to close (its decision, its engines): from
// here to its pop, a tick is for points the span's own code passed and the
// kernel delivered late, at the close. The handler gives it the stack of the
// span's last CPU sample, or, in a span that has none, walks from the guard's
// frame (the call that closed it in the function that opened the span): the
// close's own frames are spanprof's, never what the span spent its CPU on.
inline void ThreadStackSampler::begin_close(SpanSlotTicket ticket, const void* holder) noexcept {
  if (top_.load(std::memory_order_relaxed) != ticket.index + 1) return;
  if (on_this_stack(holder)) walk_from_ = reinterpret_cast<std::uintptr_t>(holder);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  closing_ = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// The close calls the program's own code (a tail policy): its samples are
// walked from where they are taken, as any of the span's.
inline void ThreadStackSampler::pause_close() noexcept {
  closing_ = false;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  walk_from_ = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// Closes the span on its own thread; afterwards no signal adds to its samples.
// True when it was the innermost open span, so that its samples are the log from
// its log_start on. A span closed out of order (interleaved coroutines on one
// thread) is only marked dead: the spans opened after it still hold its place.
inline bool ThreadStackSampler::pop(SpanSlotTicket ticket) noexcept {
  ActiveSpan& span = spans_[ticket.index];
  provisional_record_ = no_record;  // the span's, or an inner one's: it stays as taken
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (top_.load(std::memory_order_relaxed) != ticket.index + 1) {
    span.state.store(ticket.sequence << 2 | span_slot_dead, std::memory_order_relaxed);
    pause_close();
    return false;
  }
  const std::uint32_t parent = span.parent.load(std::memory_order_relaxed);
  if (parent == 0 && settings_.watch_cpu) {
    // The edge's own tick, or the kernel's at the clock read's return, is the
    // span's as any tick at its close (begin_close).
    if (walk_from_ == 0) walk_from_ = span.edge_holder;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    closing_ = true;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    const std::int64_t now = monotonic_now_ns();
    const std::int64_t cpu_at_close = span.edge_holder != 0 ? settle_edge(&span) : -1;
    close_edge_settled_ = cpu_at_close >= 0;
    // The next span's edges are read after a span that ran the slack: of CPU when
    // its edges told (whatever its points were: keeping on after the spans that
    // took one, and only those, made the spans after each gain the gap's); else of
    // wall time, with a CPU sample (so that a thread whose spans mostly wait is not
    // read at every edge).
    long_spans_ = close_edge_settled_ ? cpu_at_close - span.cpu_at_open_ns >= long_span_ns()
                                      : now - outer_changed_ns_.load(std::memory_order_relaxed) >= long_span_ns() &&
                                            cpu_samples_captured() != cpu_captured_at_outer_open_;
    outer_changed_ns_.store(now, std::memory_order_relaxed);
  }
  top_.store(parent, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Only once the span is off the stack: a sample between would be the span's,
  // walked from the closing code.
  closing_ = false;
  walk_from_ = 0;
  span.state.store(span_slot_free, std::memory_order_relaxed);
  slots_in_use_ &= ~(std::uint32_t{1} << ticket.index);
  return true;
}

// Where an edge cuts the timer's points: the thread's CPU clock less the CPU
// watch's slack, the lateness at which the ticker would send a point too (-1: no
// timer armed, or no clock). The points after it are left to the kernel's tick and
// the watch, at both edges alike, so that a span holds the points of its CPU time
// shifted by the slack: at a close they would mostly be points of the hot code
// just before, sampled at the close instead (a third of a 6 ms span's samples
// were, with no slack; a tenth with it). And only the points before the cut: had
// an edge taken every point passed once one was overdue, a span would get the
// gap's last points with its own, or lose its own with them (a periodic workload
// of 0.5 ms spans at 1 kHz came out at 1.2 of its CPU).
inline std::int64_t ThreadStackSampler::edge_cut_ns() const noexcept {
  if (!armed() || signal_blocked_.load(std::memory_order_relaxed) || cpu_.next_point_ns() == 0) return -1;
  const std::int64_t now = this_thread_cpu_ns();
  return now < 0 ? -1 : now - cpu_watch_slack_ns();
}

// The tick for the points up to `cut`, on this thread now. At a close, its
// sample's walk starts at the guard's frame (walk_from_, begin_close); at an open
// no span is on the stack, and no sample is taken.
inline void ThreadStackSampler::take_ticks_to(std::int64_t cut) noexcept {
  edge_cut_ns_ = cut;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  send_tick(cpu_tick_tag | edge_tick_data);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  edge_cut_ns_ = CpuTickSource::no_cut;
}

// ---- the handler ------------------------------------------------------------------

inline void ThreadStackSampler::on_signal(const siginfo_t* info, const void* ucontext) noexcept {
  const bool sent = info->si_code == SI_QUEUE && info->si_pid == pid_;
  const auto value = sent ? reinterpret_cast<std::uintptr_t>(info->si_value.sival_ptr) : 0;
  const std::uint64_t tag = value & ~std::uint64_t{0xFFFF'FFFF};
  if (sent && (tag == wall_tick_tag || tag == cpu_tick_tag || tag == lock_tick_tag))
    queued_ticks_.fetch_sub(1, std::memory_order_relaxed);
  // Queued while the thread blocked the signal: they would all land on the point
  // where it unblocks, so none is recorded.
  if (SPANPROF_UNLIKELY(signal_blocked_.load(std::memory_order_relaxed))) return;
  bool at_edge = false;  // sent by a span's edge (take_ticks_to)
  bool watched = false;  // sent by the CPU watch (cpu_watch)
  if (sent) {
    if (tag == wall_tick_tag) return on_wall_tick(static_cast<std::uint32_t>(value), ucontext);
    if (tag == lock_tick_tag) return on_lock_tick(static_cast<std::uint32_t>(value), ucontext);
    // The ticker's CPU tick: the timer's point passed unseen by the kernel. It is
    // a tick like the timer's own (whichever comes first takes the sample; the
    // other finds no point passed).
    if (tag != cpu_tick_tag) return;
    // Sent for the timer's points; a thread that has moved to perf_event since
    // takes its ticks at the points themselves.
    if (cpu_.next_point_ns() == 0) return;
    at_edge = static_cast<std::uint32_t>(value) == edge_tick_data;
    watched = !at_edge;
  } else if (!cpu_.is_tick(info)) {
    return;  // not our source's: someone else's signal
  } else if (SPANPROF_UNLIKELY(cpu_.hold_while_behind(queued_ticks_.load(std::memory_order_relaxed) != 0))) {
    counters_->add(Counter::cpu_ticks_behind, 1);
    return;
  }
  cpu_ticks_handled_.store(cpu_ticks_handled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // The next period starts now, before the unwinding: the CPU time this handler
  // takes counts toward it. Drawn at the end, every sample's own handler time
  // would go unsampled, a loss that grows with the frequency (docs/engines.md).
  const ActiveSpan* active = innermost_open_span();
  const std::int64_t cut = at_edge ? edge_cut_ns_ : CpuTickSource::no_cut;
  if (active == nullptr && at_edge) {
    cpu_.schedule_next_tick(nullptr, cut);  // a span is opening: the points were the gap's, not idleness
    return;
  }
  if (active == nullptr) {
    const auto idle = idle_ticks_.load(std::memory_order_relaxed) + 1;
    idle_ticks_.store(idle, std::memory_order_relaxed);
    if (idle >= settings_.idle_ticks_before_disarm) disarm();
    else cpu_.schedule_next_tick();
    return;
  }
  CpuTickSource::TickWeight weight;
  const CpuSampleSource source = cpu_.source();
  const std::int64_t first_point_ns = cpu_.next_point_ns();  // the timer's; 0 on perf_event
  cpu_.schedule_next_tick(&weight, cut);
  if (SPANPROF_UNLIKELY(cpu_.source() != source)) counters_->add(Counter::cpu_source_changes, 1);
  if (weight.periods == 0) return;  // a timer signal before its expiry: not a sample
  // A span that ended on another thread is still on this thread's stack until the
  // thread pops it; it records nothing, and it is not idleness either.
  if (active->stop != nullptr && active->stop->load(std::memory_order_relaxed)) return;
  idle_ticks_.store(0, std::memory_order_relaxed);
  if (!active->recorded.contains(ProfileKind::cpu)) return;
  keep_within_outer_span(weight);
  const std::uint64_t record_weight = cpu_record_weight(weight.periods, weight.cpu_ns);
  // At a close (begin_close), the kernel's tick is the span's points as much as
  // the edge's own: both passed in the span's code before. A perf event's tick
  // comes at its point: its stack is where the CPU went (walked from the guard's
  // frame at a close) — unless it came late (perf_tick_passed_before).
  const bool on_timer = source == CpuSampleSource::posix_timer;
  const PassedBefore before = on_timer ? (!at_edge && !closing_ ? passed_before_a_call(ucontext, watched, first_point_ns)
                                                                 : PassedBefore::nothing)
                                       : perf_tick_passed_before(ucontext);
  const bool passed_elsewhere = (on_timer && (at_edge || closing_)) || before != PassedBefore::nothing;
  if (passed_elsewhere && repeat_last_cpu_record(*active, record_weight)) return;
  if (passed_elsewhere && has_provisional_record(*active)) return keep_provisional(*active, record_weight, ucontext);
  // A span with no sample of its own yet, found at the return of a wait: its points
  // passed in its code before the wait, which the walk from the frame that opened
  // the span shows (the wait's own frames are no CPU's place).
  if (before == PassedBefore::a_wait && active->frame != 0) {
    walk_from_ = active->frame;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    record_sample(record_weight, ucontext);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    walk_from_ = 0;
    return;
  }
  if (before == PassedBefore::a_call) return keep_provisional(*active, record_weight, ucontext);
  const std::size_t at = record_sample(record_weight, ucontext);
  // The close's stack (walked from the guard's frame) is no place for it.
  if (provisional_record_ != no_record && !at_edge && !closing_) take_provisional_weight(*active, at);
}

// Found at a call its points passed before, with no sample of its own to repeat:
// they passed in the span's code before the call. Where, the span's next sample
// tells best (the call's caller is the line of the call, often a clock read in the
// hot loop): the weight waits in a provisional record, the stack of the code that
// made the call, which gives it to that sample (take_provisional_weight). Under
// load the CPU watch's signal often waits for the thread's next system call, so a
// span's first points, late on the timer, come to whatever call the hot code makes
// (docs/engines.md). A span with no sample after keeps the record as it is.
// The span's edges and its other ticks found at a call or a wait add to it.
inline void ThreadStackSampler::keep_provisional(const ActiveSpan& span, std::uint64_t weight,
                                                 const void* ucontext) noexcept {
  if (!has_provisional_record(span)) {
    provisional_record_ = record_sample(weight, ucontext, /*past_the_call=*/true);
    return;
  }
  const std::size_t provisional = provisional_record_;
  words_[provisional] = merged_cpu_weight(words_[provisional], weight);
  counters_->add(Counter::cpu_samples_captured, cpu_record_periods(weight));
}

// The span's provisional record gives its weight to the span's sample at `at`,
// and keeps a record of no periods, which no profile shows. Only within the span
// on its own thread, before its records are copied out (a close forgets it: pop).
inline void ThreadStackSampler::take_provisional_weight(const ActiveSpan& span, std::size_t at) noexcept {
  const std::size_t provisional = provisional_record_;
  if (at == no_record || !has_provisional_record(span) || provisional >= at) return;
  words_[at] = merged_cpu_weight(words_[at], words_[provisional]);
  words_[provisional] = cpu_record_weight(0, 0);
  provisional_record_ = no_record;
}

// A sample weighs the thread's CPU since the point delivered before it, which
// may have passed before its span opened: a span's first sample carries the CPU
// of a few points before it, by design (the points it loses after its close
// make up for them). Never more than a thread can have run since its outermost
// span opened, plus four periods (at least 16 ms): a tick can carry far more
// when the thread's CPU clock jumped (an emulated VM's does while the host takes
// its vCPU away, docs/arm64.md; a KVM guest's clock takes a stall of the whole VM as
// the running thread's CPU, and its perf tick may come after the span closed) or when
// the timer ran long unseen, and that CPU was the gap's or an earlier span's.
inline void ThreadStackSampler::keep_within_outer_span(CpuTickSource::TickWeight& weight) const noexcept {
  const std::int64_t carried_before = std::max<std::int64_t>(4 * settings_.period_ns, 16'000'000);
  // Most samples weigh less than the allowance alone: no clock read for them.
  if (weight.cpu_ns <= static_cast<std::uint64_t>(carried_before)) return;
  const std::int64_t most = monotonic_now_ns() - outer_changed_ns_.load(std::memory_order_relaxed) + carried_before;
  if (most <= 0 || weight.cpu_ns <= static_cast<std::uint64_t>(most)) return;
  const auto kept = static_cast<std::uint64_t>(most);
  weight.periods = std::max<std::uint64_t>(1, weight.periods * kept / weight.cpu_ns);
  weight.cpu_ns = kept;
}

// The interrupted stack, its interrupted instruction first; 0 frames when the
// walk must be skipped. The handler's own frames are never part of it.
// While a span's close takes its edge's points, the walk starts at the guard's
// frame (walk_from_; walk_stack's from_address).
inline int ThreadStackSampler::walk_interrupted_stack(const void* ucontext, void** trace) noexcept {
#if SPANPROF_HAS_CFI_WALKER
  // Call frame information, read without a lock (detail/capture/stack_walker.hpp).
  return walk_stack(registers_from_ucontext(ucontext), stack_top_, trace, settings_.max_depth, &rules_cache_,
                    walk_from_);
#else
  return walk_with_gperftools(ucontext, trace, settings_.max_depth);
#endif
}

// Records the interrupted stack; returns the record's offset in the log, or
// no_wall_record when the log is full (or the walk was skipped).
inline std::size_t ThreadStackSampler::record_sample(std::uint64_t weight, const void* ucontext,
                                                     bool past_the_call) noexcept {
  const bool wall = (weight & wall_record_tag) != 0;
  void* trace[max_stack_depth_limit];
  int depth = walk_interrupted_stack(ucontext, trace);
#if SPANPROF_HAS_CFI_WALKER
  if (past_the_call) depth = pass_over_system_call(trace, depth, *system_call_objects_);
#else
  (void)past_the_call;
#endif
  const std::size_t used = used_.load(std::memory_order_relaxed);
  const std::size_t need = stack_record_words(depth);
  if (depth <= 0 || used + need > settings_.buffer_words) {
    dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    counters_->add(wall ? Counter::wall_samples_dropped : Counter::cpu_samples_dropped, 1);
    return no_wall_record;
  }
  write_stack_record(words_ + used, weight, reinterpret_cast<std::uintptr_t>(trace[0]), trace + 1, depth);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Release: a thread taking a fragment's records over (Fragment) reads the log up
  // to here from another thread.
  used_.store(used + need, std::memory_order_release);
  // A CPU record stands for its periods' samples, as the profile's sample count says.
  if (wall) {
    counters_->add(Counter::wall_samples_captured, 1);
  } else {
    if (!past_the_call) last_cpu_record_ = used;
    counters_->add(Counter::cpu_samples_captured, cpu_record_periods(weight));
  }
  return used;
}

// The points a span's close takes (settle_edge) passed after its last CPU sample,
// in the stretch of CPU that sample was drawn from: they take its stack again, not
// the close's. The close's own stack is the guard's frame, where almost none of a
// span's CPU goes; under load the points a thread passes just before it blocks
// wait there for the close. False when the span has no CPU sample of its own, or
// the log is full: the close's stack is then taken.
//
// The same for a tick that finds the thread at a system call, when the thread
// went into the call with the tick's points passed before: its stack is where it
// waited (a sleep or a poll is no CPU's place) or where it was let off its core.
// Such is a tick the CPU watch sent (to a thread on its core, past a point by the
// slack: a blocking call it entered meanwhile returns at once, interrupted), and
// any tick that comes when the watch last saw the thread off its core past a point
// and it has run less than the slack since, and any tick whose first point the
// thread passed more than a kernel tick of its CPU before (no system call runs
// that long; the kernel's tick, under load, can come that late). A span with no
// sample of its own yet keeps such a tick provisional (keep_provisional).
// And the kernel's own tick at the return of a call that only waits, interrupted or
// not: the thread ran no CPU in it. (A point a thread passes while the tick keeps
// missing it under load is found when the thread goes into its next wait, and
// delivered at the wait's return; figures in docs/engines.md.)
inline ThreadStackSampler::PassedBefore ThreadStackSampler::passed_before_a_call(const void* ucontext, bool watched,
                                                                                  std::int64_t first_point_ns) noexcept {
  const std::int64_t seen = off_core_past_point_cpu_ns_.exchange(-1, std::memory_order_relaxed);
  const SystemCallSite site = system_call_site(ucontext);
  if (!site.at_call) return PassedBefore::nothing;
  if (site.waits || result_is_eintr(ucontext)) return PassedBefore::a_wait;
  if (watched) return PassedBefore::a_call;
  const std::int64_t now = this_thread_cpu_ns();
  if (now < 0) return PassedBefore::nothing;
  // Later than the kernel's tick is for a thread that runs: the thread ran more
  // CPU since the point than a system call takes, so the point passed before it.
  if (first_point_ns > 0 && now - first_point_ns > kernel_tick_ns()) return PassedBefore::a_call;
  return seen >= 0 && now - seen < cpu_watch_slack_ns() ? PassedBefore::a_call : PassedBefore::nothing;
}

inline bool ThreadStackSampler::has_provisional_record(const ActiveSpan& span) const noexcept {
  return provisional_record_ != no_record && provisional_record_ >= span.log_start;
}

// A perf event's tick comes at its point, but the kernel can hold its signal: the
// overflow is found on a timer interrupt, and the signal waits for the thread's
// next entry to the kernel when that interrupt came late (a vCPU its host took
// away; an emulated CPU, whose thread CPU clock then jumps). A tick taken more than
// the CPU watch's slack past its point, at a system call or in a span's close,
// passed in the code before: like the timer's, it takes the span's last CPU
// sample's stack, or the code that made the call (docs/engines.md).
inline ThreadStackSampler::PassedBefore ThreadStackSampler::perf_tick_passed_before(const void* ucontext) noexcept {
  if (cpu_.perf_tick_late_ns() <= cpu_watch_slack_ns()) return PassedBefore::nothing;
  if (closing_) return PassedBefore::a_close;
  return system_call_site(ucontext).at_call ? PassedBefore::a_call : PassedBefore::nothing;
}

inline bool ThreadStackSampler::has_own_cpu_sample(const ActiveSpan& span) const noexcept {
  return last_cpu_record_ != no_record && last_cpu_record_ >= span.log_start &&
         last_cpu_record_ < used_.load(std::memory_order_relaxed);
}

inline bool ThreadStackSampler::repeat_last_cpu_record(const ActiveSpan& span, std::uint64_t weight) noexcept {
  if (!has_own_cpu_sample(span)) return false;
  const std::size_t at = copy_record(last_cpu_record_, weight);
  if (at == no_record) return false;
  last_cpu_record_ = at;
  counters_->add(Counter::cpu_samples_captured, cpu_record_periods(weight));
  return true;
}

// Appends a copy of the record at `from` with another weight word; its offset, or
// no_record when the log is full.
inline std::size_t ThreadStackSampler::copy_record(std::size_t from, std::uint64_t weight) noexcept {
  const std::size_t used = used_.load(std::memory_order_relaxed);
  const std::uint64_t* record = words_ + from;
  const std::size_t need = stack_record_words(static_cast<int>(record[1]));
  if (used + need > settings_.buffer_words) return no_record;
  std::uint64_t* out = words_ + used;
  for (std::size_t i = 1; i < need; ++i) out[i] = record[i];
  out[0] = weight;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  used_.store(used + need, std::memory_order_release);
  return used;
}

// `data`: the ticker's wall_tick_data (the generation it looked at, and the
// thread's state then).
inline void ThreadStackSampler::on_wall_tick(std::uint32_t data, const void* ucontext) noexcept {
  const std::uint32_t generation = wall_generation_.load(std::memory_order_relaxed);
  if (wall_busy_ || (data & wall_tick_generation_mask) != (generation & wall_tick_generation_mask)) return;
  const ActiveSpan* active = innermost_open_span();
  if (active == nullptr || !active->recorded.contains(ProfileKind::wall)) return;
  if (active->stop != nullptr && active->stop->load(std::memory_order_relaxed)) return;
  const std::int64_t now = monotonic_now_ns();
  const std::int64_t cpu_now = this_thread_cpu_ns();
  apply_wall_confirmation();
  const std::int64_t elapsed = now > wall_accounted_ns_ ? now - wall_accounted_ns_ : 0;
  const auto state = static_cast<ThreadState>(data >> wall_tick_state_shift);
  // Not blocked: the sample's time (since the last one) is split by the thread's
  // own CPU clock into the part it ran and the part it waited for a core, the
  // second a continuation of the first (same stack). Labelled so, a span's wall
  // time is running and runnable in the shares its thread really had, however few
  // samples a starved thread takes.
  std::int64_t ran = -1;
  if (state != ThreadState::blocked && cpu_now >= 0 && wall_accounted_cpu_ns_ >= 0 && elapsed > 0)
    ran = std::min(std::max<std::int64_t>(cpu_now - wall_accounted_cpu_ns_, 0), elapsed);
  const ThreadState first = ran < 0 ? state : ran > 0 ? ThreadState::running : ThreadState::runnable;
  const std::int64_t first_ns = ran > 0 ? ran : elapsed;
  const std::size_t at = record_sample(wall_record_weight(first, static_cast<std::uint64_t>(first_ns)), ucontext);
  // A full log keeps the time unaccounted: the next sample (or the close) gets it.
  if (at == no_wall_record) return;
  last_wall_record_ = at;
  if (ran > 0 && ran < elapsed) {
    const auto waited = static_cast<std::uint64_t>(elapsed - ran);
    const std::size_t rest = copy_record(at, wall_record_weight(ThreadState::runnable, waited, true));
    if (rest != no_record) last_wall_record_ = rest;
    else add_wall_time(words_ + at, waited);  // no room: the time stays the sample's
  }
  last_wall_generation_ = generation;
  wall_accounted_ns_ = now;
  wall_accounted_cpu_ns_ = cpu_now;
}

// `slot`: the wait the ticker found the thread in (internal_lock_waits.hpp).
inline void ThreadStackSampler::on_lock_tick(std::uint32_t slot, const void* ucontext) noexcept {
  internal_lock_waits_.take_stack(slot, interrupted_pc(ucontext), [&](void** frames, int max_frames) {
    void* trace[max_stack_depth_limit];
    const int depth = std::min(walk_interrupted_stack(ucontext, trace), max_frames);
    for (int i = 0; i < depth; ++i) frames[i] = trace[i];
    return depth;
  });
}

// ---- the watchdog (the worker's thread, under the sampler list's mutex) -------------

// True when this armed thread has run four CPU periods without taking a tick,
// twice in a row, blocking the sample signal both times: the sampler is then
// disarmed for good. Left armed, the real-time signals queued against the mask
// would overflow into SIGIO, whose default action kills the process. Twice,
// because a runtime may block every signal for a moment while it runs the
// handlers it deferred (ThreadSanitizer does): one look can catch that moment
// after ticks that were only late; a second window without a tick cannot.
inline bool ThreadStackSampler::refuse_if_signal_blocked() noexcept {
  if (!armed() || signal_blocked_.load(std::memory_order_relaxed)) {
    watch_cpu_ns_ = -1;
    return false;
  }
  const std::int64_t cpu = thread_cpu_ns(tid_);
  const std::uint64_t ticks = cpu_ticks_handled_.load(std::memory_order_relaxed);
  if (cpu < 0) return false;
  if (watch_cpu_ns_ < 0 || ticks != watch_ticks_ || cpu - watch_cpu_ns_ < 4 * settings_.period_ns) {
    if (watch_cpu_ns_ < 0 || ticks != watch_ticks_) {
      watch_cpu_ns_ = cpu;
      watch_ticks_ = ticks;
      watch_saw_blocked_ = false;
    }
    return false;
  }
  watch_cpu_ns_ = cpu;
  const bool seen_before = watch_saw_blocked_;
  watch_saw_blocked_ = thread_blocks_signal(tid_, settings_.signal_number);
  if (!watch_saw_blocked_ || !seen_before) return false;
  signal_blocked_.store(true, std::memory_order_relaxed);
  disarm();
  return true;
}

// The process-wide handler of the sample signal.
inline void on_sample_signal(int, siginfo_t* info, void* ucontext) noexcept {
  const int saved_errno = errno;
  // The continuous profile's ticks come to every thread, most with no sampler of
  // their own; the rest are a thread's sampler's (ProcessSampler::instance() is
  // made by start(), before any timer of its exists, and a thread's event slot by
  // its handler after). An event's tick of a thread with no continuous event is a
  // span sampler's.
  const bool continuous_tick =
      info->si_code == SI_TIMER || (info->si_code == POLL_IN && continuous_event_slot != nullptr);
  if (!(continuous_tick && ProcessSampler::instance().on_signal(info, ucontext)))
    if (ThreadStackSampler* sampler = current_stack_sampler) sampler->on_signal(info, ucontext);
  errno = saved_errno;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_CAPTURE_SIGNAL_SIDE_HPP_
