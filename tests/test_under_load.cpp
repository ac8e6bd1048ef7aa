// Each span's profile holds its own CPU when the machine is saturated: request
// threads run spans of ~60 ms and ~8 ms of CPU, with unprofiled CPU work between
// them, beside three busy processes (bounded in time, killed whatever happens),
// on the default source: the POSIX CPU timer with the ticker's CPU watch
// (Options::watch_cpu_ticks, docs/engines.md). Each span's profile is compared with the thread CPU
// measured around the span (tests/support/span_attribution.hpp; the same workload,
// every source, quiet and loaded: bench/bench_attribution.cpp).
//
// Hidden ("[.under_load]") and run by CTest as spanprof_under_load_tests in the
// plain build: a sanitizer's signal delivery is not the kernel's.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/span_attribution.hpp"

#include <spanprof/spanprof.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

using spanprof_test::AttributionSettings;
using spanprof_test::run_attribution;

namespace {

void report(const char* what, const spanprof_test::AttributionRun& run) {
  const auto l = run.long_spans();
  const auto s = run.short_spans();
  std::printf("%s: 60 ms spans p10 %.2f p50 %.2f p90 %.2f min %.2f max %.2f, %d of %d without a profile; "
              "8 ms spans sum %.2f p90 %.2f, %d of %d without a profile; outside the work %.3f and %.3f\n",
              what, l.p10, l.p50, l.p90, l.min, l.max, l.missing, l.spans, s.sum_ratio, s.p90, s.missing, s.spans,
              l.elsewhere, s.elsewhere);
  if (!l.worst.empty()) std::printf("%s: the highest 60 ms span: %s\n", what, l.worst.c_str());
}

// The bounds: each 60 ms span within 0.85-1.15 of its CPU (p10-p90) and
// none without a profile; 8 ms spans at most 15 % without a sample, their sum
// within 0.90-1.10 of their CPU, p90 at most 1.6. Measured with the edges' ticks
// (ThreadStackSampler::settle_open_edge): 8 ms spans sum 0.95-1.05, p90 1.37-1.54,
// 1-7 of 120 without a sample, loaded or quiet. Before them (the kernel and the
// watch alone): p90 1.55-1.85 and 6-19 of 120 without a sample under load.
// Two 8 ms spans after each 60 ms one (240 of each length in all): an 8 ms span
// holds about two samples, so its ratio falls near 0.5, 1.0, 1.5 or 2.0, and the p90
// of 120 came out anywhere from 1.32 to 1.61 (once in CI, over the bound); of 240,
// 1.30-1.50 in three runs of both phases.
void check_each_span_holds_its_cpu(const spanprof_test::AttributionRun& run) {
  REQUIRE(run.error.empty());
  const auto l = run.long_spans();
  const auto s = run.short_spans();
  INFO("60 ms: p10 " << l.p10 << " p90 " << l.p90 << " missing " << l.missing << "; 8 ms: sum " << s.sum_ratio
                     << " p90 " << s.p90 << " missing " << s.missing << " of " << s.spans);
  CHECK(l.missing == 0);
  CHECK(l.p10 >= 0.85);
  CHECK(l.p90 <= 1.15);
  CHECK(s.sum_ratio >= 0.90);
  CHECK(s.sum_ratio <= 1.10);
  CHECK(s.missing <= s.spans * 15 / 100);
  CHECK(s.p90 <= 1.6);
}

}  // namespace

TEST_CASE("beside three busy processes, each span's profile holds the CPU its thread spent in it", "[.under_load]") {
  AttributionSettings settings;  // the POSIX timer with the CPU watch, 250 Hz, two request threads
  settings.short_per_long = 2;
  settings.busy_processes = 3;
  const auto run = run_attribution(settings);
  report("loaded", run);
  REQUIRE(run.source_used == spanprof::CpuSampleSource::posix_timer);
  check_each_span_holds_its_cpu(run);
}

TEST_CASE("on a quiet machine, each span's profile holds the CPU its thread spent in it", "[.under_load]") {
  AttributionSettings settings;
  settings.short_per_long = 2;
  const auto run = run_attribution(settings);
  report("quiet", run);
  check_each_span_holds_its_cpu(run);
}

