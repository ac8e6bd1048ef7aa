// A real HTTP server for the cost benchmark (bench/server_bench.py): Debian's
// cpp-httplib, a handler of about 100 µs of CPU (build a JSON body, parse it back,
// sort 400 numbers), every request inside a span. What the server's own CPU per
// request costs with profiling on, against off, is what a user pays.
//
//   server_bench MODE PORT
//
// MODE picks how requests are profiled:
//   off          no spanprof at all
//   default      spanprof::start with default options: every request profiled
//   perf_event   the same with Options::cpu_sample_source = perf_event
//   posix_timer  the same with Options::cpu_sample_source = posix_timer
//   idle         spanprof started with default options, no spans: what running costs
//   turned_down  every request in a guard the head sampler turns down (NeverSampler)
//   rare         every request profiled at 1 Hz: the guards' cost, almost no samples
//   frequent     every request profiled at 1 kHz: ten times the default's samples, so
//                the cost per sample stands out of the noise
//   tail         every request profiled, a tail policy keeps those over 2 ms (a few)
//   batched      per-span profiles merged into windows (Delivery::batched)
//   wall         spanprof::cpu | spanprof::wall per request
//   no_watch     default, with the CPU watch off (Options::watch_cpu_ticks): the timer alone
//   time_split   default, with each span's time split (Options::time_split)
//   system_lines default, system libraries' frames with their file and line from
//                their debug files (Options::system_library_lines = line_tables)
//   no_debug_files  default, no debug directory: as without the distribution's
//                debug packages (Options::debug_directories empty)
//   gperftools   gperftools' ProfilerStart for the whole process, no spans
// Profiles go to an uploader that counts them (per span unless batched), so no
// disk or network I/O is measured, only what spanprof does.
//
// GET /work serves a request; GET /cpu answers "<process CPU ns> <requests served>".
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include <gperftools/profiler.h>
#include <httplib.h>

#include "server_support.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

namespace {

std::atomic<long> served{0};
std::atomic<long> profiles{0};

// The request's span, as a tracer would make it: in every mode, `off` included,
// since what is measured is the profiler, not the tracer.
spanprof::SpanContext request_span() {
  thread_local std::uint64_t random = 0x2545F4914F6CDD1Dull ^ static_cast<std::uint64_t>(::gettid());
  std::array<std::uint8_t, 16> trace{};
  std::array<std::uint8_t, 8> span{};
  const std::uint64_t words[3] = {bench::next_random(random), bench::next_random(random),
                                  bench::next_random(random) | 1};
  std::memcpy(trace.data(), words, 16);
  std::memcpy(span.data(), words + 2, 8);
  return spanprof::SpanContext{spanprof::TraceId(trace), spanprof::SpanId(span), {spanprof::TraceFlags::sampled_bit}};
}

void benchmark_keep(const spanprof::SpanContext& span) { asm volatile("" : : "r"(&span) : "memory"); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODE PORT\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int port = std::atoi(argv[2]);
  const bool started = mode != "off" && mode != "gperftools";
  const bool spans = started && mode != "idle";
  spanprof::ProfileKinds kinds = spanprof::cpu;

  if (mode == "gperftools") {
    char path[64];
    std::snprintf(path, sizeof path, "/tmp/spanprof-server-bench-%d.prof", static_cast<int>(::getpid()));
    if (!ProfilerStart(path)) return 1;
  } else if (started) {
    spanprof::Options options(spanprof::ignore_environment);
    options.frequency_hz = 100;
    auto delivery = spanprof::Delivery::per_span();
    if (mode == "perf_event") options.cpu_sample_source = spanprof::CpuSampleSource::perf_event;
    else if (mode == "posix_timer") options.cpu_sample_source = spanprof::CpuSampleSource::posix_timer;
    else if (mode == "tail") options.tail_policy = std::make_shared<spanprof::KeepSlowSpans>(std::chrono::milliseconds(2));
    else if (mode == "batched") delivery = spanprof::Delivery::batched(std::chrono::seconds(10));
    else if (mode == "wall") kinds = spanprof::cpu | spanprof::wall;
    else if (mode == "lock") kinds = spanprof::cpu | spanprof::lock;
    else if (mode == "turned_down") options.head_sampler = std::make_shared<spanprof::NeverSampler>();
    else if (mode == "rare") options.frequency_hz = 1;
    else if (mode == "no_watch") options.watch_cpu_ticks = false;
    else if (mode == "frequent") options.frequency_hz = 1000;
    else if (mode == "time_split") options.time_split = true;
    else if (mode == "system_lines") options.system_library_lines = spanprof::SystemLibraryLines::line_tables;
    else if (mode == "no_debug_files") options.debug_directories.clear();
    else if (mode == "continuous") options.continuous = true;  // the whole process, every request's span too
    else if (mode == "continuous_only") {  // the whole process, requests only as its labels
      options.continuous = true;
      options.head_sampler = std::make_shared<spanprof::NeverSampler>();
    }
    else if (mode != "default" && mode != "idle") {
      std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
      return 2;
    }
    options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
        [](const spanprof::EncodedProfile&, std::string_view) {
          profiles.fetch_add(1, std::memory_order_relaxed);
          return spanprof::UploadResult::ok();
        },
        "count", delivery));
    const auto started = spanprof::start(options);
    if (!started) {
      for (const auto& problem : started.problems) std::fprintf(stderr, "spanprof: %s\n", problem.message.c_str());
      return 1;
    }
  }

  httplib::Server server;
  server.Get("/work", [&](const httplib::Request&, httplib::Response& response) {
    const spanprof::SpanContext span = request_span();
    if (spans) {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /work"}, kinds);
      response.set_content(bench::handle_work(), "application/json");
    } else {
      benchmark_keep(span);
      response.set_content(bench::handle_work(), "application/json");
    }
    served.fetch_add(1, std::memory_order_relaxed);
  });
  server.Get("/cpu", [](const httplib::Request&, httplib::Response& response) {
    char text[96];
    std::snprintf(text, sizeof text, "%lld %ld %ld\n", static_cast<long long>(bench::process_cpu_ns()),
                  served.load(std::memory_order_relaxed), profiles.load(std::memory_order_relaxed));
    response.set_content(text, "text/plain");
  });
  server.Get("/quit", [&](const httplib::Request&, httplib::Response& response) {
    response.set_content("bye\n", "text/plain");
    server.stop();
  });
  if (!server.listen("127.0.0.1", port)) return 1;
  if (mode == "gperftools") ProfilerStop();
  if (started) spanprof::shutdown(std::chrono::seconds(5));
  return 0;
}
