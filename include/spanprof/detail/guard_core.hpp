// Internal. What ScopedProfile and a request's Fragment are made of: the fast path
// of opening and closing a profiled scope, inline, and a handle on what the scope
// opened in its thread's samplers. Every slow path (starting the thread's sampler,
// the heap scope, the classic engines, the tail decision, the hand-over) is
// compiled once per program with the runtime (guard_core-inl.hpp).
#ifndef SPANPROF_DETAIL_GUARD_CORE_HPP_
#define SPANPROF_DETAIL_GUARD_CORE_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/capture/span_handles.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/runtime/guard_host.hpp>
#include <spanprof/span/span_adapter.hpp>
#include <spanprof/span/span_context.hpp>

#if SPANPROF_ENABLED

#include <atomic>
#include <cstdint>
#include <string_view>
#include <type_traits>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class RequestState;
class ThreadStackSampler;
struct LockRecords;

// Makes this thread's sampler, heap log and counter owners now: what a thread
// makes after them is destroyed before them at thread exit (thread_local
// destructors run in reverse order), and can still close its guards.
SPANPROF_API void make_thread_owners() noexcept;

struct RunningConfig;
struct CapturedProfile;
struct SpanIdentity;                  // hand_over.hpp
enum class HandOver : std::uint8_t;  // hand_over.hpp

// What a guard asks its user's span at close (span_adapter.hpp), one table per
// span type.
struct SpanHooks {
  bool (*failed)(const void* span) noexcept;
  void (*profile_kept)(const void* span) noexcept;
};

template <class Span>
struct SpanHooksOf {
  using Adapter = span_adapter<std::decay_t<Span>>;
  static bool failed(const void* span) noexcept {
    if constexpr (has_span_status_v<Span>) return Adapter::failed(*static_cast<const Span*>(span));
    else return false;
  }
  static void profile_kept(const void* span) noexcept {
    if constexpr (has_profile_kept_hook_v<Span>) Adapter::profile_kept(*static_cast<const Span*>(span));
  }
  static constexpr SpanHooks hooks{has_span_status_v<Span> ? &failed : nullptr,
                                   has_profile_kept_hook_v<Span> ? &profile_kept : nullptr};
};

class GuardCore {
 public:
  // Longer span names are cut to this many bytes: the name is copied into the
  // guard so that nothing is allocated when the span ends without samples.
  static constexpr std::size_t max_span_name = 111;

  GuardCore() noexcept {}  // user-provided: the unions below stay unwritten
  GuardCore(const GuardCore&) = delete;
  GuardCore& operator=(const GuardCore&) = delete;

  // Inlined into the guard's constructor: the turned-down guard is the common case
  // and must stay a few instructions.
  SPANPROF_ALWAYS_INLINE void open(const SpanContext& span, std::string_view span_name, ProfileKinds kinds,
                                   bool configured) noexcept {
    ThreadCounters* thread = guard_thread();
    if (SPANPROF_UNLIKELY(thread == nullptr)) return;
    ConfigReader& reader = thread->config_reader;
    std::uint64_t inside;
    const GuardGate* gate = enter_config_section(reader, inside);
    if (SPANPROF_UNLIKELY(gate == nullptr)) {
      reader.leave(inside);
      return;
    }
    // The head sampler sees every span (a ratio sampler reads the trace id as it
    // is); ids are checked only for a span about to be profiled.
    if (head_declines(*gate, span, span_name)) {
      thread->add(Counter::head_declined, 1);
      if (SPANPROF_UNLIKELY(gate->has_trigger | gate->labels_spans))
        declined(*gate, reader, span, span_name, kinds, configured);
      reader.leave(inside);
      return;
    }
    open_profiled(*gate, reader, inside, span, span_name, kinds, configured);
  }

  // After open(): a span type whose adapter reads the span again when it closes
  // (its status, or to link it to its profile) leaves it here.
  template <class Span>
  void keep_span_for_close(const Span& span) noexcept {
    if constexpr (reads_span_at_close_v<Span>) {
      if (!active() && !labelled_) return;
      user_span_ = &span;
      span_hooks_ = &SpanHooksOf<Span>::hooks;
    }
  }

  // A fragment of `request` (request.hpp): records what this thread runs of it, and
  // hands the samples to the request when it closes.
  SPANPROF_API void open_fragment(RequestState& request) noexcept;

  bool active() const noexcept { return state_ != State::idle || heap_state_ != State::idle || classic_cpu_; }
  bool pending_close() const noexcept { return active() || observe_only_ || labelled_; }

  SPANPROF_ALWAYS_INLINE void close() noexcept {
    if (SPANPROF_UNLIKELY(pending_close())) finish();
  }

