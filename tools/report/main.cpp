// spanprof-report PATH... [-o report.html] [--debug-dir DIR]...: one offline HTML
// page from the profiles spanprof wrote (docs/report.md).
//
// PATH is a pprof file (.pb.gz or plain), a spool file, or a directory, read with
// its subdirectories (hidden entries, such as a writer's temporary files and the
// spool's lock, are passed over). A file that cannot be read is skipped with one
// line on stderr. Frames a stripped program's profile left unnamed are named from
// the debug files or unstripped binaries under each --debug-dir (debug_files.hpp).
//
// Exit status: 0 the page was written (at least one span was read); 1 no span was
// read from any PATH (no page is written); 2 a usage error, or the page could not
// be written.
#include "debug_files.hpp"
#include "profile_reader.hpp"
#include "report_data.hpp"
#include "report_page.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr const char* usage =
    "usage: spanprof-report PATH... [-o report.html] [--debug-dir DIR]...\n"
    "  PATH: pprof files (gzip'd or not), spool files, or directories of them\n"
    "  -o FILE: where the page goes (default: report.html)\n"
    "  --debug-dir DIR: names unnamed frames (stripped programs) from the files under DIR\n"
    "                   with their build id: DIR/.build-id/ab/cdef....debug, or unstripped binaries\n"
    "exit status: 0 page written, 1 no span found, 2 usage or output error\n";

// Larger than any profile spanprof writes by far; a bigger file is not one.
constexpr std::uintmax_t max_file_bytes = std::uintmax_t{1} << 30;

struct Tally {
  std::size_t read = 0, skipped = 0;
  spanprof_report::ReadOptions options;
};

void skip(const std::string& path, const std::string& why, Tally& tally) {
  std::fprintf(stderr, "spanprof-report: skipped %s: %s\n", path.c_str(), why.c_str());
  ++tally.skipped;
}

void read_file(const fs::path& path, spanprof_report::Collection& collection, Tally& tally) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) return skip(path.string(), error.message(), tally);
  if (size > max_file_bytes) return skip(path.string(), "larger than 1 GiB: not a spanprof profile", tally);
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return skip(path.string(), std::strerror(errno), tally);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return skip(path.string(), std::strerror(errno), tally);
  std::string why;
  if (!spanprof_report::read_profile_file(bytes, collection, why, tally.options)) return skip(path.string(), why, tally);
  ++tally.read;
}

// A PATH given is followed if it is a link; a link met inside a directory is
// followed only to a file: a link to a directory could lead back up the tree.
void read_path(const fs::path& path, bool given, spanprof_report::Collection& collection, Tally& tally) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error) return skip(path.string(), error.message(), tally);
  if (!fs::is_directory(status)) return read_file(path, collection, tally);
  if (!given && fs::is_symlink(fs::symlink_status(path, error)))
    return skip(path.string(), "a link to a directory, not followed", tally);
  // Sorted, so the same directory always gives the same page.
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    if (it->path().filename().string().rfind('.', 0) != 0) entries.push_back(it->path());
  }
  if (error) return skip(path.string(), error.message(), tally);
  std::sort(entries.begin(), entries.end());
  for (const fs::path& entry : entries) read_path(entry, false, collection, tally);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs, debug_directories;
  std::string output = "report.html";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (arg == "-o" || arg == "--output" || arg == "--debug-dir") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "spanprof-report: %s needs a %s\n%s", arg.c_str(), arg == "--debug-dir" ? "directory" : "file name", usage);
        return 2;
      }
      (arg == "--debug-dir" ? debug_directories.emplace_back() : output) = argv[++i];
    } else if (arg.size() > 1 && arg[0] == '-') {
      std::fprintf(stderr, "spanprof-report: unknown option %s\n%s", arg.c_str(), usage);
      return 2;
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }

  spanprof_report::Collection collection;
  Tally tally;
  spanprof_report::DebugFiles debug_files(debug_directories);
  if (!debug_directories.empty()) {
    tally.options.name_unnamed = [&debug_files](const spanprof_report::UnnamedAddress& where,
                                                std::vector<spanprof_report::NamedFrame>& frames) {
      return debug_files.name(where, frames);
    };
  }
  for (const std::string& input : inputs) read_path(input, true, collection, tally);
  if (!debug_directories.empty())
    std::fprintf(stderr, "spanprof-report: unnamed frames named from %zu file(s) found by build id\n", debug_files.files_used());
  if (collection.spans.empty()) {
    std::fprintf(stderr, "spanprof-report: no span found in %zu file(s) read and %zu skipped: no page written\n",
                 tally.read, tally.skipped);
    return 1;
  }

  const std::string page = spanprof_report::report_page(spanprof_report::report_json(collection));
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  out.write(page.data(), static_cast<std::streamsize>(page.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "spanprof-report: cannot write %s: %s\n", output.c_str(), std::strerror(errno));
    return 2;
  }
  std::fprintf(stderr, "spanprof-report: %zu spans from %zu files (%zu skipped) -> %s (%.1f KiB)\n",
               collection.spans.size(), tally.read, tally.skipped, output.c_str(), static_cast<double>(page.size()) / 1024);
  return 0;
}
