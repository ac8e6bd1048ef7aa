// Source lines and inlined functions (SPANPROF_WITH_LIBDW=1): a handler built -O2 -g
// whose hot loop is an always_inline function (support/inline_workload.cpp), read
// back by go tool pprof as a user would.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/inline_workload.hpp"
#include "support/pprof_reader.hpp"

#include <spanprof/spanprof.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

using spanprof_test::Collector;
using spanprof_test::span_number;

#if SPANPROF_WITH_LIBDW

namespace {

spanprof::Options options_at(int hz) {
  spanprof::Options options;
  options.frequency_hz = hz;
  return options;
}

std::string profile_file(Collector& collector, const spanprof::SpanContext& span) {
  const auto* profile = collector.profile_for(span.span_id);
  if (profile == nullptr) return {};
  const std::string path = "/tmp/spanprof-lines-" + std::to_string(::getpid()) + ".pb.gz";
  std::ofstream file(path, std::ios::binary);
  file << profile->meta.pprof_gzip;
  return path;
}

}  // namespace

// The lines of a command's output.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whether a `go tool pprof -list` row has samples: its cum column is not ".".
bool row_sampled(const std::string& row) {
  std::istringstream in(row);
  std::string flat, cum;
  in >> flat >> cum;
  return !cum.empty() && cum != ".";
}

// The percentage in a `go tool pprof -top` row's flat% column.
double flat_percent(const std::string& row) {
  std::istringstream in(row);
  std::string flat, percent;
  in >> flat >> percent;
  return std::atof(percent.c_str());
}

TEST_CASE("an inlined hot loop: go tool pprof shows it as its own frame above its handler, on its file and line",
          "[symbolizer][lines]") {
  std::string out;
  if (!pprof_test::run_command("go version", out)) FAIL("go is required for this test (apt-get install golang-go): " << out);
  Collector collector(options_at(250));
  const auto span = span_number(7001);
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /inline"});
    inline_workload::handle_inline_request(0.3);
  }
  const std::string path = profile_file(collector, span);
  REQUIRE(!path.empty());

  // Each trace lists its frames innermost first: the inlined function, then the
  // handler it was inlined into.
  REQUIRE(pprof_test::run_command("go tool pprof -traces -symbolize=none " + path, out));
  INFO(out);
  const auto traces = lines_of(out);
  int inlined_above_handler = 0;
  for (std::size_t i = 0; i + 1 < traces.size(); ++i)
    if (traces[i].find("checksum_inlined (inline)") != std::string::npos &&
        traces[i + 1].find("inline_workload::handle_inline_request(double)") != std::string::npos)
      ++inlined_above_handler;
  CHECK(inlined_above_handler > 0);

  // The hot loop's line holds the samples.
  REQUIRE(pprof_test::run_command("go tool pprof -top -lines -symbolize=none " + path, out));
  INFO(out);
  const std::string hot_line = "tests/support/inline_workload.cpp:" + std::to_string(inline_workload::hot_loop_line());
  double on_hot_line = 0;
  for (const auto& row : lines_of(out))
    if (row.find(hot_line) != std::string::npos) on_hot_line += flat_percent(row);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call (clock_gettime)
  CHECK(on_hot_line >= 90.0);
#else
  CHECK(on_hot_line > 0.0);
#endif

  // The handler's source, with the inlined call's line holding the samples, and
  // the inlined function's own, with its loop's line.
  // pprof looks for sources under -source_path (default: the current directory,
  // the build's here, and a test may run from anywhere).
  const std::string list = "go tool pprof -symbolize=none -source_path=" SPANPROF_TEST_SOURCE_DIR "/tests/support -list=";
  REQUIRE(pprof_test::run_command(list + "handle_inline_request " + path, out));
  INFO(out);
  bool call_line_sampled = false;
  for (const auto& row : lines_of(out))
    if (row.find("x = checksum_inlined(x);") != std::string::npos) call_line_sampled = row_sampled(row);
  CHECK(call_line_sampled);
  REQUIRE(pprof_test::run_command(list + "checksum_inlined " + path, out));
  INFO(out);
  bool loop_line_sampled = false;
  for (const auto& row : lines_of(out))
    if (row.find("for (int i = 0; i < 400000; ++i)") != std::string::npos) loop_line_sampled = row_sampled(row);
  CHECK(loop_line_sampled);

  // The program's mapping says it has functions, file names, lines and inlined frames.
  REQUIRE(pprof_test::run_command("go tool pprof -raw -symbolize=none " + path, out));
  INFO(out);
  const auto raw = lines_of(out);
  const auto mappings = std::find(raw.begin(), raw.end(), "Mappings");
  REQUIRE(mappings != raw.end());
  REQUIRE(mappings + 1 != raw.end());
  CHECK((mappings + 1)->find("spanprof_tests") != std::string::npos);
  CHECK((mappings + 1)->find("[FN][FL][LN][IN]") != std::string::npos);
  if (std::getenv("SPANPROF_TEST_KEEP_FILES") == nullptr) ::unlink(path.c_str());
}

TEST_CASE("the symbolizer gives an address's inlined frames, innermost first, with their files and lines",
          "[symbolizer][lines]") {
  auto symbolizer = spanprof::make_elf_symbolizer();
  REQUIRE(symbolizer);
  const auto ends_with = [](std::string_view text, std::string_view end) {
    return text.size() >= end.size() && text.substr(text.size() - end.size()) == end;
  };
  // An address of the handler's hot loop: the first one whose innermost frame is it.
  const auto start = reinterpret_cast<std::uintptr_t>(&inline_workload::handle_inline_request);
  bool found = false;
  for (std::uintptr_t address = start; address < start + 1024 && !found; ++address) {
    const spanprof::ResolvedFrame frame = symbolizer->resolve(address);
    if (frame.function.find("handle_inline_request") == std::string_view::npos) break;  // past its end
    if (frame.inlined_count == 0 || frame.inlined[0].function.find("checksum_inlined") == std::string_view::npos)
      continue;
    found = true;
    INFO("address " << std::hex << address - start << " past the handler's start");
    CHECK(frame.inlined[0].function == "inline_workload::(anonymous namespace)::checksum_inlined");
    CHECK(frame.inlined[0].line == inline_workload::hot_loop_line());
    CHECK(frame.inlined[0].start_line == inline_workload::hot_loop_line() - 1);
    CHECK(ends_with(frame.inlined[0].file, "tests/support/inline_workload.cpp"));
    // The handler: its call of the inlined function, inside its own lines.
    CHECK(ends_with(frame.file, "tests/support/inline_workload.cpp"));
    CHECK(frame.start_line > inline_workload::hot_loop_line());
    CHECK(frame.line > frame.start_line);
    CHECK(frame.function == "inline_workload::handle_inline_request(double)");
  }
  CHECK(found);
}

#endif  // SPANPROF_WITH_LIBDW
