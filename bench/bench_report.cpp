// spanprof-report at scale (docs/report.md): writes N spans' profiles as spanprof
// writes them (one gzip'd pprof per span, its repeated stacks merged), then times
// `spanprof-report DIR -o report.html` and reports the seconds and the page's size;
// with --browser, also the seconds headless chromium takes to load the page and
// open one span's view (its flame graphs and diff).
//
//   spanprof_bench_report                    10,000 spans, 300 samples, 50 names
//   spanprof_bench_report --spans 200        a smoke run (CI)
//   spanprof_bench_report --batched          windows of 100 spans per file
//   spanprof_bench_report --browser          and time chromium on the page
//   spanprof_bench_report --keep             leave the profiles and the page in /tmp
//
// A plain timed program: one run of a command-line tool is what is measured, not
// a loop Google Benchmark could repeat.
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/span/span_context.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

struct Settings {
  int spans = 10'000;
  int samples = 300;
  int names = 50;
  int batch = 1;  // spans per file
  bool browser = false;
  bool keep = false;  // leave the profiles and the page in place
};

constexpr std::int64_t period_ns = 10'101'010;  // 99 Hz, spanprof's default frequency

// Each span name runs its own handler: a few dozen stacks under the frames every
// request shares, with function names as long as a C++ service's.
struct Handler {
  std::string name;
  std::vector<std::vector<std::string>> stacks;  // outermost frame first
};

std::vector<Handler> make_handlers(int names, std::mt19937_64& rng) {
  const std::vector<std::string> common = {"clone3", "start_thread", "server::Worker::run()",
                                           "server::Connection::serve(server::Request&)"};
  std::vector<Handler> handlers;
  for (int n = 0; n < names; ++n) {
    Handler handler;
    handler.name = (n % 3 == 0 ? "GET /api/v2/resource" : n % 3 == 1 ? "POST /api/v2/resource" : "PUT /api/v2/item") +
                   std::to_string(n);
    const std::string ns = "service::handler" + std::to_string(n) + "::";
    for (int s = 0; s < 30; ++s) {
      std::vector<std::string> stack = common;
      stack.push_back(ns + "handle(server::Request const&, server::Response&)");
      const int depth = 3 + static_cast<int>(rng() % 12);
      for (int d = 0; d < depth; ++d)
        stack.push_back(ns + "step" + std::to_string(d) + "_" + std::to_string((s + d) % 7) +
                        "(std::vector<std::string, std::allocator<std::string>> const&)");
      if (s % 5 == 0) stack.push_back("__memmove_avx_unaligned_erms");
      handler.stacks.push_back(std::move(stack));
    }
    handlers.push_back(std::move(handler));
  }
  return handlers;
}

// Interns functions and one location per function, as the encoder's input.
struct ProfileMaker {
  spanprof::Profile profile;
  std::map<std::string, std::uint64_t> locations;

  std::uint64_t location(const std::string& function) {
    const auto [it, inserted] = locations.try_emplace(function, profile.locations.size() + 1);
    if (inserted) {
      const std::uint64_t id = it->second;
      profile.functions.push_back({id, function, function, ""});
      profile.locations.push_back({id, 0, 0x400000 + 16 * id, id});
    }
    return it->second;
  }
};

