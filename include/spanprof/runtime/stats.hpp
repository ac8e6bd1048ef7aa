// What the SDK did, for dashboards and for tests. Read with spanprof::stats().
#ifndef SPANPROF_RUNTIME_STATS_HPP_
#define SPANPROF_RUNTIME_STATS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/capture/engines.hpp>

#include <cstdint>

SPANPROF_NAMESPACE_BEGIN

struct Stats {
  std::uint64_t guards_opened = 0;         // guards that started a CPU profile of a span (either engine)
  std::uint64_t spans_without_samples = 0; // closed with no sample: nothing to hand over
  // Guards closed on another thread than they opened on (a coroutine resumed
  // elsewhere), or before a guard opened after them on their thread: their samples
  // were dropped, never read from memory the guard no longer owns (docs/async.md).
  std::uint64_t spans_moved = 0;
  std::uint64_t samples_captured = 0;      // CPU periods sampled, as the profiles count them (a late tick counts each it covers)
  std::uint64_t samples_dropped = 0;       // stacks lost to a full per-thread buffer
  // Delivery, counted in profiles (one span's samples of one kind) even when a
  // batch merges many: with one uploader every enqueued profile ends in exactly
  // one of uploaded, upload_failures, profiles_spooled or profiles_dropped.
  std::uint64_t profiles_enqueued = 0;
  std::uint64_t profiles_dropped = 0;      // hand-off full, or SDK shut down before delivery
  // Of profiles_dropped, those refused at the hand-off (full, or spanprof stopped):
  // never enqueued. So enqueued = uploaded + upload_failures + spooled
  // + (dropped - refused) once delivery is idle, with one uploader.
  std::uint64_t profiles_refused = 0;
  std::uint64_t profiles_uploaded = 0;     // accepted by every uploader, first time round
  std::uint64_t upload_failures = 0;       // per uploader: permanent failure, or given up with no spool
  std::uint64_t profiles_spooled = 0;      // per uploader: parked in the spool during an outage
  std::uint64_t spool_resent = 0;          // spooled profiles delivered later
  // Requests, and the spool's files (a file holds one request's payload).
  std::uint64_t upload_requests = 0;       // sends to a backend (a batch is one), retries and re-sends included
  std::uint64_t upload_retries = 0;        // attempts after the first
  std::uint64_t spool_evicted = 0;         // oldest spooled payloads deleted to stay within the bound
  std::uint64_t spool_pending = 0;         // payloads in the spool now
  std::uint64_t queue_length = 0;          // profiles handed over, not yet taken by the worker (<= queue_capacity)
  std::uint64_t classic_busy = 0;          // classic guards (CPU or heap) refused: another scope was profiling
  // The process's continuous profile (Options::continuous, docs/continuous.md).
  std::uint64_t continuous_threads = 0;          // threads with a CPU timer of it at its last look
  std::uint64_t continuous_threads_left_out = 0; // threads that block the sample signal: not sampled
  std::uint64_t continuous_threads_on_perf_event = 0;  // of continuous_threads, those ticking on a perf_event task clock now
  std::uint64_t continuous_samples = 0;          // samples taken into its windows
  std::uint64_t continuous_samples_dropped = 0;  // lost to its full record buffer
  std::uint64_t continuous_timers_refused = 0;   // threads' timers the kernel would not make (EAGAIN, ENOMEM)
  // Wall-clock profiles (docs/wall.md).
  std::uint64_t wall_guards_opened = 0;    // guards that started a wall profile
  std::uint64_t wall_samples_captured = 0;
  std::uint64_t wall_samples_dropped = 0;  // lost to a full per-thread buffer
  std::uint64_t wall_ticks_signalled = 0;  // ticks that sent a thread the sample signal
  // CPU ticks the ticker sent: the thread's CPU clock had passed its POSIX timer's
  // sampling point, which the kernel had not delivered (docs/engines.md, under load).
  std::uint64_t cpu_ticks_watched = 0;
  // Ticks a span took at its close for a POSIX timer point its thread had passed in
  // it, which the kernel had not delivered yet (docs/engines.md, under load).
  std::uint64_t cpu_ticks_at_close = 0;
  // Times a thread's sampler moved between the POSIX timer and perf_event
  // (CpuSampleSource::automatic: a thread that mostly computes ticks on perf_event,
  // docs/engines.md).
  std::uint64_t cpu_source_changes = 0;
  // perf_event ticks that found another of their thread's signals still queued: the
  // thread took its signals slower than they came, and no sample was taken for
  // them until it caught up (docs/engines.md, "A thread behind its signals").
  std::uint64_t cpu_ticks_behind = 0;
  std::uint64_t wall_ticks_confirmed = 0;  // ticks that found a thread still blocked: no signal, no EINTR
  std::uint64_t heap_guards_opened = 0;    // guards that started a heap profile (either heap engine)
  std::uint64_t heap_samples_captured = 0; // allocations recorded by the sampling heap engine
  std::uint64_t heap_samples_dropped = 0;  // lost to a full per-thread log or a failed stack capture
  bool heap_hooks_installed = false;       // tcmalloc hooks live now (only while a heap scope is open)
  // Lock profiles (docs/locks.md): the waits recorded by lock-profiled spans (a wait
  // of the span, or the waits of others it ended by a release), those a full
  // per-thread log lost, and those whose holder could not be charged (their lock
  // shared its slot of the wait table with another contended lock).
  std::uint64_t lock_waits_recorded = 0;
  std::uint64_t lock_waits_dropped = 0;
  std::uint64_t lock_waits_untracked = 0;
  // Conditional profiling: every decision, counted (docs/sampling.md).
  std::uint64_t head_declined = 0;         // guards the head sampler turned down
  std::uint64_t profiles_started = 0;      // spans profiled (head sampler yes, or triggered)
  std::uint64_t kept_sampled = 0;          // kept at close, by reason
  std::uint64_t kept_slow = 0;
  std::uint64_t kept_error = 0;
  std::uint64_t kept_triggered = 0;
  // Kept as slow, erroring or triggered but with not one sample, so no profile was
  // made (reported once a second through the error channel, `no_samples`): a span
  // shorter than the sampling period, or one that mostly waited (add the wall kind).
  std::uint64_t kept_without_samples = 0;
  std::uint64_t discarded_by_tail_policy = 0;  // recorded, then dropped at close: never symbolized or sent
  std::uint64_t discarded_explicitly = 0;  // ScopedProfile::discard(), or a span that ended elsewhere
  std::uint64_t requests_abandoned = 0;    // spanprof::RequestProfile whose last handle went without end()
  // OpenTelemetry zero-code-change mode (docs/opentelemetry.md): spans not profiled
  std::uint64_t otel_spans_ended_elsewhere = 0;  // ended on another thread, or out of order
  std::uint64_t otel_spans_too_deep = 0;         // nested deeper than a thread keeps
  std::uint64_t triggers_armed = 0;        // times the adaptive trigger armed for a name (current start())
  std::uint64_t invalid_spans = 0;         // guards given an invalid span context
  std::uint64_t threads_armed = 0;         // threads whose sampler is armed now
  std::uint64_t configs_retained = 0;      // configurations replaced by start()/shutdown() still read by guards
  // Objects whose source lines the default symbolizer dropped, to keep
  // source_lines_max_bytes: their frames keep their names (docs/source-lines.md).
  std::uint64_t source_lines_dropped = 0;
  CpuSampleSource cpu_sample_source = CpuSampleSource::automatic;  // the source in use (automatic: none armed yet)
  int signal_number = 0;
};

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_STATS_HPP_