  void set_error(bool failed) noexcept { errored_ = failed; }
  void discard() noexcept { discarded_ = true; }
  bool profile_handed_over() const noexcept { return handed_over_; }
  SPANPROF_API void stop_sampling_when(const std::atomic<bool>& flag) noexcept;
  // A fragment whose request ended on another thread hands its records over from
  // there (request.hpp, Fragment::take_records_over).
  SPANPROF_API bool take_records_elsewhere() noexcept;

 private:
  enum class State : std::uint8_t { idle, sampling, classic };

  // ---- compiled once, with the runtime (guard_core-inl.hpp); `inline` where the
  // opening or closing path inlines it -----------------------------------------
  SPANPROF_API void open_profiled(const GuardGate& gate, ConfigReader& reader, std::uint64_t inside,
                                  const SpanContext& span, std::string_view span_name, ProfileKinds kinds,
                                  bool configured) noexcept;
  SPANPROF_API void declined(const GuardGate& gate, ConfigReader& reader, const SpanContext& span,
                             std::string_view span_name, ProfileKinds kinds, bool configured) noexcept;
  SPANPROF_API void finish() noexcept;
  inline void prepare(const RunningConfig& config, ConfigReader& reader) noexcept;
  void begin(const RunningConfig& config, const SpanContext& span, std::string_view span_name, ProfileKinds kinds,
             bool triggered) noexcept;
  inline void begin_fragment(const RunningConfig& config, RequestState& request, ProfileKinds kinds) noexcept;
  inline void unpin() noexcept;
  inline bool failed() const noexcept;
  inline void decide_and_close() noexcept;
  inline void close_engines() noexcept;
  void read_times_at_open() noexcept;
  void split_time_at_close() noexcept;
  // Opens the span in the thread's stack sampler; its start on the monotonic clock,
  // or -1 when it could not.
  inline std::int64_t open_sampling(const RunningConfig& config, ProfileKinds kinds) noexcept;
  void too_deep(ThreadStackSampler& sampler, ProfileKinds kinds) noexcept;
  void open_wall(ThreadStackSampler& sampler, const RunningConfig& config) noexcept;
  inline void close_sampling() noexcept;
  void close_sampling_elsewhere(ThreadStackSampler* sampler) noexcept;
  inline void moved(const char* what) noexcept;
  void hand_over(ThreadStackSampler* sampler, std::size_t used, std::uint64_t dropped, ProfileKinds kinds,
                 std::size_t log_start, LockRecords locks) noexcept;
  template <class Attach>
  HandOver hand_over(ProfileKind kind, const char* engine, Attach&& attach) noexcept;
  inline SpanIdentity identity() noexcept;
  void open_classic() noexcept;
  void close_classic() noexcept;
  void open_heap(const RunningConfig& config) noexcept;
  void close_heap() noexcept;
  inline void label_span(const SpanContext& span, std::string_view span_name) noexcept;
  inline void unlabel() noexcept;

  // What every guard sets: the destructor and the public queries read only these.
  State state_ = State::idle;  // sampling: ticket_ holds a slot of sampler_ (CPU and/or wall)
  State heap_state_ = State::idle;
  bool classic_cpu_ = false;   // gperftools' CPU profiler runs for this scope
  bool observe_only_ = false;  // not profiled; timed for the adaptive trigger only
  bool handed_over_ = false;
  bool errored_ = false;       // set_error(), on any guard
  bool labelled_ = false;      // its span labels the continuous profile's samples on its thread (label_span)
  // Set by prepare() (or begin_fragment()), for guards that open something or are
  // timed for the trigger: a turned-down guard writes only the bytes above.
  bool triggered_ : 1;
  bool keep_ : 1;
  bool discarded_ : 1;
  bool moved_ : 1;     // closed elsewhere or out of order: counted, samples dropped
  bool fragment_ : 1;  // a fragment of request_ (request.hpp), not a span's own profile
  bool timed_ : 1;       // its sampler slot holds its thread's times at the open (Options::time_split)
  bool split_read_ : 1;  // and closing_time_split holds its split
  ProfileReason reason_;
  std::uint8_t name_length_;
  int uncaught_at_open_;
  const RunningConfig* config_;  // pinned in pins_ until unpin()
  ConfigReader* pins_;
  ThreadStackSampler* sampler_;
  std::int64_t start_ns_;
  std::int64_t duration_ns_;  // -1: not read yet
  std::uint64_t name_hash_;
  union {
    RequestState* request_;   // a fragment's
    const void* user_span_;  // a guard's user span, for span_hooks_ at close
  };
  const SpanHooks* span_hooks_;  // null: the span is not read at close
  // Members of anonymous unions are left uninitialized by the constructors (their
  // types zero themselves otherwise); prepare() assigns them.
  union {
    SpanSlotTicket ticket_;  // the span's slot in sampler_ (detail/capture/thread_stack_sampler.hpp)
  };
  union {
    HeapActiveSpan heap_record_;
  };
  union {
    SpanContext span_;
  };
  char name_[max_span_name];
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED

#endif  // SPANPROF_DETAIL_GUARD_CORE_HPP_
