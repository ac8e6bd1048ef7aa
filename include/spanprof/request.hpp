// RequestProfile and Fragment: one profile per request, whichever threads run it.
//
//   spanprof::RequestProfile request(span);      // decided here: head sampler, ids
//   pool.submit(spanprof::bind(request, [] {      // runs inside a fragment of it
//     parse(...);
//   }));
//   ...
//   request.end();   // delivered once no fragment of it runs (docs/async.md)
//
// An async request runs in turns: a coroutine between two suspensions, a callback,
// a task on a pool. Each turn is a Fragment: "this thread now runs request R". Its
// samples (CPU, wall, heap) go to the request when it closes, and the request
// hands over one profile per kind, labelled with its span, when it ends: after
// end() once no fragment runs, or when its last handle goes (abandoned: counted in
// Stats::requests_abandoned, delivered as it is).
//
// A fragment costs a guard's open and close plus one atomic operation on the
// request; it allocates nothing unless it took samples (then they are copied into
// the request). Guards (ScopedProfile) nest inside fragments as they do inside
// guards. A fragment must close on the thread that opened it: the adapters
// (spanprof::bind, spanprof/asio.hpp) open one per turn for you.
#ifndef SPANPROF_REQUEST_HPP_
#define SPANPROF_REQUEST_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/guard_core.hpp>
#include <spanprof/detail/span/thread_context.hpp>
#include <spanprof/guard.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_adapter.hpp>
#include <spanprof/span/span_context.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

SPANPROF_NAMESPACE_BEGIN

#if SPANPROF_ENABLED

namespace detail {
class RequestState;
struct RequestWithRoom;

// Compiled once, with the runtime (detail/request-inl.hpp). begin_request decides
// whether the span is profiled, as a guard's open does, and makes its state (null:
// not profiled), with `room_bytes` of room for another object in its one
// allocation (RequestWithRoom, below).
SPANPROF_API RequestState* begin_request(const SpanContext& span, std::string_view name, ProfileKinds kinds,
                                         bool configured, std::size_t room_bytes = 0) noexcept;
SPANPROF_API void* request_room(RequestState& state) noexcept;
SPANPROF_API void release_request_room(void* room) noexcept;
SPANPROF_API void acquire_request(RequestState& state) noexcept;
SPANPROF_API void release_request(RequestState& state) noexcept;
SPANPROF_API void set_request_error(RequestState& state, bool failed) noexcept;
SPANPROF_API void discard_request(RequestState& state) noexcept;
SPANPROF_API bool end_request(RequestState& state) noexcept;
}  // namespace detail

// A handle on one request's profile. Copies share it; it is delivered once.
class RequestProfile {
 public:
  // No request: fragments of it profile nothing.
  RequestProfile() noexcept = default;

  // Records what spanprof::Options::profiles says (CPU unless configured).
  template <class Span>
  explicit RequestProfile(const Span& span) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>)
      state_ = detail::begin_request(span_adapter<std::decay_t<Span>>::context(span),
                                     span_adapter<std::decay_t<Span>>::name(span), {}, true);
  }
  template <class Span>
  RequestProfile(const Span& span, ProfileKinds kinds) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>)
      state_ = detail::begin_request(span_adapter<std::decay_t<Span>>::context(span),
                                     span_adapter<std::decay_t<Span>>::name(span), kinds, false);
  }
  template <class Span>
  RequestProfile(const Span& span, std::string_view span_name) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>)
      state_ = detail::begin_request(span_adapter<std::decay_t<Span>>::context(span), span_name, {}, true);
  }
  template <class Span>
  RequestProfile(const Span& span, std::string_view span_name, ProfileKinds kinds) noexcept {
    detail::require_span_adapter<Span>();
    if constexpr (is_span_v<Span>)
      state_ = detail::begin_request(span_adapter<std::decay_t<Span>>::context(span), span_name, kinds, false);
  }

  RequestProfile(const RequestProfile& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) detail::acquire_request(*state_);
  }
  RequestProfile(RequestProfile&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  RequestProfile& operator=(RequestProfile other) noexcept {
    std::swap(state_, other.state_);
    return *this;
  }
  ~RequestProfile() {
    if (state_ != nullptr) detail::release_request(*state_);
  }

  // True when the request is being profiled, or timed for the adaptive trigger,
  // or only labels the continuous profile's samples of its fragments (the last
  // two record nothing), and has not ended through this handle.
  bool active() const noexcept { return state_ != nullptr; }

  // Marks the request as failed, for tail policies that keep errored requests.
  void set_error(bool failed = true) noexcept {
    if (state_ != nullptr) detail::set_request_error(*state_, failed);
  }

  // Drops whatever the request recorded: nothing is kept, symbolized or sent.
  void discard() noexcept {
    if (state_ != nullptr) detail::discard_request(*state_);
  }

  // The request is over: the tail policy decides now; its profile is delivered now,
  // or when the fragments running now close; later fragments record nothing. This
  // handle lets go. True when it is kept — its profile was handed over now, or will
  // be when those fragments close — or when its samples are in the process's
  // continuous profile (Options::continuous): as a span is linked to its profile
  // before export (pyroscope.profile.id).
  bool end() noexcept {
    if (state_ == nullptr) return false;
    const bool kept = detail::end_request(*state_);
    detail::release_request(*std::exchange(state_, nullptr));
    return kept;
  }

  friend bool operator==(const RequestProfile& a, const RequestProfile& b) noexcept { return a.state_ == b.state_; }
  friend bool operator!=(const RequestProfile& a, const RequestProfile& b) noexcept { return a.state_ != b.state_; }

 private:
  friend class Fragment;
  friend struct detail::RequestWithRoom;
  detail::RequestState* state_ = nullptr;
};

