// The source lines of the process's objects, shared by its symbolizers and kept
// within a bound: each spanprof::start() makes its own symbolizer, and a restart
// would otherwise read a large program's DWARF again and hold it twice while the
// old runtime drains. Past the bound, the objects looked up least recently lose
// their lines for good, and their frames keep their names (Stats::source_lines_dropped).
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_SHARED_SOURCE_LINES_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_SHARED_SOURCE_LINES_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/counters.hpp>
#include <spanprof/detail/symbolization/dwarf_source.hpp>
#include <spanprof/detail/symbolization/line_table_source.hpp>
#include <spanprof/detail/symbolization/source_lines.hpp>

#if SPANPROF_WITH_LIBDW

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What is read of an object's DWARF: all of it (lines and inlined functions,
// DwarfSource), or its line tables alone (LineTableSource).
enum class SourceLinesDepth { inlined_functions, line_tables };

class SourceLinesCache {
 public:
  // Never destroyed: a sender that outlived a stop past its deadline may still ask
  // while the process runs its exit-time destructors.
  static SourceLinesCache& process() noexcept {
    static SourceLinesCache& cache = *new SourceLinesCache;
    return cache;
  }

  // The source lines of the object at `path`, read to `depth`. Null when the object
  // has none (asked again by the next symbolizer), or when its lines were dropped.
  // The cache owns them: a holder keeps a weak pointer, and locks it per lookup.
  // `max_bytes` bounds what all the sources keep together (the last start()'s
  // bound holds); opening one past it drops the coldest, this one too when it
  // alone is larger.
  std::shared_ptr<SourceLines> open(const std::string& path, const std::string& build_id,
                                    const std::vector<std::string>& debug_directories, SourceLinesDepth depth,
                                    std::uint64_t max_bytes) {
    std::string key = (depth == SourceLinesDepth::line_tables ? "lines\n" : "all\n") + path + '\n' + build_id;
    for (const std::string& directory : debug_directories) key += '\n' + directory;
    std::lock_guard<std::mutex> held(mutex_);
    max_bytes_ = max_bytes;
    if (dropped_.count(key) != 0) return nullptr;
    if (const auto found = opened_.find(key); found != opened_.end()) return found->second.lines;
    std::shared_ptr<SourceLines> lines;
    if (depth == SourceLinesDepth::line_tables) lines = LineTableSource::open_for(path, build_id, debug_directories);
    else lines = DwarfSource::open_for(path, build_id, debug_directories);
    if (!lines) return nullptr;
    lines->note_lookup();  // about to be: the warmest
    opened_.emplace(key, Entry{lines, path});
    keep_within_bound();
    return dropped_.count(key) != 0 ? nullptr : lines;
  }

  // What a source keeps grows with the addresses asked of it: a symbolizer calls
  // this every so many lookups.
  void check_bound() {
    std::lock_guard<std::mutex> held(mutex_);
    keep_within_bound();
  }

 private:
  struct Entry {
    std::shared_ptr<SourceLines> lines;
    std::string path;
  };

  void keep_within_bound() {
    struct Held {
      std::uint64_t last_lookup;
      std::uint64_t bytes;
      const std::string* key;
    };
    std::vector<Held> held;
    std::uint64_t total = 0;
    for (const auto& [key, entry] : opened_) {
      held.push_back({entry.lines->last_lookup(), entry.lines->memory_bytes(), &key});
      total += held.back().bytes;
    }
    if (total <= max_bytes_) return;
    std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.last_lookup < b.last_lookup; });
    for (const Held& coldest : held) {
      if (total <= max_bytes_) break;
      const auto entry = opened_.find(*coldest.key);
      char message[160];
      std::snprintf(message, sizeof message,
                    "' dropped: the objects' source lines kept %llu KiB, over source_lines_max_bytes (%llu KiB); "
                    "its frames keep their names",
                    static_cast<unsigned long long>(total >> 10), static_cast<unsigned long long>(max_bytes_ >> 10));
      report_error(ErrorCode::symbolization_failed, "the source lines of '" + entry->second.path + message);
      count(Counter::source_lines_dropped);
      total -= coldest.bytes;
      dropped_.insert(*coldest.key);
      opened_.erase(entry);  // freed once no lookup holds it
    }
  }

  std::mutex mutex_;
  std::uint64_t max_bytes_ = 0;
  std::unordered_map<std::string, Entry> opened_;
  std::unordered_set<std::string> dropped_;  // never read again
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_SHARED_SOURCE_LINES_HPP_
