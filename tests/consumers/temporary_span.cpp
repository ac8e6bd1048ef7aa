// Must NOT compile: a guard over a temporary span whose adapter reads the span
// again when the guard closes (here its status). The build checks that the first
// error is spanprof's static_assert saying the span must outlive the guard.
#include <spanprof/spanprof.hpp>

struct Request {
  spanprof::SpanContext context;
  bool failed = false;
};

template <>
struct spanprof::span_adapter<Request> {
  static spanprof::SpanContext context(const Request& r) noexcept { return r.context; }
  static std::string_view name(const Request&) noexcept { return "request"; }
  static bool failed(const Request& r) noexcept { return r.failed; }
};

int main() {
  spanprof::ScopedProfile guard(Request{}, "GET /");
  return 0;
}
