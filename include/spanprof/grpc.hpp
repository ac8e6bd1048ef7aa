// gRPC C++ services: one profile per RPC, with no handler change. Include it where
// the server is built (it includes gRPC's headers; spanprof itself does not need gRPC):
//
//   #include <spanprof/grpc.hpp>
//
//   grpc::ServerBuilder builder;
//   spanprof::grpc::install(builder);   // every RPC gets its request profile
//   builder.RegisterService(&service);
//
// Each RPC is a spanprof::RequestProfile (request.hpp) named by its method
// (`/package.Service/Method`), under the span of its `traceparent` metadata (W3C),
// or a new root span when none comes. It ends with the call; a non-OK status, or a
// cancelled or expired call, is an error for tail policies (KeepErroredSpans).
//
// What it covers by itself: the handler gRPC calls for the RPC, on the thread that
// calls it — a sync handler from its request to its status, streaming included; a
// callback handler up to its return (a unary reactor's whole work when it finishes
// there). gRPC calls a handler from inside its interceptors' last hook, so the
// interceptor's fragment brackets it exactly.
//
// What it cannot: a callback reactor's later steps (OnReadDone, OnWriteDone, ...).
// With any interceptor installed, gRPC 1.51 runs them after one more trip through
// its core, on an executor thread, with no hook around them. The handler makes the
// reactor profiled instead, every step of it (docs/grpc.md):
//
//   grpc::ServerWriteReactor<Part>* Receipt(grpc::CallbackServerContext* context, const Order* order) override {
//     return new spanprof::grpc::Profiled<ReceiptWriter>(context, order);   // not new ReceiptWriter(...)
//   }
//
// or a step opens a spanprof::Fragment of current_request(), kept from the handler.
//
// spanprof::grpc::current_span() and current_request() are the RPC's, in the handler:
// for child spans and logs, and to bind work handed to other threads.
//
// Whether an RPC is profiled is decided when it begins (spanprof's head sampler, on
// the span it came with): one that is not gets no interceptor at all, so a server
// that profiles one RPC in a hundred pays gRPC's price for interception on that one.
// Its handler finds its span with spanprof::grpc::span_of(*context).
#ifndef SPANPROF_GRPC_HPP_
#define SPANPROF_GRPC_HPP_

#include <spanprof/spanprof.hpp>

#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/interceptor.h>
#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/string_ref.h>

#include <sys/random.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace grpc {

using Metadata = std::multimap<::grpc::string_ref, ::grpc::string_ref>;

struct ServerOptions {
  // What each RPC records; empty: spanprof::Options::profiles.
  ProfileKinds profiles{};
  // The RPC's span from its client metadata. Unset: the W3C `traceparent` entry
  // (the caller's span: the profile is found under the span the client sent). Set
  // it to use another propagator (OpenTelemetry's, B3): an invalid context gives
  // the RPC a new root span. Called on a gRPC thread; must not throw.
  std::function<SpanContext(const Metadata& client_metadata)> span_from;
  // Cancelled and deadline-exceeded calls count as errors for tail policies.
  bool cancelled_is_error = true;
};

// The span of the RPC whose handler this thread runs (a sync handler, a callback
// handler up to its return); invalid elsewhere.
inline SpanContext current_span() noexcept;
// Its request profile (inactive when it is not profiled): bind work handed to
// other threads with spanprof::bind(current_request(), ...).
inline RequestProfile current_request() noexcept;
// The span of any RPC, profiled or not, from its context: for logs and child spans
// in every handler. A profiled RPC's is current_span() (a new root span when its
// client sent none); an RPC the head sampler turned down has no interceptor (gRPC
// charges one ~1 % of a 100 µs call), so its span is read again from its client
// metadata: the W3C traceparent, or ServerOptions::span_from's if given here.
inline SpanContext span_of(const ::grpc::ServerContextBase& context,
                           const std::function<SpanContext(const Metadata&)>& span_from = {}) noexcept;
// RPCs begun and not ended, and handlers still running: 0 once every call is over
// and every profile of one handed over.
inline std::int64_t rpcs_in_flight() noexcept;

// A callback reactor whose every later step (OnReadDone, OnWriteDone,
// OnSendInitialMetadataDone, OnCancel, OnDone) is part of its RPC's profile,
// whichever gRPC thread runs it: made in the handler instead of the reactor,
//
//   return new spanprof::grpc::Profiled<ReceiptWriter>(context, request);
//
// with the reactor's own constructor arguments. The reactor's step methods must be
// public or protected, and neither it nor they final.
template <class Reactor>
class Profiled;

