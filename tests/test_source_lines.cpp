// Source lines and inlined functions (SPANPROF_WITH_LIBDW=1): a handler built -O2 -g
// whose hot loop is an always_inline function (support/inline_workload.cpp), read
// back by go tool pprof as a user would.
#include "support/catch.hpp"
#include "support/child_process.hpp"
#include "support/collector.hpp"
#include "support/inline_workload.hpp"
#include "support/pprof_reader.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/spanprof.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>
#include <spanprof/detail/symbolization/line_table_source.hpp>
#include <spanprof/detail/symbolization/shared_source_lines.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <dlfcn.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
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
  file << profile->pprof_gzip;
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

// ---- a stripped program ------------------------------------------------------------

namespace stripped_test {

namespace fs = std::filesystem;

std::string run_or_fail(const std::string& command) {
  std::string out;
  INFO(command);
  const bool ok = pprof_test::run_command(command, out);
  INFO(out);
  REQUIRE(ok);
  return out;
}

std::string build_id_of(const std::string& path) {
  spanprof::detail::ElfFileBytes bytes;
  Elf64_Ehdr header{};
  std::string build_id;
  const spanprof::Status opened = spanprof::detail::open_elf_file(path, bytes, header, build_id);
  INFO(path << ": " << opened.message());
  REQUIRE(opened);
  REQUIRE(build_id.size() > 8);
  return build_id;
}

// The one profile the program wrote under `directory`.
std::string profile_in(const std::string& directory) {
  std::vector<std::string> found;
  std::error_code error;
  for (fs::recursive_directory_iterator it(directory, error), end; !error && it != end; it.increment(error))
    if (it->path().extension() == ".gz") found.push_back(it->path().string());
  INFO("profiles under " << directory);
  REQUIRE(found.size() == 1);
  return found.front();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Whether `go tool pprof -traces` output shows the inlined loop directly above its handler.
bool inlined_above_handler(const std::string& traces) {
  const auto rows = lines_of(traces);
  for (std::size_t i = 0; i + 1 < rows.size(); ++i)
    if (rows[i].find("checksum_inlined (inline)") != std::string::npos &&
        rows[i + 1].find("inline_workload::handle_inline_request(double)") != std::string::npos)
      return true;
  return false;
}

}  // namespace stripped_test

TEST_CASE("a stripped program is named from its debug file under a build-id directory, or later by spanprof-report",
          "[symbolizer][lines]") {
  using namespace stripped_test;
  std::string out;
  if (!pprof_test::run_command("go version", out)) FAIL("go is required for this test (apt-get install golang-go): " << out);
  const spanprof_test::TempDir dir("spanprof-stripped");
  const std::string program = SPANPROF_TEST_STRIPPED_PROGRAM;
  const std::string stripped = dir.path() + "/service";
  const std::string build_id = build_id_of(program);
  // As a release is packaged: the debug information apart, keyed by build id, and
  // the program shipped without any symbol.
  const std::string debug_root = dir.path() + "/debug";
  fs::create_directories(debug_root + "/.build-id/" + build_id.substr(0, 2));
  run_or_fail("objcopy --only-keep-debug " + program + " " + spanprof::detail::build_id_debug_path(build_id, debug_root));
  run_or_fail("strip --strip-all -o " + stripped + " " + program);
  REQUIRE(build_id_of(stripped) == build_id);
  REQUIRE(run_or_fail("nm " + stripped + " 2>&1 || true").find("no symbols") != std::string::npos);

  SECTION("its debug file found by build id: the same names, inlined frames and lines") {
    const std::string output = dir.path() + "/with-debug";
    run_or_fail("SPANPROF_OUTPUT_DIR=" + output + " SPANPROF_DEBUG_DIRS=/nonexistent:" + debug_root + " " + stripped);
    const std::string profile = profile_in(output);
    const std::string traces = run_or_fail("go tool pprof -traces -symbolize=none " + profile);
    INFO(traces);
    CHECK(inlined_above_handler(traces));
    const std::string top = run_or_fail("go tool pprof -top -lines -symbolize=none " + profile);
    INFO(top);
    const std::string hot_line = "tests/support/inline_workload.cpp:" + std::to_string(inline_workload::hot_loop_line());
    double on_hot_line = 0;
    for (const auto& row : lines_of(top))
      if (row.find(hot_line) != std::string::npos) on_hot_line += flat_percent(row);
#ifndef SPANPROF_TESTS_UNDER_TSAN  // TSan delivers a signal late, at its next intercepted call
    CHECK(on_hot_line >= 90.0);
#else
    CHECK(on_hot_line > 0.0);
#endif
  }

  SECTION("no debug file anywhere: the profile loads with its addresses and build id, and is named later") {
    const std::string output = dir.path() + "/bare";
    run_or_fail("SPANPROF_OUTPUT_DIR=" + output + " SPANPROF_DEBUG_DIRS=/nonexistent " + stripped);
    const std::string profile = profile_in(output);
    // The program's mapping: its build id, and no functions, which is what a
    // server-side symbolizer (Pyroscope, Parca) looks for.
    const std::string raw = run_or_fail("go tool pprof -raw -symbolize=none " + profile);
    INFO(raw);
    const auto rows = lines_of(raw);
    const auto mapping = std::find_if(rows.begin(), rows.end(), [&](const std::string& row) {
      return row.find(stripped) != std::string::npos;
    });
    REQUIRE(mapping != rows.end());
    CHECK(mapping->find(build_id) != std::string::npos);
    CHECK(mapping->find("[FN]") == std::string::npos);
    CHECK(raw.find("handle_inline_request") == std::string::npos);

#ifdef SPANPROF_REPORT_TOOL
    // spanprof-report names its frames from a directory holding the unstripped
    // program (found by build id), with inlined frames and lines.
    const std::string binaries = dir.path() + "/binaries";
    fs::create_directories(binaries + "/release-1");
    fs::copy_file(program, binaries + "/release-1/service.unstripped");
    const std::string page = dir.path() + "/report.html";
    const std::string report = run_or_fail(std::string(SPANPROF_REPORT_TOOL) + " --debug-dir " + binaries + " -o " + page + " " + profile);
    INFO(report);
    CHECK(report.find("named from 1 file") != std::string::npos);
    const std::string html = read_text(page);
    CHECK(html.find("inline_workload::handle_inline_request(double)") != std::string::npos);
    CHECK(html.find("inline_workload::(anonymous namespace)::checksum_inlined") != std::string::npos);
    CHECK(html.find("inline_workload.cpp:" + std::to_string(inline_workload::hot_loop_line())) != std::string::npos);
    // The same from its debug file under a build-id directory.
    run_or_fail(std::string(SPANPROF_REPORT_TOOL) + " --debug-dir " + debug_root + " -o " + page + " " + profile);
    CHECK(read_text(page).find("inline_workload::handle_inline_request(double)") != std::string::npos);
    // Without --debug-dir the frames stay addresses.
    run_or_fail(std::string(SPANPROF_REPORT_TOOL) + " -o " + page + " " + profile);
    CHECK(read_text(page).find("handle_inline_request") == std::string::npos);
#endif
  }
}

namespace {

// The line tables' reader against libdw's own lookup (the unit that holds the
// address by its ranges, then the last row at or before it in the unit's table)
// at every `step`th address of [start, limit) in the object's own addresses.
struct LinesCompared {
  int both = 0, same = 0, only_libdw = 0;
  std::string first_difference;
  std::string describe() const {
    return std::to_string(both) + " addresses with lines both ways, " + std::to_string(same) + " the same, " +
           std::to_string(only_libdw) + " only from libdw; first difference: " + first_difference;
  }
};

LinesCompared compare_with_libdw(spanprof::detail::LineTableSource& tables, const std::string& dwarf_file,
                                 std::uint64_t start, std::uint64_t limit, std::uint64_t step) {
  LinesCompared out;
  const int fd = ::open(dwarf_file.c_str(), O_RDONLY | O_CLOEXEC);
  Dwarf* dwarf = fd >= 0 ? ::dwarf_begin(fd, DWARF_C_READ) : nullptr;
  if (dwarf == nullptr) {
    out.first_difference = "libdw cannot open " + dwarf_file;
    if (fd >= 0) ::close(fd);
    return out;
  }
  std::vector<spanprof::detail::DwarfFrame> chain;
  for (std::uint64_t at = start; at < limit; at += step) {
    Dwarf_Die unit;
    Dwarf_Line* row = ::dwarf_addrdie(dwarf, at, &unit) != nullptr ? ::dwarf_getsrc_die(&unit, at) : nullptr;
    const char* file = row != nullptr ? ::dwarf_linesrc(row, nullptr, nullptr) : nullptr;
    int line = 0;
    const bool by_libdw = file != nullptr && ::dwarf_lineno(row, &line) == 0;
    const bool by_tables = tables.lookup(at, chain);
    if (by_libdw && !by_tables) ++out.only_libdw;
    if (!by_libdw || !by_tables) continue;
    ++out.both;
    if (chain[0].file != nullptr && std::string_view(chain[0].file) == file && chain[0].line == line) ++out.same;
    else if (out.first_difference.empty())
      out.first_difference = std::string(chain[0].file != nullptr ? chain[0].file : "?") + ":" +
                             std::to_string(chain[0].line) + " against " + file + ":" + std::to_string(line);
  }
  ::dwarf_end(dwarf);
  ::close(fd);
  return out;
}

}  // namespace

// A system library's frames have their lines from its line tables alone: libc's
// separate debug file (libc6-dbg) is compressed, and reading all of its DWARF
// inflates all of it (docs/source-lines.md).
TEST_CASE("a libc frame has its file and line from libc's separate debug file, read from its line tables alone",
          "[symbolizer][lines]") {
  void* libc = ::dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  REQUIRE(libc != nullptr);
  void* clock_read = ::dlsym(libc, "clock_gettime");
  Dl_info loaded{};
  REQUIRE(::dladdr(clock_read, &loaded) != 0);
  ::dlclose(libc);
  spanprof::ElfSymbolizerOptions with_line_tables;
  with_line_tables.system_library_lines = spanprof::SystemLibraryLines::line_tables;
  spanprof::detail::ElfSymbolizer symbolizer(with_line_tables);
  const auto address = reinterpret_cast<std::uintptr_t>(clock_read) + 4;
  const spanprof::ResolvedFrame frame = symbolizer.resolve(address);
  REQUIRE(frame.module != nullptr);
  // By default, a system library's frames have their names only.
  spanprof::detail::ElfSymbolizer by_default;
  const spanprof::ResolvedFrame named = by_default.resolve(address);
  CHECK(named.function.find("clock_gettime") != std::string_view::npos);
  CHECK(named.file.empty());
  CHECK(named.line == 0);
  const std::string path = frame.module->path, build_id = frame.module->build_id;
  if (build_id.size() < 3 ||
      ::access(spanprof::detail::build_id_debug_path(build_id, "/usr/lib/debug").c_str(), R_OK) != 0) {
    WARN("no separate debug file for libc (Debian: libc6-dbg): its frames have names only; skipped");
    return;
  }
  INFO(frame.function << " at " << frame.file << ":" << frame.line);
  CHECK(frame.function.find("clock_gettime") != std::string_view::npos);
  const std::string_view file = frame.file;
  CHECK(file.size() > 16);
  CHECK(file.substr(file.size() - std::min<std::size_t>(file.size(), 16)) == "/clock_gettime.c");
  CHECK(frame.line > 0);
  CHECK(frame.inlined_count == 0);

  // The same file and line as libdw's own lookup in all of the debug file, at
  // every 61st byte of libc's code.
  const auto bias = reinterpret_cast<std::uintptr_t>(loaded.dli_fbase);
  auto tables = spanprof::detail::LineTableSource::open_for(path, build_id, {"/usr/lib/debug"});
  REQUIRE(tables != nullptr);
  const LinesCompared compared = compare_with_libdw(*tables, spanprof::detail::build_id_debug_path(build_id, "/usr/lib/debug"),
                                                    frame.module->start - bias, frame.module->limit - bias, 61);
  INFO(compared.describe());
  CHECK(compared.both > 1000);
  CHECK(compared.same == compared.both);
  CHECK(compared.only_libdw == 0);
}

// The program's own lines come from the same reader (libdw gives its inlined
// frames): the same as libdw's own lookup around the inlined hot loop.
TEST_CASE("the program's lines are the ones libdw's own lookup gives", "[symbolizer][lines]") {
  const auto handler = reinterpret_cast<std::uintptr_t>(&inline_workload::handle_inline_request);
  Dl_info loaded{};
  REQUIRE(::dladdr(reinterpret_cast<void*>(handler), &loaded) != 0);
  const auto bias = reinterpret_cast<std::uintptr_t>(loaded.dli_fbase);
  auto tables = spanprof::detail::LineTableSource::open_for("/proc/self/exe", "", {});
  REQUIRE(tables != nullptr);
  const std::uintptr_t own = handler - bias;
  const LinesCompared compared = compare_with_libdw(*tables, "/proc/self/exe", own - 0x8000, own + 0x8000, 3);
  INFO(compared.describe());
  CHECK(compared.both > 1000);
  CHECK(compared.same >= compared.both - compared.both / 1000);
  CHECK(compared.only_libdw == 0);
}

// The bound on what the sources of lines keep (ElfSymbolizerOptions::
// source_lines_max_bytes). Each runs in a process of its own: the sources are the
// process's, and an object that lost its lines never gets them back.
namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

// The source lines the process cache keeps for an object the symbolizer read.
std::shared_ptr<spanprof::detail::SourceLines> kept_source_lines(const std::string& path, const spanprof::Module& module) {
  return spanprof::detail::SourceLinesCache::process().open(path, module.build_id, {"/usr/lib/debug"},
                                                            spanprof::detail::SourceLinesDepth::inlined_functions,
                                                            std::uint64_t{1} << 40);
}

#ifdef SPANPROF_TEST_PLUGIN_PATH
const spanprof_test::ChildScenario coldest_lines_dropped("coldest-source-lines-dropped", [] {
  std::vector<std::string> errors;
  spanprof::set_error_handler([&](const spanprof::Error& e) { errors.emplace_back(e.message); });
  void* plugin = ::dlopen(SPANPROF_TEST_PLUGIN_PATH, RTLD_NOW);
  if (plugin == nullptr) return 10;
  const auto plugin_address = reinterpret_cast<std::uintptr_t>(::dlsym(plugin, "spanprof_plugin_work")) + 4;
  const auto program_address = reinterpret_cast<std::uintptr_t>(&inline_workload::handle_inline_request) + 4;

  // Both objects' lines, with room to spare: the plugin's read first, then the program's.
  spanprof::ElfSymbolizerOptions roomy;
  roomy.source_lines_max_bytes = std::uint64_t{1} << 40;
  spanprof::detail::ElfSymbolizer first(roomy);
  const spanprof::ResolvedFrame plugin_frame = first.resolve(plugin_address);
  const spanprof::ResolvedFrame program_frame = first.resolve(program_address);
  if (plugin_frame.file.empty() || program_frame.file.empty() || plugin_frame.module == nullptr) return 11;
  const std::string plugin_file(plugin_frame.file);
  // What a source keeps grows with the addresses asked of it: these are asked again below.
  const std::uintptr_t program_start = program_frame.module->start;
  for (std::uintptr_t i = 0; i < 5000; ++i) (void)first.resolve(program_start + 16 * i);
  std::uint64_t plugin_bytes = 0, program_bytes = 0;
  std::weak_ptr<spanprof::detail::SourceLines> plugin_lines;
  {
    const auto plugin_source = kept_source_lines(SPANPROF_TEST_PLUGIN_PATH, *plugin_frame.module);
    const auto program_source = kept_source_lines("/proc/self/exe", *program_frame.module);
    if (!plugin_source || !program_source) return 12;
    plugin_bytes = plugin_source->memory_bytes();
    program_bytes = program_source->memory_bytes();
    plugin_lines = plugin_source;
  }
  std::printf("kept: plugin %llu bytes, program %llu bytes\n", static_cast<unsigned long long>(plugin_bytes),
              static_cast<unsigned long long>(program_bytes));

  // A bound the program's lines fit in, not both: a symbolizer that asks the
  // program for the same addresses finds the total over it, and the plugin, looked
  // up least recently, loses its lines.
  spanprof::ElfSymbolizerOptions tight;
  tight.source_lines_max_bytes = program_bytes + plugin_bytes / 2;
  spanprof::detail::ElfSymbolizer second(tight);
  for (std::uintptr_t i = 0; i < 5000; ++i) (void)second.resolve(program_start + 16 * i);
  const spanprof::ResolvedFrame program_later = second.resolve(program_address);
  const spanprof::ResolvedFrame plugin_later = second.resolve(plugin_address + 1);
  spanprof::detail::ElfSymbolizer third(tight);
  const spanprof::ResolvedFrame plugin_after = third.resolve(plugin_address + 2);
  // What the first symbolizer handed out before the drop is still readable.
  const spanprof::ResolvedFrame plugin_before = first.resolve(plugin_address);

  std::printf("dropped=%llu plugin_freed=%d\n", static_cast<unsigned long long>(spanprof::stats().source_lines_dropped),
              plugin_lines.expired() ? 1 : 0);
  std::printf("program_later=%s:%lld\n", std::string(program_later.file).c_str(),
              static_cast<long long>(program_later.line));
  std::printf("plugin_later=%s at '%s'\n", std::string(plugin_later.function).c_str(),
              std::string(plugin_later.file).c_str());
  std::printf("plugin_after=%s at '%s'\n", std::string(plugin_after.function).c_str(),
              std::string(plugin_after.file).c_str());
  std::printf("plugin_before_same=%d\n", std::string(plugin_before.file) == plugin_file ? 1 : 0);
  std::printf("errors:\n%s", joined(errors).c_str());
  ::dlclose(plugin);
  return 0;
});
#endif

const spanprof_test::ChildScenario lines_larger_than_bound("source-lines-larger-than-bound", [] {
  std::vector<std::string> errors;
  spanprof::set_error_handler([&](const spanprof::Error& e) { errors.emplace_back(e.message); });
  spanprof::ElfSymbolizerOptions tiny;
  tiny.source_lines_max_bytes = 1;
  spanprof::detail::ElfSymbolizer symbolizer(tiny);
  const auto address = reinterpret_cast<std::uintptr_t>(&inline_workload::handle_inline_request) + 4;
  const spanprof::ResolvedFrame frame = symbolizer.resolve(address);
  std::printf("dropped=%llu\n", static_cast<unsigned long long>(spanprof::stats().source_lines_dropped));
  std::printf("frame=%s at '%s'\n", std::string(frame.function).c_str(), std::string(frame.file).c_str());
  std::printf("errors:\n%s", joined(errors).c_str());
  return 0;
});

}  // namespace

