// Run by scripts/arm64.sh in an aarch64 VM (a real arm64 kernel under
// qemu-system-aarch64, tests/arm64/init/init.cpp), built statically for it. The
// under-load test of x86-64 (tests/test_under_load.cpp, the same workload from
// tests/support/span_attribution.hpp): two request threads run spans of 60 ms and
// 8 ms of CPU with unprofiled CPU between them, on the default source at 250 Hz,
// beside three busy processes on the VM's two cores and then on a quiet VM; each
// span's profile is compared with the CPU its thread spent in it, with the same
// bounds but for the 8 ms spans' excess: their sum may reach 1.15 of their CPU (not
// 1.10) and their p90 1.8 (not 1.6). On emulated cores a guard's clock reads are
// system calls of tens of microseconds, and the edges that read the clock lean
// short spans' samples their way (short_spans.cpp, docs/arm64.md): sum 0.95-1.09,
// p90 1.37-1.63 here; x86-64 0.95-1.05 and 1.37-1.54. A span in which, or just
// before which, the thread's CPU clock jumped by over 30 ms (the host took the vCPU away:
// docs/arm64.md) is left out and counted, at most 5 % of either kind: CI boots the
// VM when only low-priority work runs beside it (on a quiet host 0-2 of 120 were
// left out; beside CI's ThreadSanitizer suite, where it once ran, up to 17).
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include "../support/span_attribution.hpp"
#include "vm.hpp"

#include <cstdio>

namespace {

bool each_span_holds_its_cpu(const char* what, int busy_processes) {
  spanprof_test::AttributionSettings settings;
  settings.busy_processes = busy_processes;
  settings.void_after_clock_jump_ns = 30'000'000;
  const spanprof_test::AttributionRun run = spanprof_test::run_attribution(settings);
  const auto l = run.long_spans();
  const auto s = run.short_spans();
  std::printf("spanprof-arm64: %s: 60 ms spans p10 %.2f p50 %.2f p90 %.2f min %.2f max %.2f, %d of %d without a "
              "profile; 8 ms spans sum %.2f p90 %.2f, %d of %d without a profile; left out after a clock jump: "
              "%d long, %d short\n",
              what, l.p10, l.p50, l.p90, l.min, l.max, l.missing, l.spans, s.sum_ratio, s.p90, s.missing, s.spans,
              l.voided, s.voided);
  if (!l.worst.empty()) std::printf("spanprof-arm64: %s: the highest 60 ms span: %s\n", what, l.worst.c_str());
  if (!run.error.empty()) std::printf("spanprof-arm64: %s: a profile did not decode: %s\n", what, run.error.c_str());
  return run.error.empty() && run.source_used == spanprof::CpuSampleSource::posix_timer && l.missing == 0 &&
         l.p10 >= 0.85 && l.p90 <= 1.15 && s.sum_ratio >= 0.90 && s.sum_ratio <= 1.15 &&
         s.missing <= s.spans * 15 / 100 && s.p90 <= 1.8 && l.voided * 20 <= l.spans + l.voided &&
         s.voided * 20 <= s.spans + s.voided;
}

}  // namespace

int main() {
  const bool loaded = each_span_holds_its_cpu("beside three busy processes", 3);
  const bool quiet = each_span_holds_its_cpu("quiet", 0);
  return arm64_vm::finish(loaded && quiet);
}