namespace detail {

// A new root span: ids from a per-thread splitmix64 state seeded by the kernel
// (unique, not secret).
inline SpanContext new_root_span() noexcept {
  thread_local std::uint64_t state = 0;
  if (state == 0) {
    if (getrandom(&state, sizeof state, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof state) || state == 0)
      state = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              reinterpret_cast<std::uintptr_t>(&state) ^ 0x9E3779B97F4A7C15ull;
  }
  std::uint8_t bytes[24];
  for (int word = 0; word < 3; ++word) {
    // splitmix64: one add and a mix per word, never zero twice in a row.
    std::uint64_t value = (state += 0x9E3779B97F4A7C15ull);
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
    value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
    value ^= value >> 31;
    for (int byte = 0; byte < 8; ++byte) bytes[word * 8 + byte] = static_cast<std::uint8_t>(value >> (8 * byte));
  }
  SpanContext span;
  span.trace_id = TraceId(bytes);
  span.span_id = SpanId(bytes + 16);
  span.flags.value = TraceFlags::sampled_bit;  // this process starts the trace: it records it
  return span;
}

inline std::atomic<std::int64_t> rpcs_in_flight{0};

// One RPC: its span and its request, shared by its interceptor and its handler.
// Written once, before gRPC is given the interceptor, and only read after: gRPC
// runs an RPC's batches on any of its threads and a callback handler's Finish()
// comes from any thread, handed over through gRPC's core, which ThreadSanitizer
// does not see (Debian's gRPC is not built with it), so `published` orders the
// writes before every read instead of a lock: stored (release) by the constructor,
// read (acquire) by every hook and by the destructor.
struct RpcState {
  SpanContext span;
  RequestProfile request;
  const ::grpc::ServerContextBase* context = nullptr;
  gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
  std::atomic<bool> published{false};
};

// The RPC whose handler this thread runs (inside the interceptor's bracket).
inline thread_local RpcState* thread_rpc = nullptr;

// What a new RPC is given before gRPC decides whether to intercept it: its span
// and its request, begun on the thread that will run its handler, with room for
// its interceptor in the request's one allocation.
struct RpcStart {
  SpanContext span;
  spanprof::detail::RequestWithRoom request;
};

// The span client metadata carries: `span_from`'s, or the W3C traceparent entry's.
// A malformed traceparent is reported naming `method`, unless it is null (the RPC
// was read before, and its error reported then).
inline SpanContext span_in(const Metadata& metadata, const std::function<SpanContext(const Metadata&)>& span_from,
                           const char* method) noexcept {
  if (span_from) {
    SPANPROF_TRY {
      return span_from(metadata);
    } SPANPROF_CATCH_ALL {
      return {};
    }
  }
  const auto entry = metadata.find("traceparent");
  if (entry == metadata.end()) return {};
  const TraceparentParse parsed = parse_traceparent(std::string_view(entry->second.data(), entry->second.size()));
  if (!parsed && method != nullptr) {
    char message[160];
    std::snprintf(message, sizeof message, "gRPC %s: traceparent metadata: %.*s; the RPC gets a new root span", method,
                  static_cast<int>(parsed.message().size()), parsed.message().data());
    report_error(parsed.code(), message);
  }
  return parsed.context;
}

inline RpcStart start_rpc(const ServerOptions& options, ::grpc::experimental::ServerRpcInfo& info,
                          std::size_t interceptor_bytes) noexcept {
  RpcStart start;
  // The metadata is bound to the context before gRPC asks the interceptor
  // factories (sync, callback and async servers alike).
  start.span = span_in(info.server_context()->client_metadata(), options.span_from,
                       info.method() != nullptr ? info.method() : "call");
  if (!start.span.valid()) start.span = new_root_span();
  const char* method = info.method();
  const std::string_view name = method != nullptr ? std::string_view(method) : std::string_view("grpc");
  start.request = spanprof::detail::RequestWithRoom::begin(start.span, name, options.profiles,
                                                           options.profiles.empty(), interceptor_bytes);
  return start;
}

// Made in its request's room (RequestWithRoom): an RPC's bookkeeping is one
// allocation, and gRPC deleting the interceptor gives the room back.
class RpcInterceptor final : public ::grpc::experimental::Interceptor {
 public:
  RpcInterceptor(::grpc::experimental::ServerRpcInfo* info, bool cancelled_is_error, RpcStart start) noexcept
      : info_(info), cancelled_is_error_(cancelled_is_error) {
    ::grpc::ServerContextBase* const context = info_->server_context();
    rpc_.span = start.span;
    rpc_.request = std::move(start.request.request);
    rpc_.context = context;
    rpc_.deadline = context->raw_deadline();
    rpcs_in_flight.fetch_add(1, std::memory_order_relaxed);
    rpc_.published.store(true, std::memory_order_release);
  }