#ifdef SPANPROF_TEST_PLUGIN_PATH
TEST_CASE("past the source lines' bound, the object looked up least recently loses its lines and keeps its names",
          "[symbolizer][lines]") {
  const auto result = spanprof_test::run_in_child("coldest-source-lines-dropped", 120);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  const std::string& out = result.output;
  CHECK(out.find("dropped=1 plugin_freed=1\n") != std::string::npos);
  CHECK(out.find("program_later=") != std::string::npos);
  CHECK(out.find("program_later=:") == std::string::npos);  // the program kept its lines
  CHECK(out.find("plugin_later=spanprof_plugin_work at ''\n") != std::string::npos);
  CHECK(out.find("plugin_after=spanprof_plugin_work at ''\n") != std::string::npos);  // for good
  CHECK(out.find("plugin_before_same=1\n") != std::string::npos);
  const auto errors = out.substr(out.find("errors:\n"));
  CHECK(errors.find("source lines of '" SPANPROF_TEST_PLUGIN_PATH "' dropped") != std::string::npos);
  CHECK(errors.find("source_lines_max_bytes") != std::string::npos);
  CHECK(errors.find("/proc/self/exe") == std::string::npos);
}
#endif

TEST_CASE("an object whose lines alone are over the bound keeps its names", "[symbolizer][lines]") {
  const auto result = spanprof_test::run_in_child("source-lines-larger-than-bound", 120);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("dropped=1\n") != std::string::npos);
  CHECK(result.output.find("frame=inline_workload::handle_inline_request") != std::string::npos);
  CHECK(result.output.find(" at ''\n") != std::string::npos);
  CHECK(result.output.find("source lines of '/proc/self/exe' dropped") != std::string::npos);
}

#endif  // SPANPROF_WITH_LIBDW
