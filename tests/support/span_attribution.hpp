// The under-load attribution workload, shared by tests/test_under_load.cpp (which
// asserts on it) and bench/bench_attribution.cpp (which prints it for every source,
// quiet and loaded): request threads run spans of ~60 ms and ~8 ms of CPU with
// unprofiled CPU work between them, each span's thread CPU is measured around it,
// and each span's profile (decoded from the pprof bytes spanprof hands over) is
// compared with it. Optionally beside busy processes that keep every core wanted,
// which is when slow spans happen and when a CPU timer checked on the scheduler
// tick goes wrong (docs/engines.md).
#pragma once

#include <spanprof/spanprof.hpp>

#include "pprof_reader.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace spanprof_test {

// Processes that spin on every core they get, for a bounded time: each dies when
// its alarm rings, when its parent dies, or when this object goes, whatever happens
// first. They are dealt over the CPUs this process may use, one each in turn, and
// stay there: left to the scheduler, four of them sometimes shared one core of two
// for a whole 50 ms span (a busy core rebalances every 32 ms or more, and not a
// task that ran just now), and the test's thread had the other to itself. The
// constructor returns once each has run on a CPU, and cpu_ns() says how much CPU
// they took, so a test can tell what its load really was.
class BusyProcesses {
 public:
  BusyProcesses(int count, int most_seconds) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0)
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    for (int i = 0; i < count; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (!cpus.empty()) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cpus[static_cast<std::size_t>(i) % cpus.size()], &one);
          ::sched_setaffinity(0, sizeof one, &one);
        }
        ::alarm(static_cast<unsigned>(most_seconds));
        volatile std::uint64_t spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
    for (const pid_t pid : pids_) {
      clockid_t clock{};
      clocks_.push_back(::clock_getcpuclockid(pid, &clock) == 0 ? clock : clockid_t{-1});
    }
    // Each has spun 5 ms of CPU, or 2 s have passed (a machine that busy is loaded anyway).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (spinning() < pids_.size() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;
  ~BusyProcesses() {
    for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  std::size_t running() const { return pids_.size(); }
  // How many have run at least 5 ms of CPU.
  std::size_t spinning() const {
    std::size_t count = 0;
    for (const clockid_t clock : clocks_) count += cpu_ns_of(clock) >= 5'000'000 ? 1 : 0;
    return count;
  }
  // The CPU they have run, all together.
  std::int64_t cpu_ns() const {
    std::int64_t total = 0;
    for (const clockid_t clock : clocks_) total += cpu_ns_of(clock);
    return total;
  }

 private:
  static std::int64_t cpu_ns_of(clockid_t clock) {
    timespec ts{};
    if (clock == clockid_t{-1} || ::clock_gettime(clock, &ts) != 0) return 0;
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
  std::vector<pid_t> pids_;
  std::vector<clockid_t> clocks_;
};

inline std::int64_t attribution_thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The work: distinct names, so a profile's stacks say where the CPU went.
__attribute__((noinline)) inline double attribution_compute(std::int64_t cpu_ns, double seed) {
  const std::int64_t end = attribution_thread_cpu_ns() + cpu_ns;
  double x = seed;
  while (attribution_thread_cpu_ns() < end)
    for (int i = 1; i < 4000; ++i) x += 1.0 / (i * x + 1.5);
  return x;
}
__attribute__((noinline)) inline double attribution_long_span(std::int64_t cpu_ns) { return attribution_compute(cpu_ns, 1.0); }
__attribute__((noinline)) inline double attribution_short_span(std::int64_t cpu_ns) { return attribution_compute(cpu_ns, 2.0); }
__attribute__((noinline)) inline double attribution_between_spans(std::int64_t cpu_ns) { return attribution_compute(cpu_ns, 3.0); }

struct AttributionSettings {
  spanprof::CpuSampleSource source = spanprof::CpuSampleSource::automatic;
  int frequency_hz = 250;
  int threads = 2;
  // Per thread: `rounds` of one long span and `short_per_long` short ones. A short
  // span gets about two samples: the short spans' sum is only as exact as their
  // number allows (~3 % standard error for 120).
  int rounds = 60;
  int short_per_long = 1;
  std::int64_t long_span_ns = 60'000'000;
  std::int64_t short_span_ns = 8'000'000;
  std::int64_t between_ns = 3'000'000;  // unprofiled CPU after each span
  int busy_processes = 0;
  bool watch_cpu_ticks = true;  // Options::watch_cpu_ticks
  // Over 0: a span whose own CPU, or its thread's CPU since the span before's work,
  // is this much over what its work takes is void, counted, not compared: the
  // thread's CPU clock jumped (an emulated VM's, while the host took its vCPU away),
  // and neither the truth nor the samples' weights hold what the thread ran.
  std::int64_t void_after_clock_jump_ns = 0;
};

struct SpanMeasure {
  bool long_span = false;
  std::int64_t true_cpu_ns = 0;     // the thread's CPU clock around the span's work
  std::int64_t profile_cpu_ns = 0;  // the cpu values of its profile's samples
  bool has_profile = false;
  int profiles = 0;                    // delivered under its span id: one, or none
  std::int64_t biggest_sample_ns = 0;  // the heaviest sample's cpu value in them
  std::int64_t cpu_before_ns = 0;      // the thread's CPU since the span before's work ended
  std::int64_t elsewhere_cpu_ns = 0;   // the CPU of its samples outside the work's code (attribution_compute)
  double ratio() const { return true_cpu_ns > 0 ? static_cast<double>(profile_cpu_ns) / true_cpu_ns : 0; }
};

struct AttributionSummary {
  int spans = 0;
  int missing = 0;  // spans with no profile (no sample)
  int voided = 0;   // spans left out: the thread's CPU clock jumped (void_after_clock_jump_ns)
  double p10 = 0, p50 = 0, p90 = 0, min = 0, max = 0;
  double sum_ratio = 0;  // all the profiles' CPU over all the spans' CPU
  // The share of the profiles' CPU in samples outside the work's code (the span
  // functions tail-call attribution_compute): not where the CPU went, e.g. the
  // guard's close.
  double elsewhere = 0;
  // When a span's ratio is over 1.5 or a thread ran over 30 ms of CPU between two
  // spans' work: what the worst span's profile held, and the widest such gap (an
  // emulated VM's thread CPU clock jumps while the host takes its vCPU away).
  std::string worst;
};

inline AttributionSummary summarize(const std::vector<SpanMeasure>& measures, bool long_spans,
                                    const AttributionSettings& settings = {}) {
  AttributionSummary s;
  std::vector<double> ratios;
  double truth = 0, profiled = 0, elsewhere = 0;
  const SpanMeasure* worst = nullptr;
  std::int64_t widest_gap = 0;
  for (const auto& m : measures) {
    if (m.long_span != long_spans) continue;
    if (settings.void_after_clock_jump_ns > 0) {
      const std::int64_t work_ns = long_spans ? settings.long_span_ns : settings.short_span_ns;
      if (m.cpu_before_ns > settings.between_ns + settings.void_after_clock_jump_ns ||
          m.true_cpu_ns > work_ns + settings.void_after_clock_jump_ns) {
        ++s.voided;
        continue;
      }
    }
    if (worst == nullptr || m.ratio() > worst->ratio()) worst = &m;
    widest_gap = std::max(widest_gap, m.cpu_before_ns);
    ++s.spans;
    if (!m.has_profile) ++s.missing;
    ratios.push_back(m.ratio());
    truth += static_cast<double>(m.true_cpu_ns);
    profiled += static_cast<double>(m.profile_cpu_ns);
    elsewhere += static_cast<double>(m.elsewhere_cpu_ns);
  }
  if (ratios.empty()) return s;
  if (worst != nullptr && (worst->ratio() > 1.5 || widest_gap > 30'000'000)) {
    char line[320];
    std::snprintf(line, sizeof line,
                  "%.2f of its %.1f ms of CPU in %d profile(s), the heaviest sample %.1f ms; %.1f ms of CPU "
                  "between the span before's work and its own (the most before any of them: %.1f ms)",
                  worst->ratio(), static_cast<double>(worst->true_cpu_ns) / 1e6, worst->profiles,
                  static_cast<double>(worst->biggest_sample_ns) / 1e6, static_cast<double>(worst->cpu_before_ns) / 1e6,
                  static_cast<double>(widest_gap) / 1e6);
    s.worst = line;
  }
  std::sort(ratios.begin(), ratios.end());
  const auto at = [&](double q) { return ratios[static_cast<std::size_t>(q * static_cast<double>(ratios.size() - 1) + 0.5)]; };
  s.p10 = at(0.1);
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.min = ratios.front();
  s.max = ratios.back();
  s.sum_ratio = truth > 0 ? profiled / truth : 0;
  s.elsewhere = profiled > 0 ? elsewhere / profiled : 0;
  return s;
}

struct AttributionRun {
  AttributionSettings settings;
  std::vector<SpanMeasure> spans;
  spanprof::CpuSampleSource source_used = spanprof::CpuSampleSource::automatic;
  std::string error;  // a profile that did not decode
  AttributionSummary long_spans() const { return summarize(spans, true, settings); }
  AttributionSummary short_spans() const { return summarize(spans, false, settings); }
};

// Starts spanprof with `settings`, runs the workload, flushes, shuts down.
inline AttributionRun run_attribution(const AttributionSettings& settings) {
  struct Received {
    std::mutex mutex;
    std::map<std::string, std::int64_t> cpu_by_span;
    std::map<std::string, int> profiles_by_span;
    std::map<std::string, std::int64_t> biggest_sample_by_span;
    std::map<std::string, std::int64_t> elsewhere_by_span;
    std::string error;
  };
  auto received = std::make_shared<Received>();
  spanprof::Options options;
  options.frequency_hz = settings.frequency_hz;
  options.cpu_sample_source = settings.source;
  options.watch_cpu_ticks = settings.watch_cpu_ticks;
  options.queue_capacity = 4096;
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [received](const spanprof::EncodedProfile& p, std::string_view pprof_gzip) {
        pprof_test::DecodedPprof decoded;
        std::string error;
        std::int64_t cpu = 0, biggest = 0, elsewhere = 0;
        if (pprof_test::decode_pprof(pprof_gzip, decoded, error)) {
          const spanprof::Profile& profile = decoded.profile;
          for (const auto& sample : profile.samples)
            if (sample.values.size() > 1) {
              cpu += sample.values[1];
              biggest = std::max<std::int64_t>(biggest, sample.values[1]);
              bool in_span_function = false;
              for (auto id : sample.location_ids)
                for (const auto& location : profile.locations)
                  if (location.id == id) {
                    const std::string functions = pprof_test::location_functions(profile, location);
                    in_span_function = in_span_function || functions.find("attribution_compute") != std::string::npos;
                  }
              if (!in_span_function) elsewhere += sample.values[1];
            }
        }
        const std::string id = p.record.span.span_id.to_hex();
        std::lock_guard<std::mutex> lock(received->mutex);
        if (!error.empty()) received->error = error;
        received->cpu_by_span[id] += cpu;
        received->profiles_by_span[id] += 1;
        received->biggest_sample_by_span[id] = std::max(received->biggest_sample_by_span[id], biggest);
        received->elsewhere_by_span[id] += elsewhere;
        return spanprof::UploadResult::ok();
      },
      "attribution"));
  spanprof::start(std::move(options));

  AttributionRun run;
  run.settings = settings;
  {
    BusyProcesses busy(settings.busy_processes, 120);
    std::mutex mutex;
    std::vector<std::pair<std::string, SpanMeasure>> measured;
    std::vector<std::thread> threads;
    for (int t = 0; t < settings.threads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 random(7000 + static_cast<std::uint64_t>(t));
        std::vector<std::pair<std::string, SpanMeasure>> mine;
        double sink = 0;
        const int per_round = 1 + settings.short_per_long;
        std::int64_t last_work_end = attribution_thread_cpu_ns();
        for (int i = 0; i < settings.rounds * per_round; ++i) {
          char header[64];
          std::snprintf(header, sizeof header, "00-%016llx%016llx-%016llx-01",
                        static_cast<unsigned long long>(random() | 1), static_cast<unsigned long long>(random()),
                        static_cast<unsigned long long>(random() | 1));
          const spanprof::SpanContext span = spanprof::parse_traceparent(header).context;
          SpanMeasure m;
          m.long_span = i % per_round == 0;
          {
            spanprof::ScopedProfile guard(spanprof::NamedSpan{span, m.long_span ? "long" : "short"});
            const std::int64_t start = attribution_thread_cpu_ns();
            m.cpu_before_ns = start - last_work_end;
            sink += m.long_span ? attribution_long_span(settings.long_span_ns)
                                : attribution_short_span(settings.short_span_ns);
            last_work_end = attribution_thread_cpu_ns();
            m.true_cpu_ns = last_work_end - start;
          }
          sink += attribution_between_spans(settings.between_ns);
          mine.emplace_back(span.span_id.to_hex(), m);
        }
        std::lock_guard<std::mutex> lock(mutex);
        measured.insert(measured.end(), mine.begin(), mine.end());
        if (sink == 42) measured.clear();  // keeps the work
      });
    }
    for (auto& thread : threads) thread.join();
    spanprof::flush(std::chrono::seconds(30));
    run.source_used = spanprof::stats().cpu_sample_source;
    std::lock_guard<std::mutex> lock(received->mutex);
    for (auto& [id, m] : measured) {
      const auto it = received->cpu_by_span.find(id);
      m.has_profile = it != received->cpu_by_span.end();
      if (m.has_profile) {
        m.profile_cpu_ns = it->second;
        m.profiles = received->profiles_by_span[id];
        m.biggest_sample_ns = received->biggest_sample_by_span[id];
        m.elsewhere_cpu_ns = received->elsewhere_by_span[id];
      }
      run.spans.push_back(m);
    }
    run.error = received->error;
  }
  spanprof::shutdown(std::chrono::seconds(10));
  return run;
}

}  // namespace spanprof_test