namespace {

// A hot loop that reads its thread's CPU clock (a system call) every few
// microseconds, a few percent of its CPU in the kernel: where a late tick lands
// shows in how often a sample's leaf is that call.
__attribute__((noinline)) double reads_its_clock_while_computing(double cpu_seconds) {
  const double end = spanprof_test::attribution_thread_cpu_ns() * 1e-9 + cpu_seconds;
  volatile double x = 1.0;
  do {
    for (int i = 0; i < 1500; ++i) x = x * 1.0000001 + 1e-9;
  } while (spanprof_test::attribution_thread_cpu_ns() * 1e-9 < end);
  return x;
}

__attribute__((noinline)) void waits_for_a_reply(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

struct WhereSamplesLanded {
  spanprof::CpuSampleSource source = spanprof::CpuSampleSource::automatic;
  std::int64_t cpu_ns = 0;
  double in_clock_read = 0;  // share of the CPU whose sample's leaf is clock_gettime
  double in_waiting = 0;     // in waits_for_a_reply, where the thread ran no CPU
  double outside_hot = 0;    // without the hot loop on the stack
  std::map<std::string, std::int64_t> outside_leaves;  // their leaves, by CPU
};

// Every profile delivered, decoded, for the test to read once spanprof has
// flushed.
struct ReceivedProfiles {
  std::mutex mutex;
  std::vector<spanprof::Profile> profiles;
};

std::shared_ptr<ReceivedProfiles> start_keeping_profiles(spanprof::Options options, const char* uploader_name) {
  auto received = std::make_shared<ReceivedProfiles>();
  options.queue_capacity = 4096;
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [received](const spanprof::EncodedProfile&, std::string_view pprof_gzip) {
        pprof_test::DecodedPprof decoded;
        std::string error;
        if (!pprof_test::decode_pprof(pprof_gzip, decoded, error)) return spanprof::UploadResult::permanent(error);
        std::lock_guard<std::mutex> lock(received->mutex);
        received->profiles.push_back(std::move(decoded.profile));
        return spanprof::UploadResult::ok();
      },
      uploader_name));
  spanprof::start(std::move(options));
  return received;
}

// Four threads, each 12 spans of: compute 20 ms, wait 10 ms, compute 20 ms, wait
// 10 ms; beside three busy processes, on `source`.
WhereSamplesLanded where_samples_land(spanprof::CpuSampleSource source) {
  spanprof::Options options;
  options.frequency_hz = 250;
  options.cpu_sample_source = source;
  const auto received = start_keeping_profiles(std::move(options), "where-samples-land");
  WhereSamplesLanded result;
  {
    spanprof_test::BusyProcesses busy(3, 120);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([t] {
        for (int i = 0; i < 12; ++i) {
          spanprof::ScopedProfile guard(spanprof::NamedSpan{spanprof_test::span_number(61000 + 100 * t + i), "GET /mixed"},
                                        spanprof::cpu);
          reads_its_clock_while_computing(0.02);
          waits_for_a_reply(10);
          reads_its_clock_while_computing(0.02);
          waits_for_a_reply(10);
        }
      });
    for (auto& thread : threads) thread.join();
    result.source = spanprof::stats().cpu_sample_source;
  }
  spanprof::flush(std::chrono::seconds(30));
  spanprof::shutdown(std::chrono::seconds(5));
  std::int64_t in_clock = 0, in_waiting = 0, outside_hot = 0;
  std::lock_guard<std::mutex> lock(received->mutex);
  for (const auto& profile : received->profiles) {
    std::map<std::uint64_t, std::string> names;
    for (const auto& location : profile.locations) names[location.id] = pprof_test::location_functions(profile, location);
    for (const auto& sample : profile.samples) {
      const std::int64_t cpu = sample.values.at(1);
      std::string stack;
      for (auto id : sample.location_ids) stack += names[id] + "\n";
      result.cpu_ns += cpu;
      if (pprof_test::leaf_function(profile, sample).find("clock_gettime") != std::string::npos) in_clock += cpu;
      if (stack.find("waits_for_a_reply") != std::string::npos) in_waiting += cpu;
      if (stack.find("reads_its_clock_while_computing") == std::string::npos) {
        outside_hot += cpu;
        result.outside_leaves[pprof_test::leaf_function(profile, sample)] += cpu;
      }
    }
  }
  const double total = result.cpu_ns > 0 ? static_cast<double>(result.cpu_ns) : 1.0;
  result.in_clock_read = static_cast<double>(in_clock) / total;
  result.in_waiting = static_cast<double>(in_waiting) / total;
  result.outside_hot = static_cast<double>(outside_hot) / total;
  return result;
}

}  // namespace

