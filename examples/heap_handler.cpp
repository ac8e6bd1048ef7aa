// Heap profiles per span: two handlers allocate in different places, concurrently,
// and one of them keeps part of what it allocated in a cache. For every span it
// prints what the span allocated (alloc_space) and what was still in use when the
// span ended (inuse_space), by the function of ours that allocated, and the pprof
// file to open with
// `go tool pprof -sample_index=alloc_space -top FILE`.
//
// This file includes <spanprof/allocation_hooks.hpp>, the recommended heap hooks
// (spanprof's own operator new/delete; exactly one source file of a program may
// include it). Without it, heap scopes use tcmalloc's MallocHook, which needs
// tcmalloc as the allocator and costs more (docs/heap.md).
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/allocation_hooks.hpp>
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::mutex cache_mutex;
std::vector<std::string> report_cache;  // grows for the life of the process

// GET /report: formats many rows (temporary), then caches a summary (kept).
__attribute__((noinline)) std::vector<std::string> format_rows(int rows) {
  std::vector<std::string> out;
  for (int i = 0; i < rows; ++i) out.push_back(std::string(512, static_cast<char>('a' + i % 26)));
  return out;
}

__attribute__((noinline)) void cache_summary(const std::vector<std::string>& rows) {
  std::string summary;
  for (std::size_t i = 0; i < rows.size(); i += 2) summary += rows[i];
  std::lock_guard<std::mutex> lock(cache_mutex);
  report_cache.push_back(std::move(summary));
}

void handle_report(const spanprof::SpanContext& span) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /report"}, spanprof::heap);
  for (int page = 0; page < 8; ++page) cache_summary(format_rows(4096));
}

// POST /upload: decodes the body in large chunks, all freed before it returns.
__attribute__((noinline)) std::size_t decode_chunk(std::mt19937& rng) {
  std::unique_ptr<unsigned char[]> chunk(new unsigned char[1 << 20]);
  for (std::size_t i = 0; i < (1 << 20); i += 4096) chunk[i] = static_cast<unsigned char>(rng());
  return chunk[4096];
}

void handle_upload(const spanprof::SpanContext& span, std::mt19937& rng) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /upload"}, spanprof::heap);
  std::size_t checksum = 0;
  for (int i = 0; i < 48; ++i) checksum += decode_chunk(rng);
  if (checksum == 42) std::puts("");
}


bool is_library_function(const std::string& name) {
  return name.rfind("std::", 0) == 0 || name.rfind("void std::", 0) == 0 || name.rfind("__gnu_cxx::", 0) == 0;
}

// Bytes by the innermost function of this program's own code (the standard library's
// frames, e.g. std::string's constructor, are skipped), largest first.
std::vector<std::pair<std::string, std::int64_t>> bytes_by_function(const spanprof::Profile& profile,
                                                                    std::size_t value_index) {
  std::map<std::string, std::int64_t> bytes;
  for (const auto& sample : profile.samples) {
    if (sample.values[value_index] == 0) continue;
    std::string name = "(unknown)";
    for (std::uint64_t id : sample.location_ids) {
      const auto& location = profile.locations[id - 1];
      if (location.function_id == 0) continue;
      name = profile.functions[location.function_id - 1].name;
      if (!is_library_function(name)) break;
    }
    bytes[name] += sample.values[value_index];
  }
  std::vector<std::pair<std::string, std::int64_t>> ranked(bytes.begin(), bytes.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (ranked.size() > 3) ranked.resize(3);
  return ranked;
}

}  // namespace

int main() {
  std::mutex print_mutex;
  std::vector<std::string> report;
  spanprof::Options options;
  auto files = example::file_uploader(options);  // $SPANPROF_OUTPUT_DIR or ./profiles
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>(
      [&](const spanprof::EncodedProfile& p, std::string_view, const spanprof::UploadContext& context) {
        std::string text = "span " + p.record.span.span_id.to_hex() + "  " + p.record.span_name + "\n";
        const char* titles[] = {nullptr, "allocated", nullptr, "in use at span end"};
        for (std::size_t index : {std::size_t{1}, std::size_t{3}}) {
          for (const auto& [function, bytes] : bytes_by_function(*context.profile, index)) {
            char line[160];
            std::snprintf(line, sizeof line, "    %-20s %7.1f MiB  %.60s\n", titles[index], bytes / 1048576.0,
                          function.c_str());
            text += line;
          }
        }
        text += "    file: " + files->directory() + "/" + spanprof::FileUploader::file_name_for(p) + "\n";
        std::lock_guard<std::mutex> lock(print_mutex);
        report.push_back(std::move(text));
        return spanprof::UploadResult::ok();
      },
      "summary"));
  spanprof::start(options);

  std::thread reports([] {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 2; ++i) handle_report(example::random_span(rng));
  });
  std::thread uploads([] {
    std::mt19937_64 rng(11);
    std::mt19937 data(3);
    for (int i = 0; i < 2; ++i) handle_upload(example::random_span(rng), data);
  });
  reports.join();
  uploads.join();
  spanprof::flush();

  std::sort(report.begin(), report.end());
  for (const auto& text : report) std::fputs(text.c_str(), stdout);
  const auto stats = spanprof::stats();
  std::printf("\n%zu heap profiles, %llu allocations sampled, hooks installed now: %s\n", report.size(),
              static_cast<unsigned long long>(stats.heap_samples_captured), stats.heap_hooks_installed ? "yes" : "no");
  spanprof::shutdown();
  return report.empty() ? 1 : 0;
}