  // The call is over (its context goes): the tail policy decides now.
  ~RpcInterceptor() override {
    (void)rpc_.published.load(std::memory_order_acquire);
    // A copy: the handler may still read the state on its thread.
    RequestProfile request = rpc_.request;
    // From the deadline kept at the start: the context is being destroyed.
    if (cancelled_is_error_ && gpr_time_cmp(gpr_now(rpc_.deadline.clock_type), rpc_.deadline) > 0) request.set_error();
    request.end();
    rpcs_in_flight.fetch_sub(1, std::memory_order_release);
  }

  static void* operator new(std::size_t) = delete;
  static void operator delete(void* room) noexcept { spanprof::detail::release_request_room(room); }

  void Intercept(::grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = ::grpc::experimental::InterceptionHookPoints;
    (void)rpc_.published.load(std::memory_order_acquire);
    if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_STATUS)) status(methods->GetSendStatus());
    if (!methods->QueryInterceptionHookPoint(Hook::POST_RECV_INITIAL_METADATA)) {
      methods->Proceed();
      return;
    }
    // The call's first batch: gRPC calls the handler from the last interceptor's
    // Proceed(), on this thread, and returns when it returns. The call may end on
    // another thread before this returns (a callback handler that finished): its
    // request is then delivered when this fragment closes, and nothing here touches
    // the interceptor after Proceed().
    RequestProfile request = rpc_.request;
    rpcs_in_flight.fetch_add(1, std::memory_order_relaxed);
    RpcState* const outer = std::exchange(thread_rpc, &rpc_);
    {
      Fragment handler(request);
      methods->Proceed();
    }
    thread_rpc = outer;
    rpcs_in_flight.fetch_sub(1, std::memory_order_release);
  }

 private:
  // Called where the handler gives its status: its thread (sync), or wherever a
  // callback handler called Finish().
  void status(const ::grpc::Status& sent) noexcept {
    bool failed = !sent.ok();
    // A cancelled call's status may still say OK. Asked only where it is safe: on a
    // sync handler's thread (inside the bracket), or of a callback call (answered
    // without waiting).
    if (cancelled_is_error_ && !failed && (thread_rpc == &rpc_ || is_callback_call()))
      failed = info_->server_context()->IsCancelled();
    if (failed) rpc_.request.set_error();
  }

  bool is_callback_call() const noexcept {
#if defined(__GXX_RTTI)
    return dynamic_cast<const ::grpc::CallbackServerContext*>(rpc_.context) != nullptr;
#else
    return false;
#endif
  }

  RpcState rpc_;
  ::grpc::experimental::ServerRpcInfo* info_;
  bool cancelled_is_error_;
};

class InterceptorFactory final : public ::grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit InterceptorFactory(std::shared_ptr<const ServerOptions> options) noexcept : options_(std::move(options)) {}

  // Decides here whether the RPC is profiled, and intercepts only those that are:
  // gRPC charges a call with any interceptor one more trip through its core for
  // each of its batches (~1 % of a 100 µs RPC), and a call with none nothing.
  ::grpc::experimental::Interceptor* CreateServerInterceptor(::grpc::experimental::ServerRpcInfo* info) override {
    if (!options_ || info == nullptr || info->server_context() == nullptr) return nullptr;
    static_assert(alignof(RpcInterceptor) <= alignof(std::max_align_t), "the request's room is aligned for any object");
    RpcStart start = start_rpc(*options_, *info, sizeof(RpcInterceptor));
    // Not profiled (spanprof not running, the head sampler said no and the
    // continuous profile labels no span, out of memory): no interceptor, and gRPC
    // serves the RPC as ever.
    if (!start.request.request.active()) return nullptr;
    void* const room = start.request.room;
    return ::new (room) RpcInterceptor(info, options_->cancelled_is_error, std::move(start));
  }

 private:
  std::shared_ptr<const ServerOptions> options_;
};

}  // namespace detail

// The interceptor factory, for a server that has interceptors of its own (pass all
// of them to SetInterceptorCreators at once: each call replaces the last).
inline std::unique_ptr<::grpc::experimental::ServerInterceptorFactoryInterface> interceptor_factory(
    ServerOptions options = {}) {
  return std::make_unique<detail::InterceptorFactory>(std::make_shared<const ServerOptions>(std::move(options)));
}