// Under load the POSIX timer's ticks come late, and a late tick finds the thread
// wherever it has gone since: in a wait, at the system call that let the scheduler
// in, at the span's close. Each span's CPU must still be shown where it went: as
// often in the system call as perf_event (whose ticks come at the point itself)
// shows it, never in a wait, never outside the code that ran. Measured here: the
// default source 6-15 % in clock_gettime against perf_event's 7-9 % in the same
// run, none outside the loop; before the rules of
// ThreadStackSampler::passed_before_a_wait and repeat_last_cpu_record, 20-36 % and
// 2-8 %.
TEST_CASE("beside three busy processes, a span's CPU samples land where its CPU went", "[.under_load]") {
  const auto truth = where_samples_land(spanprof::CpuSampleSource::perf_event);
  const auto by_default = where_samples_land(spanprof::CpuSampleSource::automatic);
  std::printf("where samples land, loaded: in clock_gettime %.3f (perf_event %.3f), in a wait %.3f (%.3f), "
              "outside the hot loop %.3f (%.3f); %.0f ms of CPU (%.0f)\n",
              by_default.in_clock_read, truth.in_clock_read, by_default.in_waiting, truth.in_waiting,
              by_default.outside_hot, truth.outside_hot, by_default.cpu_ns / 1e6, truth.cpu_ns / 1e6);
  std::string outside;
  for (const auto& [leaf, cpu] : by_default.outside_leaves) outside += leaf + ": " + std::to_string(cpu / 1000) + " us; ";
  INFO("outside the hot loop: " << outside);
  REQUIRE(by_default.source == spanprof::CpuSampleSource::posix_timer);
  CHECK(by_default.cpu_ns >= std::int64_t{4 * 12 * 40} * 1'000'000 * 8 / 10);  // 4 threads, 12 spans of 40 ms
  CHECK(by_default.in_waiting <= 0.005);
  // 0.0-0.4 % on a quiet machine beside the 3 busy processes, 2.2 % once in CI
  // (with CI's own stages beside them); 2-8 % before the rules.
  CHECK(by_default.outside_hot <= 0.03);
  if (truth.source != spanprof::CpuSampleSource::perf_event) {
    WARN("perf_event is not open to this process: the clock read's share is not compared");
    return;
  }
  CHECK(by_default.in_clock_read <= truth.in_clock_read + 0.10);
  CHECK(by_default.in_clock_read >= truth.in_clock_read - 0.05);
}

