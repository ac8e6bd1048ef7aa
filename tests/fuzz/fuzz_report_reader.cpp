// spanprof-report's reader (tools/report/profile_reader.hpp) on arbitrary bytes:
// what a directory of profiles may hold after a crash, a copy, or another program.
// The input is one file.
//
// Invariants: a refused file says why and adds no span; an accepted one adds or
// extends at least one span, every span has ids, and its stacks are nodes of the
// frame tree (every node's caller comes before it); the page's JSON of the result
// never holds a "</" that would end its <script> element.
#include "fuzz_support.hpp"

#include "profile_reader.hpp"
#include "report_data.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

std::int64_t total_samples(const spanprof_report::Collection& collection) {
  std::int64_t total = 0;
  for (const auto& span : collection.spans)
    for (const std::int64_t samples : span.samples) total += samples;
  return total;
}

void fuzz_one(std::string_view bytes) {
  spanprof_report::Collection collection;
  spanprof_report::ReadOptions options;
  options.max_decompressed_bytes = std::size_t{1} << 20;
  std::string why;
  // Read twice: the second time the spans exist, as for a span's CPU and wall files.
  for (int round = 0; round < 2; ++round) {
    const std::size_t spans_before = collection.spans.size();
    const std::int64_t samples_before = total_samples(collection);
    if (!spanprof_report::read_profile_file(bytes, collection, why, options)) {
      SPANPROF_FUZZ_CHECK(!why.empty());
      SPANPROF_FUZZ_CHECK(collection.spans.size() == spans_before);
      SPANPROF_FUZZ_CHECK(total_samples(collection) == samples_before);
      return;
    }
    SPANPROF_FUZZ_CHECK(!collection.spans.empty());
    SPANPROF_FUZZ_CHECK(round == 0 || collection.spans.size() == spans_before);
  }
  for (std::size_t i = 1; i < collection.nodes.size(); ++i) {
    SPANPROF_FUZZ_CHECK(collection.nodes[i].first < i);
    SPANPROF_FUZZ_CHECK(collection.nodes[i].second < collection.functions.size());
  }
  for (const auto& span : collection.spans) {
    SPANPROF_FUZZ_CHECK(!span.span_id.empty());
    for (const auto& values : span.values)
      for (const auto& entry : values) SPANPROF_FUZZ_CHECK(entry.first > 0 && entry.first < collection.nodes.size());
  }
  SPANPROF_FUZZ_CHECK(spanprof_report::report_json(collection).find("</") == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
