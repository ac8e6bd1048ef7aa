// What a user writes: one include, one guard. Exits non-zero unless a labelled
// profile of the hot function reached the uploader.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace {
__attribute__((noinline)) double consumer_hot_loop() {
  double x = 0;
  const std::clock_t end = std::clock() + CLOCKS_PER_SEC / 5;
  while (std::clock() < end)
    for (int i = 0; i < 10000; ++i) x += std::sqrt(i);
  return x;
}
}  // namespace

int main() {
  std::atomic<int> delivered{0};
  spanprof::Options options;
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>([&](const spanprof::EncodedProfile& p, std::string_view pprof_gzip) {
    if (p.record.span_name == "consumer" && p.sample_count > 0 && pprof_gzip.size() > 2) ++delivered;
    return spanprof::UploadResult::ok();
  }));
  // CI runs the consumers at nice 19 beside busy suites: in slices shorter than the
  // scheduler tick, where the POSIX CPU timer is checked, a 0.2 s span can end with
  // no sample (seen: 1 run in 8). The perf event samples whenever the thread runs.
  options.cpu_sample_source = spanprof::CpuSampleSource::perf_event;
  spanprof::start(options);
  const auto span = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").context;
  {
    // A fragment publishes the thread context for profilers outside the process
    // (OTEP 4947): the program defines otel_thread_ctx_v1, and must export it
    // (run.sh checks .dynsym). Discarded: one profile is expected below.
    spanprof::RequestProfile request(span, "consumer request");
    spanprof::Fragment fragment(request);
    request.discard();
  }
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "consumer"});
    std::printf("%f\n", consumer_hot_loop());
  }
  // A generous deadline: CI runs the consumers at nice 19 beside its test suites,
  // where symbolizing and encoding this one profile can take seconds.
  spanprof::shutdown(std::chrono::seconds(120));
  std::printf("profiles delivered: %d\n", delivered.load());
  return delivered.load() == 1 ? 0 : 1;
}
