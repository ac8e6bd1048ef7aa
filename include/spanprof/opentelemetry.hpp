// spanprof for OpenTelemetry C++: profile an OTel span in one line, and link the
// span to its profile. Needs only the OpenTelemetry API headers (opentelemetry-cpp
// 1.x, ABI version 1 or 2); include it where you trace:
//
//   #include <spanprof/opentelemetry.hpp>
//
//   auto span = tracer->StartSpan("GET /checkout");
//   {
//     spanprof::ScopedProfile guard(span, "GET /checkout");  // nostd::shared_ptr, Span& or SpanContext
//     ...
//   }              // a kept profile sets pyroscope.profile.id on the span here...
//   span->End();   // ...so it is exported with the link Grafana follows
//
// Or, with no guard in user code, wrap the TracerProvider
// (spanprof::otel::ProfilingTracerProvider): every root span (by default) is
// profiled from StartSpan to End. docs/opentelemetry.md has both modes and the
// Grafana Tempo -> Pyroscope set-up.
//
// A companion header: not part of the single header (it needs OpenTelemetry's);
// it is shipped beside it and includes only the umbrella.
#ifndef SPANPROF_OPENTELEMETRY_HPP_
#define SPANPROF_OPENTELEMETRY_HPP_

#include <spanprof/spanprof.hpp>

#include <opentelemetry/context/context.h>
#include <opentelemetry/context/runtime_context.h>
#include <opentelemetry/nostd/shared_ptr.h>
#include <opentelemetry/nostd/string_view.h>
#include <opentelemetry/trace/context.h>
#include <opentelemetry/trace/span.h>
#include <opentelemetry/trace/span_context.h>
#include <opentelemetry/trace/span_metadata.h>
#include <opentelemetry/trace/tracer.h>
#include <opentelemetry/trace/tracer_provider.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <cxxabi.h>

SPANPROF_NAMESPACE_BEGIN
namespace otel {

namespace api = ::opentelemetry::trace;
namespace nostd = ::opentelemetry::nostd;

// The span attribute Grafana's "Traces to profiles" looks for: a span carries it
// only when it has a profile, and its value is the span's id.
inline constexpr std::string_view profile_id_attribute = "pyroscope.profile.id";

inline SpanContext to_span_context(const api::SpanContext& context) noexcept {
  SpanContext out;
  out.trace_id = TraceId(context.trace_id().Id().data());
  out.span_id = SpanId(context.span_id().Id().data());
  out.flags.value = context.trace_flags().flags();
  return out;
}

// Sets pyroscope.profile.id = the span's id (16 lowercase hex).
inline void link_profile(api::Span& span) noexcept {
  char hex[16];
  span.GetContext().span_id().ToLowerBase16(nostd::span<char, 16>(hex, 16));
  span.SetAttribute(nostd::string_view(profile_id_attribute.data(), profile_id_attribute.size()),
                    nostd::string_view(hex, sizeof hex));
}

namespace detail {

// The OpenTelemetry API cannot read a span's status back, so an error recorded
// through spanprof is also noted here, per thread, for the guard that closes next.
struct RecentErrors {
  SpanId spans[8];
  unsigned next;
};
inline thread_local RecentErrors recent_errors{};

inline void note_error(const api::SpanContext& context) noexcept {
  RecentErrors& recent = recent_errors;
  recent.spans[recent.next++ % 8] = to_span_context(context).span_id;
}

inline bool noted_error(const api::SpanContext& context) noexcept {
  const SpanId id = to_span_context(context).span_id;
  for (const SpanId& noted : recent_errors.spans)
    if (noted == id) return true;
  return false;
}

}  // namespace detail

// Marks the span failed (status Error), and tells the guard profiling it, so a
// tail policy that keeps errored spans keeps its profile. Use it where you would
// call span->SetStatus(kError, ...).
inline void record_error(api::Span& span, std::string_view description = {}) noexcept {
  span.SetStatus(api::StatusCode::kError, nostd::string_view(description.data(), description.size()));
  detail::note_error(span.GetContext());
}

// An "exception" event (exception.type, exception.message, as OpenTelemetry's
// semantic conventions name them) and record_error().
inline void record_exception(api::Span& span, const std::exception& error) noexcept {
#if SPANPROF_HAS_RTTI
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(error).name(), nullptr, nullptr, &status);
  const char* type = status == 0 && demangled != nullptr ? demangled : typeid(error).name();
#else
  char* demangled = nullptr;
  const char* type = "std::exception";  // -fno-rtti: the dynamic type has no name
#endif
  span.AddEvent("exception", {{"exception.type", type}, {"exception.message", error.what()}});
  std::free(demangled);
  record_error(span, error.what());
}

}  // namespace otel

