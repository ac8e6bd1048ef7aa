// Must NOT compile: a span type with no spanprof::span_adapter. The build checks
// that the compiler's first error is spanprof's static_assert naming span_adapter
// and docs/spans.md, not a page of failed overloads.
#include <spanprof/spanprof.hpp>

struct UnknownSpan {
  int id = 0;
};

int main() {
  UnknownSpan span;
  spanprof::ScopedProfile guard(span);
  return 0;
}
