// One source that builds with profiling on and off: every public name a service
// writes (Options, start, flush, stats, shutdown, uploaders, samplers, policies,
// guards) exists either way. Built with -DSPANPROF_ENABLED=0 it must link without
// -lprofiler (and without -lz and -lcurl) and do nothing; built normally it must
// deliver a profile. The exit code says which happened.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>

namespace {

__attribute__((noinline)) double busy_for(double seconds) {
  double x = 0;
  const std::clock_t end = std::clock() + static_cast<std::clock_t>(seconds * CLOCKS_PER_SEC);
  while (std::clock() < end)
    for (int i = 0; i < 10000; ++i) x += std::sqrt(static_cast<double>(i));
  return x;
}

struct MySpan {
  spanprof::SpanContext context;
  bool failed = false;
};

}  // namespace

template <>
struct spanprof::span_adapter<MySpan> {
  static spanprof::SpanContext context(const MySpan& span) noexcept { return span.context; }
  static std::string_view name(const MySpan&) noexcept { return "my span"; }
  static bool failed(const MySpan& span) noexcept { return span.failed; }
};

int main() {
  std::atomic<int> delivered{0};
  spanprof::Options options;
  options.frequency_hz = 250;
  options.profiles = spanprof::cpu | spanprof::heap;
  options.head_sampler = std::make_shared<spanprof::ProbabilitySampler>(1.0);
  options.tail_policy = spanprof::keep_any_of({std::make_shared<spanprof::KeepErroredSpans>(),
                                               std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(1))});
  options.trigger = std::make_shared<spanprof::AdaptiveTrigger>(spanprof::AdaptiveTriggerOptions{});
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>([&](const spanprof::EncodedProfile& p, std::string_view) {
    if (p.record.kind == spanprof::ProfileKind::cpu && p.sample_count > 0) ++delivered;
    return spanprof::UploadResult::ok();
  }));
  options.uploaders.push_back(std::make_shared<spanprof::FileUploader>("/nonexistent/never-written"));
  const spanprof::StartResult started = spanprof::start(options);

  const auto span = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").context;
  const MySpan request{span, false};
  {
    spanprof::ScopedProfile guard(request);
    spanprof::ScopedProfile inner(spanprof::NamedSpan{span, "inner"}, spanprof::cpu);
    spanprof::ScopedProfile by_context(span, "by context");
    by_context.set_error();
    std::printf("%f\n", busy_for(0.2));
  }
  const bool flushed = spanprof::flush(std::chrono::seconds(120)).is_ok();  // CI runs this at nice 19 beside the suites
  const spanprof::Stats stats = spanprof::stats();
  const bool stopped = spanprof::shutdown(std::chrono::seconds(5)).is_ok();
  std::printf("enabled=%d started=%d flushed=%d stopped=%d delivered=%d guards_opened=%llu\n", SPANPROF_ENABLED,
              started.is_ok(), flushed, stopped, delivered.load(), static_cast<unsigned long long>(stats.guards_opened));
#if SPANPROF_ENABLED
  return started && delivered.load() >= 1 && stats.guards_opened >= 1 ? 0 : 1;
#else
  return !started && delivered.load() == 0 && stats.guards_opened == 0 ? 0 : 1;
#endif
}