// ---- adapters: ScopedProfile guard(span) for OpenTelemetry's span types ----------

template <>
struct span_adapter<::opentelemetry::trace::SpanContext> {
  static SpanContext context(const ::opentelemetry::trace::SpanContext& span) noexcept {
    return otel::to_span_context(span);
  }
  static std::string_view name(const ::opentelemetry::trace::SpanContext&) noexcept { return {}; }
};

// A span object (or one derived from the API's Span). The API cannot read a span's
// name: give it at the guard, ScopedProfile guard(span, "GET /checkout").
template <class Span>
struct span_adapter<Span, std::enable_if_t<std::is_base_of_v<::opentelemetry::trace::Span, Span>>> {
  static SpanContext context(const Span& span) noexcept { return otel::to_span_context(span.GetContext()); }
  static std::string_view name(const Span&) noexcept { return {}; }
  static bool failed(const Span& span) noexcept { return otel::detail::noted_error(span.GetContext()); }
  // The guard handed a profile of the span to delivery: link the span to it.
  static void profile_kept(const Span& span) noexcept { otel::link_profile(const_cast<Span&>(span)); }
};

// What Tracer::StartSpan returns.
template <class Span>
struct span_adapter<::opentelemetry::nostd::shared_ptr<Span>,
                    std::enable_if_t<std::is_base_of_v<::opentelemetry::trace::Span, Span>>> {
  using Pointer = ::opentelemetry::nostd::shared_ptr<Span>;
  static SpanContext context(const Pointer& span) noexcept {
    return span ? otel::to_span_context(span->GetContext()) : SpanContext{};
  }
  static std::string_view name(const Pointer&) noexcept { return {}; }
  static bool failed(const Pointer& span) noexcept { return span && otel::detail::noted_error(span->GetContext()); }
  static void profile_kept(const Pointer& span) noexcept {
    if (span) otel::link_profile(*span);
  }
};

namespace otel {

// Profiles the scope under the span that is active in the current context
// (Tracer::WithActiveSpan), holding on to it until the scope ends.
class ScopedCurrentSpanProfile {
 public:
  explicit ScopedCurrentSpanProfile(std::string_view span_name = {}) noexcept
      : span_(current_span()), guard_(span_, span_name) {}
  ScopedCurrentSpanProfile(std::string_view span_name, ProfileKinds kinds) noexcept
      : span_(current_span()), guard_(span_, span_name, kinds) {}
  ScopedCurrentSpanProfile(const ScopedCurrentSpanProfile&) = delete;
  ScopedCurrentSpanProfile& operator=(const ScopedCurrentSpanProfile&) = delete;

  bool active() const noexcept { return guard_.active(); }
  void set_error(bool failed = true) noexcept { guard_.set_error(failed); }
  const nostd::shared_ptr<api::Span>& span() const noexcept { return span_; }

 private:
  static nostd::shared_ptr<api::Span> current_span() noexcept {
    return api::GetSpan(::opentelemetry::context::RuntimeContext::GetCurrent());
  }
  nostd::shared_ptr<api::Span> span_;  // declared first: it outlives the guard
  ScopedProfile guard_;
};

// ---- zero-code-change mode ----------------------------------------------------------

struct ProfilingTracerOptions {
  enum class Spans : std::uint8_t {
    root,   // spans with no parent, or a remote one (the default, as otel-profiling-go)
    all,    // every span: nested spans give nested profiles (a parent includes its children)
    named,  // spans whose name is in span_names (exact, or a prefix ending in '*')
  };
  Spans spans = Spans::root;
  std::vector<std::string> span_names;
  // What each span records; empty: spanprof::Options::profiles.
  ProfileKinds profiles{};
  // Only spans the tracer samples (IsRecording()): their profiles have a trace to be
  // found from. false profiles unsampled spans too.
  bool sampled_spans_only = true;
  // Set pyroscope.profile.id on every span whose profile was handed to delivery.
  bool link_profiles = true;
};

#if SPANPROF_ENABLED
namespace detail {

// Shared by a profiled span and the stack slot holding its fragment; outlives both.
struct SpanEndState {
  std::atomic<bool> ended_elsewhere{false};  // the fragment's stop flag: read by the sample handler
  // Who closes the fragment's records: its own thread, or the thread the span ended
  // on (take_records_over), which must not find the fragment gone under it.
  enum Records : std::uint8_t { open, taking, taken, closing_here };
  std::atomic<std::uint8_t> records{open};
  Fragment* fragment = nullptr;  // in the starting thread's stack; read only while `taking`
};

// The profiled OpenTelemetry spans a thread started and still runs, innermost on
// top: each is a spanprof::RequestProfile (request.hpp) with a Fragment open here. A
// fragment must close on its thread, in LIFO order. A span that ends on another
// thread, or out of order, marks its slot (its samples stop at once: the flag is
// the fragment's stop flag), takes the fragment's records into its request, which
// is delivered then, and this thread frees the slot the next time it starts or ends
// a span, or exits. (When the fragment records heap too, the records stay, and the
// request is delivered once this thread closes it.)
class ThreadSpanStack {
 public:
  static constexpr std::size_t capacity = 16;

