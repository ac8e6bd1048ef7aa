// Each span's profile against the thread CPU the span really used, for every CPU
// sample source, on a quiet machine and beside busy processes, side by side in one
// run (docs/engines.md, docs/cost.md). The workload is the under-load test's
// (tests/support/span_attribution.hpp): request threads run spans of ~60 ms and
// ~8 ms of CPU with 3 ms of unprofiled CPU work after each.
//
//   spanprof_bench_attribution [--busy N] [--hz N] [--spans N] [--repeat N]
//
// --spans N: spans of 60 ms and of 8 ms per thread, alternating (default 60).
//
// Rows: the POSIX CPU timer alone (watch_cpu_ticks off); the timer with the
// ticker's CPU watch and the spans' edges (Options::watch_cpu_ticks), what a thread
// that switches often ticks on by default; the default (automatic: these threads
// compute, and move to perf_event); perf_event. Prints, per row and load: the 60 ms
// spans' ratios (profile CPU / true CPU) at p10, p50, p90, min and max with the
// spans that got no profile; the 8 ms spans' sum ratio, p90 and spans without a
// profile; the share of the spans' profile CPU outside the work's code (at the
// guard's close, say), for the 60 ms and 8 ms spans.
#include "../tests/support/span_attribution.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

}  // namespace

int main(int argc, char** argv) {
  int busy = 3, hz = 250, spans = 60, repeat = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--busy") == 0) busy = value;
    else if (std::strcmp(argv[i], "--hz") == 0) hz = value;
    else if (std::strcmp(argv[i], "--spans") == 0) spans = value;
    else if (std::strcmp(argv[i], "--repeat") == 0) repeat = value;
  }
  std::printf("2 request threads, each %d spans of 60 ms and %d of 8 ms CPU, 3 ms unprofiled after each; %d Hz; "
              "loaded = beside %d busy processes on %ld cores\n",
              spans, spans, hz, busy, ::sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-12s %-6s | 60 ms: %5s %5s %5s %5s %5s %7s | 8 ms: %5s %5s %7s | elsewhere\n", "source", "load", "p10",
              "p50", "p90", "min", "max", "missing", "sum", "p90", "missing");
  for (int round = 0; round < repeat; ++round) {
    for (const int load : {0, busy}) {
      struct Config {
        const char* name;
        spanprof::CpuSampleSource source;
        bool watch;
      };
      for (const Config config : {Config{"timer alone", spanprof::CpuSampleSource::posix_timer, false},
                                  Config{"timer+watch", spanprof::CpuSampleSource::posix_timer, true},
                                  Config{"default", spanprof::CpuSampleSource::automatic, true},
                                  Config{"perf_event", spanprof::CpuSampleSource::perf_event, false}}) {
        const auto source = config.source;
        spanprof_test::AttributionSettings settings;
        settings.source = source;
        settings.watch_cpu_ticks = config.watch;
        settings.frequency_hz = hz;
        settings.rounds = spans;
        settings.busy_processes = load;
        const auto run = spanprof_test::run_attribution(settings);
        const auto l = run.long_spans();
        const auto s = run.short_spans();
        std::printf("%-12s %-6s | 60 ms: %5.2f %5.2f %5.2f %5.2f %5.2f %3d/%-3d | 8 ms: %5.2f %5.2f %3d/%-3d | %.3f %.3f%s\n",
                    config.name, load ? "loaded" : "quiet", l.p10, l.p50, l.p90, l.min, l.max, l.missing,
                    l.spans, s.sum_ratio, s.p90, s.missing, s.spans, l.elsewhere, s.elsewhere,
                    run.source_used == spanprof::CpuSampleSource::perf_event && source != spanprof::CpuSampleSource::perf_event
                        ? " (ran on perf_event)"
                        : "");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
