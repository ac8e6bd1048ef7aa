// Internal. RequestProfile's and Fragment's slow paths (request.hpp), compiled once
// per program with the runtime (config.hpp).
#ifndef SPANPROF_DETAIL_REQUEST_INL_HPP_
#define SPANPROF_DETAIL_REQUEST_INL_HPP_

#include <spanprof/detail/base/counters.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/guard_core-inl.hpp>
#include <spanprof/detail/request_state.hpp>
#include <spanprof/detail/runtime/running_config.hpp>
#include <spanprof/request.hpp>
#include <spanprof/detail/span/thread_context.hpp>

#if SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME

#include <atomic>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The request whose fragment this thread runs (innermost), or null. Trivially
// initialized: reading it never runs a TLS constructor.
inline thread_local RequestState* running_request = nullptr;

RequestState* begin_request(const SpanContext& span, std::string_view name, ProfileKinds kinds, bool configured,
                            std::size_t room_bytes) noexcept {
  ThreadCounters* thread = guard_thread();
  if (thread == nullptr) return nullptr;
  ConfigReader& reader = thread->config_reader;
  std::uint64_t inside;
  const GuardGate* gate = enter_config_section(reader, inside);
  if (gate == nullptr) {
    reader.leave(inside);
    return nullptr;
  }
  const RunningConfig& config = running_config(*gate);
  TriggerVerdict declined = TriggerVerdict::none;
  std::uint64_t name_hash = 0;
  // As a guard's open: the head sampler sees every span, the adaptive trigger the
  // ones it declined, and ids are checked only for a request about to be profiled.
  // A declined request still labels the continuous profile's samples of its
  // fragments, wherever they run: its state then records nothing.
  bool profiled = true, labels = false;
  if (head_declines(*gate, span, name)) {
    thread->add(Counter::head_declined, 1);
    if (gate->has_trigger) declined = trigger_verdict(*config.trigger, span, name, name_hash);
    profiled = declined == TriggerVerdict::profile;
    labels = !profiled && gate->labels_spans && span.valid() && span.flags.sampled();
    if (declined == TriggerVerdict::none && !labels) {
      reader.leave(inside);
      return nullptr;
    }
  }
  if (profiled && !span.valid()) {
    reader.leave(inside);
    report_error(ErrorCode::invalid_span_context, "a request was given an invalid trace or span id; not profiled");
    return nullptr;
  }
  RequestState::Identity identity{span,
                                  name,
                                  profiled ? (configured ? config.profiles : kinds) : ProfileKinds{},
                                  config.sampler.generation,
                                  config.tail_policy,
                                  config.trigger,
                                  declined,
                                  name_hash,
                                  profiled,
                                  labels};
  reader.leave(inside);
  RequestState* state = RequestState::create(std::move(identity), room_bytes);
  if (state == nullptr) report_error(ErrorCode::internal, "out of memory beginning a request's profile; not profiled");
  else if (profiled) count(Counter::profiles_started);
  return state;
}

void* request_room(RequestState& state) noexcept {
  state.acquire();  // the room's object's
  return state.room();
}
void release_request_room(void* room) noexcept { RequestState::release_room(room); }
void acquire_request(RequestState& state) noexcept { state.acquire(); }
void release_request(RequestState& state) noexcept { state.release(); }
void set_request_error(RequestState& state, bool failed) noexcept { state.set_error(failed); }
void discard_request(RequestState& state) noexcept { state.discard(); }
// Linked either way: a kept profile, or samples in the continuous profile.
bool end_request(RequestState& state) noexcept { return state.end() || state.in_continuous_profile(); }

}  // namespace detail

void Fragment::open(detail::RequestState* request) noexcept {
  detail::RequestState*& running = detail::running_request;
  // Not again inside a fragment of the same request, nor once the request ended.
  if (request == nullptr || request == running || !request->enter_fragment()) return;
  running_ = &running;
  previous_ = running;
  request_ = request;
  guard_.open_fragment(*request);
  running = request;
  published_ = &otel_thread_ctx_v1;
  previous_context_ = *published_;
  std::atomic_signal_fence(std::memory_order_release);
  *published_ = &request->thread_context();
}

void Fragment::close() noexcept {
  guard_.close();  // the samples go to the request
  // Closed on the thread that opened it: what it published there is put back.
  if (running_ == &detail::running_request) {
    *running_ = previous_;
    *published_ = previous_context_;
    std::atomic_signal_fence(std::memory_order_release);
  }
  if (SPANPROF_UNLIKELY(records_taken_)) request_->release();
  else request_->leave_fragment();
}

bool Fragment::take_records_over() noexcept {
  if (request_ == nullptr || !guard_.take_records_elsewhere()) return false;
  records_taken_ = true;
  request_->leave_running();
  return true;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_ENABLED && SPANPROF_DEFINE_RUNTIME

#endif  // SPANPROF_DETAIL_REQUEST_INL_HPP_