  explicit ThreadSpanStack(std::uint64_t id) noexcept : id_(id) {}
  ThreadSpanStack(const ThreadSpanStack&) = delete;
  ThreadSpanStack& operator=(const ThreadSpanStack&) = delete;

  // At thread exit: the spans still open here keep what they recorded; a later
  // End() ends the request (it compares stack ids, never this memory).
  ~ThreadSpanStack() {
    while (depth_ > 0) pop_claimed();
  }

  std::uint64_t id() const noexcept { return id_; }
  std::size_t depth() const noexcept { return depth_; }

  // Begins a request for the span and opens its fragment in the next slot. Returns
  // the slot, or -1 when the span has no request (the head sampler said no and the
  // continuous profile labels no span: nothing to keep, nothing allocated) or the
  // stack is full.
  long push(const SpanContext& span, std::string_view name, ProfileKinds kinds, RequestProfile& request,
            std::shared_ptr<SpanEndState>& state) noexcept {
    pop_ended_elsewhere();
    if (depth_ == capacity) {
      spanprof::detail::count(spanprof::detail::Counter::otel_spans_too_deep);
      return -1;
    }
    Slot& slot = slots_[depth_];
    slot.request = kinds.empty() ? RequestProfile(span, name) : RequestProfile(span, name, kinds);
    if (!slot.request.active()) return -1;
    SPANPROF_TRY {
      state = std::make_shared<SpanEndState>();
    } SPANPROF_CATCH_ALL {
      slot.request.discard();
      slot.request = RequestProfile();
      return -1;
    }
    Fragment* fragment = new (slot.storage) Fragment(slot.request);
    fragment->stop_sampling_when(state->ended_elsewhere);
    state->fragment = fragment;
    slot.state = state;
    request = slot.request;
    return static_cast<long>(depth_++);
  }

  // The span of `slot` ended on this thread: true when its fragment closed (it was
  // on top); false when it was out of order (then it is marked, and closed once the
  // spans above it end).
  bool close(long slot, const SpanEndState& state) noexcept {
    if (slot < 0 || static_cast<std::size_t>(slot) + 1 != depth_ || slots_[slot].state.get() != &state) return false;
    pop();
    return true;
  }

  // After a span ended elsewhere: its fragment closes here now if it is on top.
  void close_ended() noexcept { pop_ended_elsewhere(); }

 private:
  struct Slot {
    alignas(Fragment) unsigned char storage[sizeof(Fragment)];
    RequestProfile request;
    std::shared_ptr<SpanEndState> state;
    Fragment& fragment() noexcept { return *std::launder(reinterpret_cast<Fragment*>(storage)); }
  };

  // The top fragment, whose span ended here: no other thread takes its records.
  void pop() noexcept {
    Slot& top = slots_[depth_ - 1];
    --depth_;
    top.fragment().~Fragment();  // its samples go to the request, unless taken already
    top.request = RequestProfile();  // delivered here if the span has ended and nothing else holds it
    top.state.reset();
  }

  void pop_ended_elsewhere() noexcept {
    while (depth_ > 0) {
      const SpanEndState& state = *slots_[depth_ - 1].state;
      if (!state.ended_elsewhere.load(std::memory_order_acquire) ||
          state.records.load(std::memory_order_acquire) == SpanEndState::taking)
        return;
      pop_claimed();
    }
  }

