// With SPANPROF_ENABLED=0 every guard is an empty object that compiles to nothing.
#define SPANPROF_ENABLED 0
#include <spanprof/spanprof.hpp>

#include "support/catch.hpp"

#include <type_traits>

TEST_CASE("SPANPROF_ENABLED=0 makes guards empty no-ops") {
  static_assert(std::is_empty_v<spanprof::ScopedProfile>);
  const auto parsed = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  spanprof::ScopedProfile guard(spanprof::NamedSpan{parsed.context, "disabled"});
  CHECK_FALSE(guard.active());
}
