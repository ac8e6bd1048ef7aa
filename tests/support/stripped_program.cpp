// A program as shipped to production: built -O2 -g, then stripped by the source
// lines test (test_source_lines.cpp), which runs it with and without its debug file
// reachable. It profiles one span of the inlined hot loop (inline_workload.cpp);
// the output and debug directories come from the environment (SPANPROF_OUTPUT_DIR,
// SPANPROF_DEBUG_DIRS), as a deployed service would set them.
#include "inline_workload.hpp"

#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include <chrono>
#include <cstdio>

int main() {
  spanprof::Options options;
  options.frequency_hz = 250;
  const spanprof::StartResult started = spanprof::start(options);
  if (!started.is_ok()) {
    std::fprintf(stderr, "spanprof did not start: %s\n", started.message().c_str());
    return 1;
  }
  const auto span = spanprof::parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").context;
  double result = 0;
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /stripped"});
    result = inline_workload::handle_inline_request(0.3);
  }
  const spanprof::Status stopped = spanprof::shutdown(std::chrono::seconds(10));
  std::printf("%.3f\n", result);
  return stopped.is_ok() ? 0 : 2;
}