namespace {

// Work with no system call in it: a fixed number of rounds of arithmetic.
// (Its own constants: the suites are built in unity batches, and a function with
// the same body as another's would be folded into one name.)
__attribute__((noinline)) std::uint64_t computes_without_calls(std::uint64_t rounds) {
  std::uint64_t x = 0xD1B54A32D192ED03ull;
  for (std::uint64_t i = 0; i < rounds; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    asm volatile("" : "+r"(x));
  }
  return x;
}

// The rounds of computes_without_calls that take `cpu_ns` of this thread's CPU.
std::uint64_t rounds_for(std::int64_t cpu_ns) {
  for (std::uint64_t rounds = 1 << 16;; rounds *= 2) {
    const std::int64_t start = spanprof_test::attribution_thread_cpu_ns();
    computes_without_calls(rounds);
    const std::int64_t took = spanprof_test::attribution_thread_cpu_ns() - start;
    if (took > 20'000'000) return static_cast<std::uint64_t>(static_cast<double>(rounds) * cpu_ns / took);
  }
}

// A request: 40 ms of computing, one small write to a pipe another thread waits
// on (a reply sent, as a handler's send is), which wakes that thread and lets the
// scheduler in, then a 20 ms wait. The CPU the two calls take (tens of µs each on
// this VM) is read around them and added to `in_calls_ns`.
__attribute__((noinline)) void computes_sends_and_waits(std::uint64_t rounds_per_ms, int pipe_out,
                                                         std::int64_t& in_calls_ns) {
  computes_without_calls(40 * rounds_per_ms);
  const std::int64_t before = spanprof_test::attribution_thread_cpu_ns();
  const char byte = 'x';
  if (::write(pipe_out, &byte, 1) != 1) std::abort();
  waits_for_a_reply(20);
  in_calls_ns += spanprof_test::attribution_thread_cpu_ns() - before;
}

struct RareCallsLanded {
  spanprof::CpuSampleSource source = spanprof::CpuSampleSource::automatic;
  std::int64_t cpu_ns = 0;           // the spans' profiles' CPU
  std::int64_t spans_cpu_ns = 0;     // the spans' CPU, read around them
  std::int64_t calls_cpu_ns = 0;     // of it, in the write and the wait
  double in_calls = 0;     // share of the profiles' CPU whose sample's leaf is in a system call (the write, the wait's)
  double at_close = 0;     // whose leaf is the function holding the guard, or spanprof's
  std::map<std::string, std::int64_t> outside_leaves;
  double calls_share() const { return spans_cpu_ns > 0 ? static_cast<double>(calls_cpu_ns) / spans_cpu_ns : 1.0; }
};

// Four request threads, 24 spans each; each with a reader thread draining its
// pipe. Beside `busy` busy processes, at 250 Hz, on the default source.
RareCallsLanded where_samples_land_with_rare_calls(int busy) {
  spanprof::Options options;
  options.frequency_hz = 250;
  const auto received = start_keeping_profiles(std::move(options), "rare-calls");
  const std::uint64_t rounds_per_ms = rounds_for(1'000'000);
  RareCallsLanded result;
  {
    spanprof_test::BusyProcesses busy_processes(busy, 120);
    std::mutex mutex;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        int pipe_ends[2];
        if (::pipe(pipe_ends) != 0) std::abort();
        std::thread reader([in = pipe_ends[0]] {
          char bytes[64];
          while (::read(in, bytes, sizeof bytes) > 0) {
          }
        });
        std::int64_t spans_cpu = 0, calls_cpu = 0;
        for (int i = 0; i < 24; ++i) {
          const std::int64_t start = spanprof_test::attribution_thread_cpu_ns();
          {
            spanprof::ScopedProfile guard(
                spanprof::NamedSpan{spanprof_test::span_number(62000 + 100 * t + i), "GET /stream"}, spanprof::cpu);
            computes_sends_and_waits(rounds_per_ms, pipe_ends[1], calls_cpu);
          }
          spans_cpu += spanprof_test::attribution_thread_cpu_ns() - start;
        }
        ::close(pipe_ends[1]);
        reader.join();
        ::close(pipe_ends[0]);
        std::lock_guard<std::mutex> lock(mutex);
        result.spans_cpu_ns += spans_cpu;
        result.calls_cpu_ns += calls_cpu;
      });
    for (auto& thread : threads) thread.join();
    result.source = spanprof::stats().cpu_sample_source;
  }
  spanprof::flush(std::chrono::seconds(30));
  spanprof::shutdown(std::chrono::seconds(5));
  std::int64_t in_calls = 0, at_close = 0;
  std::lock_guard<std::mutex> lock(received->mutex);
  for (const auto& profile : received->profiles) {
    for (const auto& sample : profile.samples) {
      const std::int64_t cpu = sample.values.at(1);
      const std::string leaf = pprof_test::leaf_function(profile, sample);
      result.cpu_ns += cpu;
      // The span's code: the hot loop, and the function around it.
      if (leaf.find("computes_without_calls") != std::string::npos ||
          leaf.find("computes_sends_and_waits") != std::string::npos)
        continue;
      result.outside_leaves[leaf] += cpu;
      if (leaf.find("spanprof::") != std::string::npos || leaf.find("where_samples_land") != std::string::npos)
        at_close += cpu;  // the function holding the guard, or spanprof's own closing code
      else
        in_calls += cpu;  // libc's: the write, the wait's nanosleep, the clock reads around them
    }
  }
  const double total = result.cpu_ns > 0 ? static_cast<double>(result.cpu_ns) : 1.0;
  result.in_calls = static_cast<double>(in_calls) / total;
  result.at_close = static_cast<double>(at_close) / total;
  return result;
}

void check_rare_calls(const char* machine, int busy) {
  const auto landed = where_samples_land_with_rare_calls(busy);
  std::printf("where samples land, rare system calls, %s: in the calls %.4f of the profiles' CPU (the calls took %.4f "
              "of the spans' CPU), at the close %.4f; %.0f ms of CPU in profiles, %.0f ms in the spans\n",
              machine, landed.in_calls, landed.calls_share(), landed.at_close, landed.cpu_ns / 1e6,
              landed.spans_cpu_ns / 1e6);
  std::string outside;
  for (const auto& [leaf, cpu] : landed.outside_leaves) outside += leaf + ": " + std::to_string(cpu / 1000) + " us; ";
  INFO("outside the span's code: " << outside);
  CHECK(landed.cpu_ns >= landed.spans_cpu_ns * 8 / 10);
  REQUIRE(landed.calls_share() < 0.005);  // the workload's premise: its calls take under 0.5 % of its CPU
  CHECK(landed.in_calls <= 0.01);
  CHECK(landed.at_close <= 0.01);
}

}  // namespace

// A late tick finds the thread wherever it went since its point: in a workload
// whose system calls take under 0.5 % of its CPU, at most 1 % of a span's samples
// land in them (the call's return is where a preempted thread waits for its core),
// and at most 1 % at the guard's close.
TEST_CASE("on a quiet machine, the samples of a span that rarely calls the kernel land in its code", "[.under_load]") {
  check_rare_calls("quiet", 0);
}

TEST_CASE("beside three busy processes, the samples of a span that rarely calls the kernel land in its code",
          "[.under_load]") {
  check_rare_calls("loaded", 3);
}