  // The top fragment, whose span may be ending on another thread now: claimed
  // first, or, when that thread is copying its records (SpanEndState::taking), left
  // to it until done, a copy of one fragment's records. Only a thread's exit waits
  // for that; starting a span pushes over it (pop_ended_elsewhere).
  void pop_claimed() noexcept {
    std::atomic<std::uint8_t>& records = slots_[depth_ - 1].state->records;
    std::uint8_t expected = SpanEndState::open;
    if (!records.compare_exchange_strong(expected, SpanEndState::closing_here, std::memory_order_acq_rel))
      while (records.load(std::memory_order_acquire) == SpanEndState::taking) std::this_thread::yield();
    pop();
  }

  std::uint64_t id_;
  std::size_t depth_ = 0;
  Slot slots_[capacity];
};

inline std::atomic<std::uint64_t> thread_span_stack_ids{1};

// This thread's stack, if it has one. Trivial, so reading it never runs a TLS
// constructor; cleared when the stack is destroyed at thread exit.
inline thread_local ThreadSpanStack* thread_span_stack = nullptr;

// Owns this thread's stack. Created after the thread's CPU sampler owner, heap log
// owner and counters, so it is destroyed before them at thread exit (thread_local
// destructors run in reverse order) and can still close its guards.
struct ThreadSpanStackOwner {
  std::unique_ptr<ThreadSpanStack> stack;
  ~ThreadSpanStackOwner() {
    thread_span_stack = nullptr;
    stack.reset();
  }
};

// Made on the first profiled span a thread starts (~13 KiB: the guards of 16 spans).
inline ThreadSpanStack* this_thread_span_stack() noexcept {
  if (thread_span_stack != nullptr) return thread_span_stack;
  spanprof::detail::make_thread_owners();
  static thread_local ThreadSpanStackOwner owner;
  owner.stack.reset(new (std::nothrow) ThreadSpanStack(thread_span_stack_ids.fetch_add(1)));
  thread_span_stack = owner.stack.get();
  return thread_span_stack;
}

// A span the tracer started and spanprof profiles: forwards everything to the
// tracer's span, and closes the profile when it ends.
class ProfiledSpan final : public api::Span {
 public:
  ProfiledSpan(nostd::shared_ptr<api::Span> span, std::uint64_t stack_id, long slot, RequestProfile request,
               std::shared_ptr<SpanEndState> state, bool link_profiles) noexcept
      : span_(std::move(span)),
        stack_id_(stack_id),
        slot_(slot),
        request_(std::move(request)),
        state_(std::move(state)),
        link_(link_profiles) {}

  ~ProfiledSpan() override {
    if (!ended_.load(std::memory_order_relaxed)) ProfiledSpan::End();
  }

  void SetAttribute(nostd::string_view key, const ::opentelemetry::common::AttributeValue& value) noexcept override {
    span_->SetAttribute(key, value);
  }
  void AddEvent(nostd::string_view name) noexcept override { span_->AddEvent(name); }
  void AddEvent(nostd::string_view name, ::opentelemetry::common::SystemTimestamp timestamp) noexcept override {
    span_->AddEvent(name, timestamp);
  }
  void AddEvent(nostd::string_view name, ::opentelemetry::common::SystemTimestamp timestamp,
                const ::opentelemetry::common::KeyValueIterable& attributes) noexcept override {
    span_->AddEvent(name, timestamp, attributes);
  }
  void AddEvent(nostd::string_view name, const ::opentelemetry::common::KeyValueIterable& attributes) noexcept override {
    span_->AddEvent(name, attributes);
  }
#if OPENTELEMETRY_ABI_VERSION_NO >= 2
  void AddLink(const api::SpanContext& target, const ::opentelemetry::common::KeyValueIterable& attrs) noexcept override {
    span_->AddLink(target, attrs);
  }
  void AddLinks(const api::SpanContextKeyValueIterable& links) noexcept override { span_->AddLinks(links); }
#endif
  void SetStatus(api::StatusCode code, nostd::string_view description = "") noexcept override {
    // The tail policy sees the status the span ends with.
    request_.set_error(code == api::StatusCode::kError);
    span_->SetStatus(code, description);
  }
  void UpdateName(nostd::string_view name) noexcept override { span_->UpdateName(name); }
  api::SpanContext GetContext() const noexcept override { return span_->GetContext(); }
  bool IsRecording() const noexcept override { return span_->IsRecording(); }

