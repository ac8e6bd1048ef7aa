// What naming a profile's frames costs the background thread, with source lines and
// inlined functions (DWARF, libdw) and without, side by side in one run, on this
// benchmark program itself (debug information as the build gives it):
//   first_address           a new symbolizer resolves one address of the program:
//                           the cost before a process's first profile (symbol tables
//                           read, DWARF opened and its units indexed)
//   new_addresses           an address not seen before (most of a profile's frames
//                           the first time), per address; the symbolizer kept
//   cached_address          an address seen before
//   single_sample_profile   what the worker does for a span's profile of one sample
//                           (this benchmark's own stack): build it (symbolize its
//                           frames, the symbolizer kept), encode pprof and gzip it
// Counters: rss_added_kb, the process's resident memory added by the symbolizers
// the benchmark made (first_address), and lines, the share of addresses that got a
// file and line.
#include <spanprof/spanprof.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/detail/profile/profile_builder.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <execinfo.h>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

long resident_kb() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * 4;
}

// Addresses spread over the program's own code: every 64th byte from a function of
// this file to the end of its executable segment.
std::vector<std::uintptr_t> program_addresses() {
  std::vector<std::uintptr_t> out;
  auto probe = spanprof::make_elf_symbolizer(false);
  const auto start = reinterpret_cast<std::uintptr_t>(&resident_kb);
  const spanprof::ResolvedFrame frame = probe->resolve(start);
  if (frame.module == nullptr) return out;
  for (std::uintptr_t at = frame.module->start; at < frame.module->limit; at += 64) out.push_back(at);
  return out;
}

void first_address(benchmark::State& state) {
  const bool lines = state.range(0) != 0;
  const auto address = reinterpret_cast<std::uintptr_t>(&resident_kb);
  const long before = resident_kb();
  std::vector<std::unique_ptr<spanprof::Symbolizer>> kept;
  for (auto _ : state) {
    auto symbolizer = spanprof::make_elf_symbolizer(lines);
    benchmark::DoNotOptimize(symbolizer->resolve(address));
    state.PauseTiming();
    if (kept.size() < 8) kept.push_back(std::move(symbolizer));  // what one costs in memory, held
    state.ResumeTiming();
  }
  state.counters["rss_added_kb"] = static_cast<double>(resident_kb() - before) / static_cast<double>(kept.size());
  state.SetLabel(lines ? "with lines (libdw)" : "names only");
}
BENCHMARK(first_address)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(8);

void new_addresses(benchmark::State& state) {
  const bool lines = state.range(0) != 0;
  const std::vector<std::uintptr_t> addresses = program_addresses();
  auto symbolizer = spanprof::make_elf_symbolizer(lines);
  std::size_t next = 0, with_lines = 0, resolved = 0;
  for (auto _ : state) {
    if (next == addresses.size()) {
      state.PauseTiming();
      symbolizer = spanprof::make_elf_symbolizer(lines);  // every address new again
      symbolizer->resolve(addresses[0]);
      next = 1;
      state.ResumeTiming();
    }
    const spanprof::ResolvedFrame frame = symbolizer->resolve(addresses[next++]);
    with_lines += frame.line != 0;
    ++resolved;
  }
  state.counters["lines"] = resolved ? static_cast<double>(with_lines) / static_cast<double>(resolved) : 0.0;
  state.SetLabel(lines ? "with lines (libdw)" : "names only");
}
BENCHMARK(new_addresses)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void cached_address(benchmark::State& state) {
  const bool lines = state.range(0) != 0;
  auto symbolizer = spanprof::make_elf_symbolizer(lines);
  const auto address = reinterpret_cast<std::uintptr_t>(&resident_kb);
  symbolizer->resolve(address);
  for (auto _ : state) benchmark::DoNotOptimize(symbolizer->resolve(address));
  state.SetLabel(lines ? "with lines (libdw)" : "names only");
}
BENCHMARK(cached_address)->Arg(0)->Arg(1);

// The profile a span with one CPU sample hands the worker: its stack is this
// benchmark's own, as a signal handler would have walked it.
__attribute__((noinline)) spanprof::RawProfile one_sample_profile() {
  spanprof::RawProfile raw;
  raw.kind = spanprof::ProfileKind::cpu;
  raw.period_ns = 10'000'000;
  raw.span_name = "GET /one-sample";
  void* frames[64];
  const int depth = ::backtrace(frames, 64);
  spanprof::RawSample sample;
  sample.values = {1, raw.period_ns};
  for (int i = 0; i < depth; ++i) sample.frames.push_back(reinterpret_cast<std::uintptr_t>(frames[i]));
  raw.samples.push_back(std::move(sample));
  return raw;
}

void single_sample_profile(benchmark::State& state) {
  const bool lines = state.range(0) != 0;
  const spanprof::RawProfile raw = one_sample_profile();
  auto symbolizer = spanprof::make_elf_symbolizer(lines);
  const std::vector<std::string> comments{"spanprof bench"};
  std::string encoded;
  std::size_t with_lines = 0;
  for (auto _ : state) {
    spanprof::detail::ProfileBuilder builder(*symbolizer);
    const spanprof::Profile profile = builder.build(raw, comments);
    encoded.clear();
    benchmark::DoNotOptimize(spanprof::encode_pprof_gzip(profile, encoded));
    with_lines = 0;
    for (const auto& location : profile.locations) with_lines += location.line != 0;
  }
  state.counters["frames"] = static_cast<double>(raw.samples[0].frames.size());
  state.counters["frames_with_lines"] = static_cast<double>(with_lines);
  state.counters["bytes"] = static_cast<double>(encoded.size());
  state.SetLabel(lines ? "with lines (libdw)" : "names only");
}
BENCHMARK(single_sample_profile)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
