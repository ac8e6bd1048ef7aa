// Run by scripts/arm64.sh in an aarch64 VM (a real arm64 kernel under
// qemu-system-aarch64, tests/arm64/init/init.cpp), built statically for it.
// Spans shorter than the sampling period, back to back, as on x86-64
// (tests/test_cpu_profiles.cpp): 500 spans of 4 ms at 100 Hz, and together the
// samples' CPU must be the spans' CPU within 10 %, on the default source (a POSIX
// CPU timer the kernel checks at its tick) and on perf_event when the kernel opens
// it. x86-64 runs spans of 0.5 ms; on emulated cores a guard's clock reads are
// system calls of tens of microseconds, several per cent of such a span, which
// then says more about qemu than about the sampler (docs/arm64.md).
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include "vm.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>

__attribute__((noinline)) double short_span_work(double cpu_seconds) { return arm64_vm::compute_for(cpu_seconds, 200); }

namespace {

struct Sampled {
  std::mutex mutex;
  std::int64_t cpu_ns = 0;
  std::int64_t profiles = 0;
};

// The samples' CPU over the spans' CPU, or a negative number when `source` was
// not the one that sampled.
double sampled_over_spent(spanprof::CpuSampleSource source, const char* name) {
  auto sampled = std::make_shared<Sampled>();
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = 100;
  options.cpu_sample_source = source;
  options.queue_capacity = 4096;
  // The lambdas hold `sampled` (and its mutex) for as long as the uploader lives.
  arm64_vm::tally_profiles(
      options, sampled->mutex, [sampled](const spanprof::SpanRecord&) { ++sampled->profiles; },
      [sampled](const arm64_vm::SampleSeen& sample) { sampled->cpu_ns += sample.values.at(1); });
  const spanprof::Stats counted_before = spanprof::stats();  // counters run on across restarts
  if (!spanprof::start(std::move(options)).ok()) return -1;
  constexpr int spans = 500;
  double spent = 0;
  for (int i = 0; i < spans; ++i) {
    spanprof::ScopedProfile guard(arm64_vm::span_number(1000 + static_cast<unsigned>(i)));
    const double before = arm64_vm::thread_cpu_seconds();
    short_span_work(0.004);
    spent += arm64_vm::thread_cpu_seconds() - before;
  }
  const spanprof::Stats stats = spanprof::stats();
  const spanprof::CpuSampleSource used = stats.cpu_sample_source;
  spanprof::flush(std::chrono::seconds(30));
  spanprof::shutdown(std::chrono::seconds(5));
  const bool as_asked =
      used == (source == spanprof::CpuSampleSource::automatic ? spanprof::CpuSampleSource::posix_timer : source);
  std::lock_guard<std::mutex> lock(sampled->mutex);
  const double ratio = static_cast<double>(sampled->cpu_ns) * 1e-9 / spent;
  std::printf("spanprof-arm64: %s: %d spans, %.3f s of CPU in them, samples' CPU %.3f s in %lld profiles: %.3f\n", name,
              spans, spent, static_cast<double>(sampled->cpu_ns) * 1e-9, static_cast<long long>(sampled->profiles),
              ratio);
  std::printf("spanprof-arm64: %s: %llu samples, %llu ticks sent by the watch, %llu taken at a close\n", name,
              static_cast<unsigned long long>(stats.samples_captured - counted_before.samples_captured),
              static_cast<unsigned long long>(stats.cpu_ticks_watched - counted_before.cpu_ticks_watched),
              static_cast<unsigned long long>(stats.cpu_ticks_at_close - counted_before.cpu_ticks_at_close));
  return as_asked ? ratio : -1;
}

}  // namespace

int main() {
  const double by_default = sampled_over_spent(spanprof::CpuSampleSource::automatic, "default source");
  bool pass = by_default > 0.9 && by_default < 1.1;
  const double perf = sampled_over_spent(spanprof::CpuSampleSource::perf_event, "perf_event");
  if (perf < 0)
    std::printf("spanprof-arm64: perf_event is not open here: not compared\n");
  else
    pass = pass && perf > 0.9 && perf < 1.1;
  return arm64_vm::finish(pass);
}
