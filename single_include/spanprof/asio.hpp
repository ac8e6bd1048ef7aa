// Boost.Asio: a request's profile follows its handlers and coroutines across the
// threads of a pool. Include it where you use Asio (it includes Asio's headers;
// spanprof itself does not need Boost).
//
//   spanprof::RequestProfile request(span, "GET /orders");
//   spanprof::asio::co_spawn(pool.get_executor(), request, handle(std::move(req)), asio::detached);
//
//   timer.async_wait(spanprof::asio::bind(request, executor, [](error_code) { ... }));
//
// How: RequestExecutor wraps an executor; every function it runs (a completion
// handler, a coroutine's resumption up to its next suspension) runs inside a
// spanprof::Fragment of the request (request.hpp). A coroutine spawned on it
// resumes through it after every co_await, on whichever thread, so each turn is a
// fragment and the request's one profile has them all. It is a standard executor
// (execute, query, require, prefer): it converts to asio::any_io_executor.
#ifndef SPANPROF_ASIO_HPP_
#define SPANPROF_ASIO_HPP_

// GCC 12 with Boost 1.74: Asio uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/require.hpp>
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#endif

#include <spanprof/spanprof.hpp>

#include <type_traits>

namespace spanprof {
namespace asio {

template <class Executor>
class RequestExecutor {
 public:
  RequestExecutor(const Executor& inner, RequestProfile request) noexcept
      : inner_(inner), request_(std::move(request)) {}

  const Executor& inner_executor() const noexcept { return inner_; }
  const RequestProfile& request() const noexcept { return request_; }

  // Runs `function` on the wrapped executor, inside a fragment of the request.
  template <class Function>
  void execute(Function&& function) const {
    boost::asio::execution::execute(inner_, InFragment<std::decay_t<Function>>{request_, std::forward<Function>(function)});
  }

  // Properties go to the wrapped executor; what it returns is wrapped again.
  template <class Property>
  auto query(const Property& property) const
      noexcept(boost::asio::is_nothrow_query<const Executor&, Property>::value)
          -> std::enable_if_t<boost::asio::can_query<const Executor&, Property>::value,
                              typename boost::asio::query_result<const Executor&, Property>::type> {
    return boost::asio::query(inner_, property);
  }
  template <class Property>
  auto require(const Property& property) const
      -> std::enable_if_t<boost::asio::can_require<const Executor&, Property>::value,
                          RequestExecutor<std::decay_t<typename boost::asio::require_result<const Executor&, Property>::type>>> {
    return {boost::asio::require(inner_, property), request_};
  }
  template <class Property>
  auto prefer(const Property& property) const
      -> std::enable_if_t<boost::asio::can_prefer<const Executor&, Property>::value,
                          RequestExecutor<std::decay_t<typename boost::asio::prefer_result<const Executor&, Property>::type>>> {
    return {boost::asio::prefer(inner_, property), request_};
  }

  friend bool operator==(const RequestExecutor& a, const RequestExecutor& b) noexcept {
    return a.inner_ == b.inner_ && a.request_ == b.request_;
  }
  friend bool operator!=(const RequestExecutor& a, const RequestExecutor& b) noexcept { return !(a == b); }

 private:
  template <class Function>
  struct InFragment {
    RequestProfile request;
    Function function;
    void operator()() {
      Fragment fragment(request);
      std::move(function)();
    }
  };

  Executor inner_;
  RequestProfile request_;
};

// `executor`, with every function it runs inside a fragment of `request`.
template <class Executor>
RequestExecutor<Executor> request_executor(const Executor& executor, RequestProfile request) noexcept {
  return RequestExecutor<Executor>(executor, std::move(request));
}

// A completion handler that runs inside a fragment of `request`, on `executor`.
template <class Executor, class Handler>
auto bind(RequestProfile request, const Executor& executor, Handler&& handler) {
  return boost::asio::bind_executor(request_executor(executor, std::move(request)), std::forward<Handler>(handler));
}

// The same on the handler's own associated executor. A plain lambda's is the
// system executor: give the I/O object's executor with the overload above.
template <class Handler>
auto bind(RequestProfile request, Handler&& handler) {
  return bind(std::move(request), boost::asio::get_associated_executor(handler), std::forward<Handler>(handler));
}

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
namespace detail {
// Runs the request's coroutine and ends the request when it returns or throws (an
// exception marks it failed for the tail policy).
template <class T, class AwaitableExecutor>
boost::asio::awaitable<T, AwaitableExecutor> run_then_end(RequestProfile request,
                                                          boost::asio::awaitable<T, AwaitableExecutor> body) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(body);
      request.end();
    } else {
      T result = co_await std::move(body);
      request.end();
      co_return result;
    }
  } catch (...) {
    request.set_error();
    request.end();
    throw;
  }
}
}  // namespace detail

// asio::co_spawn, with the coroutine's every turn inside a fragment of `request`
// and the request ended when the coroutine completes.
template <class Executor, class T, class AwaitableExecutor, class CompletionToken>
auto co_spawn(const Executor& executor, RequestProfile request, boost::asio::awaitable<T, AwaitableExecutor> body,
              CompletionToken&& token) {
  auto wrapped = request_executor(executor, request);
  return boost::asio::co_spawn(std::move(wrapped), detail::run_then_end(std::move(request), std::move(body)),
                               std::forward<CompletionToken>(token));
}
#endif

}  // namespace asio
}  // namespace spanprof

#endif  // SPANPROF_ASIO_HPP_