  void End(const api::EndSpanOptions& options = {}) noexcept override {
    if (ended_.exchange(true, std::memory_order_acq_rel)) {
      span_->End(options);  // a second End: the tracer's own rules apply
      return;
    }
    ThreadSpanStack* stack = thread_span_stack;  // ids are never reused: an exited thread's cannot match
    const bool closed = stack != nullptr && stack->id() == stack_id_ && stack->close(slot_, *state_);
    if (!closed) {
      // Ended on another thread, or before a span started after it: its fragment
      // stops recording now, and its records go to the request here, so that it is
      // delivered now rather than when its thread next starts a span.
      state_->ended_elsewhere.store(true, std::memory_order_release);
      spanprof::detail::count(spanprof::detail::Counter::otel_spans_ended_elsewhere);
      take_records_over();
    }
    // The tail policy decides now; before End(), so the exported span carries the link.
    const bool kept = request_.end();
    if (kept && link_) link_profile(*span_);
    if (closed && stack != nullptr) stack->close_ended();  // an out-of-order span under it, now on top
    span_->End(options);
  }

 private:
  void take_records_over() noexcept {
    std::uint8_t records = SpanEndState::open;
    if (!state_->records.compare_exchange_strong(records, SpanEndState::taking, std::memory_order_acq_rel)) return;
    // The fragment's thread now waits for `taken` before closing it: it is ours to read.
    const bool taken = state_->fragment->take_records_over();
    state_->records.store(taken ? SpanEndState::taken : SpanEndState::open, std::memory_order_release);
  }

  nostd::shared_ptr<api::Span> span_;
  std::uint64_t stack_id_;
  long slot_;
  RequestProfile request_;
  std::shared_ptr<SpanEndState> state_;
  bool link_;
  std::atomic<bool> ended_{false};
};

}  // namespace detail
#endif  // SPANPROF_ENABLED

namespace detail {

inline bool name_selected(std::string_view name, const std::vector<std::string>& patterns) noexcept {
  for (const std::string& pattern : patterns) {
    if (!pattern.empty() && pattern.back() == '*') {
      if (name.substr(0, pattern.size() - 1) == std::string_view(pattern).substr(0, pattern.size() - 1)) return true;
    } else if (name == pattern) {
      return true;
    }
  }
  return false;
}

inline bool context_has_span(const ::opentelemetry::context::Context& context) noexcept {
  if (api::IsRootSpan(context)) return false;
  const ::opentelemetry::context::ContextValue value = context.GetValue(api::kSpanKey);
  const auto* span = nostd::get_if<nostd::shared_ptr<api::Span>>(&value);
  return span != nullptr && *span && (*span)->GetContext().IsValid();
}

// A span is a root for profiling when its parent is none, or remote (the local
// root of this process's part of the trace, as otel-profiling-go has it).
inline bool is_local_root(const api::StartSpanOptions& options) noexcept {
  if (const auto* parent = nostd::get_if<api::SpanContext>(&options.parent)) {
    if (parent->IsValid()) return parent->IsRemote();
    return !context_has_span(::opentelemetry::context::RuntimeContext::GetCurrent());
  }
  if (const auto* context = nostd::get_if<::opentelemetry::context::Context>(&options.parent))
    return !context_has_span(*context);
  return true;
}

}  // namespace detail

// A Tracer whose spans are profiled from StartSpan to End.
class ProfilingTracer final : public api::Tracer {
 public:
  ProfilingTracer(nostd::shared_ptr<api::Tracer> tracer, std::shared_ptr<const ProfilingTracerOptions> options) noexcept
      : tracer_(std::move(tracer)), options_(std::move(options)) {}

