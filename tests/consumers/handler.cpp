// A handler file as the README shows one: the umbrella header and a guard, and no
// SPANPROF_IMPLEMENTATION (another source file of the program compiles the
// runtime). run.sh checks that its object holds the guard's fast path only.
#include <spanprof/spanprof.hpp>

int handle_request(const spanprof::SpanContext& span, int x) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "handle_request"});
  return x * 2;
}