// Gives every RPC of the server built by `builder` its request profile. Replaces
// the builder's interceptors: with others, use interceptor_factory().
inline void install(::grpc::ServerBuilder& builder, ServerOptions options = {}) {
  std::vector<std::unique_ptr<::grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(interceptor_factory(std::move(options)));
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

// Read on the handler's thread, inside the interceptor's bracket, after its hook
// read the state: no lock.
inline SpanContext current_span() noexcept {
  const detail::RpcState* rpc = detail::thread_rpc;
  return rpc != nullptr ? rpc->span : SpanContext{};
}

inline RequestProfile current_request() noexcept {
  const detail::RpcState* rpc = detail::thread_rpc;
  return rpc != nullptr ? rpc->request : RequestProfile{};
}

inline SpanContext span_of(const ::grpc::ServerContextBase& context,
                           const std::function<SpanContext(const Metadata&)>& span_from) noexcept {
  if (const detail::RpcState* rpc = detail::thread_rpc; rpc != nullptr && rpc->context == &context) return rpc->span;
  // A malformed traceparent's error was reported when the RPC began.
  return detail::span_in(context.client_metadata(), span_from, nullptr);
}

inline std::int64_t rpcs_in_flight() noexcept { return detail::rpcs_in_flight.load(std::memory_order_acquire); }

namespace detail {

// Which of gRPC's reactor kinds a reactor is: a step is wrapped only where its kind has it.
template <class Request, class Response>
std::true_type reads_messages(const ::grpc::ServerBidiReactor<Request, Response>*);
template <class Request>
std::true_type reads_messages(const ::grpc::ServerReadReactor<Request>*);
std::false_type reads_messages(...);
template <class Request, class Response>
std::true_type writes_messages(const ::grpc::ServerBidiReactor<Request, Response>*);
template <class Response>
std::true_type writes_messages(const ::grpc::ServerWriteReactor<Response>*);
std::false_type writes_messages(...);

// The handler's request, kept by its reactor for the steps gRPC runs on its other
// threads: written once, in the handler, and published by an atomic store, because
// gRPC hands the reactor between threads through its core, which ThreadSanitizer
// does not see in Debian's gRPC.
class ReactorRequest {
 public:
  ReactorRequest() noexcept : request_(current_request()) { published_.store(true, std::memory_order_release); }
  RequestProfile get() const noexcept {
    (void)published_.load(std::memory_order_acquire);
    return request_;
  }

 private:
  RequestProfile request_;
  std::atomic<bool> published_{false};
};

// Every kind's steps, each in a fragment of the handler's request (the reactor is
// made there). The fragment holds the request itself, so a step that deletes the
// reactor (OnDone) leaves it intact.
template <class Reactor>
class ProfiledSteps : public Reactor {
 public:
  using Reactor::Reactor;
  void OnSendInitialMetadataDone(bool ok) override {
    const RequestProfile request = handler_request_.get();
    Fragment step(request);
    Reactor::OnSendInitialMetadataDone(ok);
  }
  void OnCancel() override {
    const RequestProfile request = handler_request_.get();
    Fragment step(request);
    Reactor::OnCancel();
  }
  void OnDone() override {
    const RequestProfile request = handler_request_.get();
    Fragment step(request);
    Reactor::OnDone();
  }

 protected:
  ReactorRequest handler_request_;
};

template <class Base, bool = decltype(reads_messages(static_cast<Base*>(nullptr)))::value>
class ProfiledReads : public Base {
 public:
  using Base::Base;
};
template <class Base>
class ProfiledReads<Base, true> : public Base {
 public:
  using Base::Base;
  void OnReadDone(bool ok) override {
    const RequestProfile request = this->handler_request_.get();
    Fragment step(request);
    Base::OnReadDone(ok);
  }
};

template <class Base, bool = decltype(writes_messages(static_cast<Base*>(nullptr)))::value>
class ProfiledWrites : public Base {
 public:
  using Base::Base;
};
template <class Base>
class ProfiledWrites<Base, true> : public Base {
 public:
  using Base::Base;
  void OnWriteDone(bool ok) override {
    const RequestProfile request = this->handler_request_.get();
    Fragment step(request);
    Base::OnWriteDone(ok);
  }
};

}  // namespace detail

template <class Reactor>
class Profiled final : public detail::ProfiledWrites<detail::ProfiledReads<detail::ProfiledSteps<Reactor>>> {
  using Steps = detail::ProfiledWrites<detail::ProfiledReads<detail::ProfiledSteps<Reactor>>>;

 public:
  using Steps::Steps;
};

}  // namespace grpc
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_GRPC_HPP_