  nostd::shared_ptr<api::Span> StartSpan(nostd::string_view name, const ::opentelemetry::common::KeyValueIterable& attributes,
                                         const api::SpanContextKeyValueIterable& links,
                                         const api::StartSpanOptions& start = {}) noexcept override {
    // Decided before the span starts: the parent it will have is the current one.
    const ProfilingTracerOptions& o = *options_;
    const std::string_view span_name(name.data(), name.size());
    bool selected = true;
    if (o.spans == ProfilingTracerOptions::Spans::root) selected = detail::is_local_root(start);
    else if (o.spans == ProfilingTracerOptions::Spans::named) selected = detail::name_selected(span_name, o.span_names);
    nostd::shared_ptr<api::Span> span = tracer_->StartSpan(name, attributes, links, start);
#if SPANPROF_ENABLED
    if (!selected || !span || (o.sampled_spans_only && !span->IsRecording())) return span;
    detail::ThreadSpanStack* stack = detail::this_thread_span_stack();
    if (stack == nullptr) return span;
    std::shared_ptr<detail::SpanEndState> state;
    RequestProfile request;
    const long slot = stack->push(to_span_context(span->GetContext()), span_name, o.profiles, request, state);
    if (slot < 0) return span;  // not profiled: the tracer's span as it is
    auto* profiled = new (std::nothrow)
        detail::ProfiledSpan(span, stack->id(), slot, std::move(request), state, o.link_profiles);
    if (profiled == nullptr) {
      // Not profiled after all: its fragment stops now, and closes at this thread's next span.
      request.discard();
      state->ended_elsewhere.store(true, std::memory_order_release);
      return span;
    }
    return nostd::shared_ptr<api::Span>(profiled);
#else
    (void)selected;
    return span;
#endif
  }

#if OPENTELEMETRY_ABI_VERSION_NO == 1
  void ForceFlushWithMicroseconds(uint64_t timeout) noexcept override { tracer_->ForceFlushWithMicroseconds(timeout); }
  void CloseWithMicroseconds(uint64_t timeout) noexcept override { tracer_->CloseWithMicroseconds(timeout); }
#endif

 private:
  nostd::shared_ptr<api::Tracer> tracer_;
  std::shared_ptr<const ProfilingTracerOptions> options_;
};

// Wraps the application's TracerProvider: every tracer it hands out profiles the
// spans its options select, with no guard in user code.
//
//   auto sdk = opentelemetry::sdk::trace::TracerProviderFactory::Create(...);
//   opentelemetry::trace::Provider::SetTracerProvider(
//       spanprof::otel::ProfilingTracerProvider::wrap(std::move(sdk)));
class ProfilingTracerProvider final : public api::TracerProvider {
 public:
  explicit ProfilingTracerProvider(nostd::shared_ptr<api::TracerProvider> provider,
                                   ProfilingTracerOptions options = {}) noexcept
      : provider_(std::move(provider)), options_(make_options(std::move(options))) {}

  template <class Provider>
  static nostd::shared_ptr<api::TracerProvider> wrap(Provider provider, ProfilingTracerOptions options = {}) {
    return nostd::shared_ptr<api::TracerProvider>(new ProfilingTracerProvider(
        nostd::shared_ptr<api::TracerProvider>(std::move(provider)), std::move(options)));
  }

#if OPENTELEMETRY_ABI_VERSION_NO >= 2
  nostd::shared_ptr<api::Tracer> GetTracer(nostd::string_view name, nostd::string_view version,
                                           nostd::string_view schema_url,
                                           const ::opentelemetry::common::KeyValueIterable* attributes) noexcept override {
    return wrap_tracer(provider_->GetTracer(name, version, schema_url, attributes));
  }
#else
  nostd::shared_ptr<api::Tracer> GetTracer(nostd::string_view name, nostd::string_view version = "",
                                           nostd::string_view schema_url = "") noexcept override {
    return wrap_tracer(provider_->GetTracer(name, version, schema_url));
  }
#endif

  const nostd::shared_ptr<api::TracerProvider>& wrapped() const noexcept { return provider_; }

 private:
  static std::shared_ptr<const ProfilingTracerOptions> make_options(ProfilingTracerOptions options) noexcept {
    SPANPROF_TRY {
      return std::make_shared<const ProfilingTracerOptions>(std::move(options));
    } SPANPROF_CATCH_ALL {
      return nullptr;
    }
  }

  nostd::shared_ptr<api::Tracer> wrap_tracer(nostd::shared_ptr<api::Tracer> tracer) noexcept {
    if (!tracer || !options_) return tracer;
    auto* wrapper = new (std::nothrow) ProfilingTracer(tracer, options_);
    return wrapper ? nostd::shared_ptr<api::Tracer>(wrapper) : tracer;
  }

  nostd::shared_ptr<api::TracerProvider> provider_;
  std::shared_ptr<const ProfilingTracerOptions> options_;
};

}  // namespace otel
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_OPENTELEMETRY_HPP_