namespace detail {
// A request with room in its one allocation for an object that needs the request
// as long as it lives (the gRPC interceptor, grpc.hpp): the object is made in
// `room` and holds a reference of its own, which it gives back from its class's
// operator delete (release_request_room), once it is destroyed. Inactive, with no
// room, when the request is not profiled.
struct RequestWithRoom {
  RequestProfile request;
  void* room = nullptr;

  static RequestWithRoom begin(const SpanContext& span, std::string_view name, ProfileKinds kinds, bool configured,
                               std::size_t room_bytes) noexcept {
    RequestWithRoom made;
    made.request.state_ = begin_request(span, name, kinds, configured, room_bytes);
    if (made.request.state_ != nullptr) made.room = request_room(*made.request.state_);
    return made;
  }
};
}  // namespace detail

// "This thread now runs `request`", until the end of the scope. The request must
// outlive it, and it must close on the thread that opened it. A fragment of the
// request this thread already runs does nothing (its samples are counted once).
class Fragment {
 public:
  explicit Fragment(const RequestProfile& request) noexcept { open(request.state_); }
  Fragment(const RequestProfile&&) = delete;  // a temporary request would end before its fragment

  ~Fragment() {
    if (request_ != nullptr) close();
  }

  Fragment(const Fragment&) = delete;
  Fragment& operator=(const Fragment&) = delete;

  // True when this fragment records (the request is profiled, running here anew).
  bool active() const noexcept { return request_ != nullptr; }

  // While `flag` is set, samples that land in this fragment are not recorded: for a
  // request whose end comes from another thread (the flag must outlive the fragment).
  void stop_sampling_when(const std::atomic<bool>& flag) noexcept { guard_.stop_sampling_when(flag); }

  // For span adapters whose fragment outlives its turn (an OpenTelemetry span
  // started on one thread and ended on another, its fragment still open on the
  // first): called from another thread, once stop_sampling_when's flag is set,
  // while the caller keeps the fragment's own thread from closing it (see
  // opentelemetry.hpp's SpanEndState). Its records go to the request now, which is
  // then delivered when it ends, not when this fragment's thread closes it — an
  // idle thread may not for long. False, taking nothing, when the fragment records
  // what another thread cannot read (heap, the classic engine): it delivers when
  // it closes, as any other.
  SPANPROF_API bool take_records_over() noexcept;

 private:
  // Compiled once, with the runtime (detail/request-inl.hpp).
  SPANPROF_API void open(detail::RequestState* request) noexcept;
  SPANPROF_API void close() noexcept;

  detail::RequestState** running_ = nullptr;  // this thread's running request
  detail::RequestState* previous_ = nullptr;
  detail::RequestState* request_ = nullptr;   // entered, or null: records nothing
  const void** published_ = nullptr;  // this thread's otel_thread_ctx_v1
  const void* previous_context_ = nullptr;
  bool records_taken_ = false;  // by take_records_over(), on another thread
  detail::GuardCore guard_;
};

#else  // SPANPROF_ENABLED == 0: requests and fragments are empty objects.

class RequestProfile {
 public:
  RequestProfile() noexcept = default;
  template <class Span>
  explicit RequestProfile(const Span&) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span>
  RequestProfile(const Span&, ProfileKinds) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span>
  RequestProfile(const Span&, std::string_view) noexcept {
    detail::require_span_adapter<Span>();
  }
  template <class Span>
  RequestProfile(const Span&, std::string_view, ProfileKinds) noexcept {
    detail::require_span_adapter<Span>();
  }
  bool active() const noexcept { return false; }
  void set_error(bool = true) noexcept {}
  void discard() noexcept {}
  bool end() noexcept { return false; }
  friend bool operator==(const RequestProfile&, const RequestProfile&) noexcept { return true; }
  friend bool operator!=(const RequestProfile&, const RequestProfile&) noexcept { return false; }
};

namespace detail {
struct RequestWithRoom {
  RequestProfile request;
  void* room = nullptr;
  static RequestWithRoom begin(const SpanContext&, std::string_view, ProfileKinds, bool, std::size_t) noexcept {
    return {};
  }
};
inline void release_request_room(void*) noexcept {}
}  // namespace detail

class Fragment {
 public:
  explicit Fragment(const RequestProfile&) noexcept {}
  Fragment(const RequestProfile&&) = delete;
  Fragment(const Fragment&) = delete;
  Fragment& operator=(const Fragment&) = delete;
  bool active() const noexcept { return false; }
  void stop_sampling_when(const std::atomic<bool>&) noexcept {}
  bool take_records_over() noexcept { return false; }
};

#endif

// A callable that runs `function` inside a fragment of `request`, on whichever
// thread calls it: for std::thread, thread pools, futures and callbacks.
template <class Function>
class RequestBoundFunction {
 public:
  RequestBoundFunction(RequestProfile request,
                       Function function) noexcept(std::is_nothrow_move_constructible_v<Function>)
      : request_(std::move(request)), function_(std::move(function)) {}

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    Fragment fragment(request_);
    return std::invoke(function_, std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    Fragment fragment(request_);
    return std::invoke(function_, std::forward<Args>(args)...);
  }

  const RequestProfile& request() const noexcept { return request_; }

 private:
  RequestProfile request_;
  Function function_;
};

template <class Function>
RequestBoundFunction<std::decay_t<Function>> bind(RequestProfile request, Function&& function) {
  return RequestBoundFunction<std::decay_t<Function>>(std::move(request), std::forward<Function>(function));
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_REQUEST_HPP_