// Writes the profiles; returns the span id of the first slow span.
std::string write_profiles(const Settings& settings, const std::string& dir) {
  std::string slow_span;
  std::mt19937_64 rng(27);
  const std::vector<Handler> handlers = make_handlers(settings.names, rng);
  std::int64_t now = 1'790'000'000'000'000'000;
  for (int first = 0; first < settings.spans; first += settings.batch) {
    ProfileMaker maker;
    spanprof::Profile& profile = maker.profile;
    profile.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
    profile.period_type = {"cpu", "nanoseconds"};
    profile.default_sample_type = "cpu";
    profile.period = period_ns;
    profile.comments = {"spanprof bench_report"};
    for (int i = first; i < first + settings.batch && i < settings.spans; ++i) {
      const Handler& handler = handlers[static_cast<std::size_t>(i % settings.names)];
      spanprof::SpanRecord span;
      char trace[33], id[17];
      std::snprintf(trace, sizeof trace, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                    static_cast<unsigned long long>(rng()));
      std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rng() | 1));
      span.span.trace_id = spanprof::TraceId::from_hex(trace);
      span.span.span_id = spanprof::SpanId::from_hex(id);
      span.span_name = handler.name;
      // A span in twenty is slow: twice the samples.
      const int samples = settings.samples * (i % 20 == 7 ? 2 : 1);
      span.reason = i % 20 == 7 ? spanprof::ProfileReason::slow : spanprof::ProfileReason::sampled;
      if (i % 20 == 7 && slow_span.empty()) slow_span = id;
      span.start_unix_ns = now;
      span.duration_ns = samples * period_ns * 3 / 2;
      now += 2'000'000;  // a span every 2 ms
      profile.spans.push_back(span);
      // The span's samples fall on its handler's stacks, skewed towards a few; each
      // distinct stack is one sample with its count, as spanprof merges them.
      std::map<std::size_t, std::int64_t> counts;
      for (int s = 0; s < samples; ++s) {
        const std::size_t a = rng() % handler.stacks.size(), b = rng() % handler.stacks.size();
        ++counts[std::min(a, b)];
      }
      for (const auto& [stack, count] : counts) {
        spanprof::Sample sample;
        sample.span = static_cast<std::uint32_t>(profile.spans.size());
        sample.values = {count, count * period_ns};
        const auto& frames = handler.stacks[stack];
        for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame) sample.location_ids.push_back(maker.location(*frame));
        profile.samples.push_back(std::move(sample));
      }
    }
    profile.time_nanos = profile.spans.front().start_unix_ns;
    profile.duration_nanos = profile.spans.back().start_unix_ns + profile.spans.back().duration_ns - profile.time_nanos;
    std::string bytes;
    if (!spanprof::encode_pprof_gzip(profile, bytes)) std::abort();
    const std::string owner = settings.batch == 1 ? profile.spans.front().span.span_id.to_hex() : std::string("window");
    std::ofstream(dir + "/" + owner + "-" + std::to_string(profile.time_nanos) + "-cpu.pb.gz", std::ios::binary) << bytes;
  }
  return slow_span;
}

double seconds_of(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status == 0) return seconds;
  std::fprintf(stderr, "bench_report: failed (status %d): %s\n", status, command.c_str());
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--spans" && i + 1 < argc) settings.spans = std::atoi(argv[++i]);
    else if (arg == "--samples" && i + 1 < argc) settings.samples = std::atoi(argv[++i]);
    else if (arg == "--batched") settings.batch = 100;
    else if (arg == "--browser") settings.browser = true;
    else if (arg == "--keep") settings.keep = true;
    else {
      std::fprintf(stderr, "usage: spanprof_bench_report [--spans N] [--samples N] [--batched] [--browser] [--keep]\n");
      return 2;
    }
  }
  if (settings.spans < 1 || settings.samples < 1) return 2;
  char pattern[] = "/tmp/spanprof-bench-report-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;
  const std::string profiles = dir + "/profiles", page = dir + "/report.html";
  std::filesystem::create_directory(profiles);

  const std::string slow_span = write_profiles(settings, profiles);
  std::uintmax_t input_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(profiles)) input_bytes += entry.file_size();
  const double report_s = seconds_of(std::string(SPANPROF_REPORT_TOOL) + " " + profiles + " -o " + page + " 2>/dev/null");
  if (report_s < 0) {
    std::filesystem::remove_all(dir);
    return 1;
  }
  const double page_mb = static_cast<double>(std::filesystem::file_size(page)) / 1e6;
  std::printf("spanprof-report: %d spans (%d samples each, %d names, %s): %.2f s, page %.2f MB (input %.1f MB)\n",
              settings.spans, settings.samples, settings.names, settings.batch == 1 ? "one file per span" : "100 per file",
              report_s, page_mb, static_cast<double>(input_bytes) / 1e6);
  if (settings.browser) {
    // Seconds of the page's own work: chromium on the page, less chromium on an
    // empty page. With a span link the page also draws that span's flame graphs
    // and diff, which first sums every span of its name.
    const std::string root = ::geteuid() == 0 ? " --no-sandbox" : "";
    const std::string chromium = "chromium --headless --disable-gpu" + root + " --user-data-dir=" + dir + "/chromium" +
                                 " --dump-dom ";
    const double blank_s = seconds_of(chromium + "about:blank >/dev/null 2>&1");
    const double load_s = seconds_of(chromium + "'file://" + page + "' >/dev/null 2>&1");
    const double span_s = seconds_of(chromium + "'file://" + page + "#span=" + slow_span + "' >/dev/null 2>&1");
    std::printf("chromium --headless: table drawn %.2f s, with a slow span's view %.2f s (beyond an empty page's %.2f s)\n",
                load_s - blank_s, span_s - blank_s, blank_s);
  }
  if (settings.keep) {
    std::printf("kept: %s (profiles/, report.html)\n", dir.c_str());
  } else {
    std::filesystem::remove_all(dir);
  }
  return 0;
}
