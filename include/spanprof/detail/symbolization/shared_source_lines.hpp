// An object's source lines, shared by the symbolizers of the process and kept:
// each spanprof::start() makes its own symbolizer, and a restart would otherwise
// read a large program's DWARF again and hold it twice while the old runtime
// drains. What is kept grows only with the code sampled, once.
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_SHARED_SOURCE_LINES_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_SHARED_SOURCE_LINES_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/symbolization/dwarf_source.hpp>
#include <spanprof/detail/symbolization/line_table_source.hpp>
#include <spanprof/detail/symbolization/source_lines.hpp>

#if SPANPROF_WITH_LIBDW

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What is read of an object's DWARF: all of it (lines and inlined functions,
// DwarfSource), or its line tables alone (LineTableSource).
enum class SourceLinesDepth { inlined_functions, line_tables };

// The source lines of the object at `path`, read to `depth`. Null when the object
// has none (asked again by the next symbolizer).
inline std::shared_ptr<SourceLines> shared_source_lines(const std::string& path, const std::string& build_id,
                                                        const std::vector<std::string>& debug_directories,
                                                        SourceLinesDepth depth) {
  // Never destroyed: a sender that outlived a stop past its deadline may still ask
  // while the process runs its exit-time destructors.
  static std::mutex& mutex = *new std::mutex;
  static auto& opened = *new std::unordered_map<std::string, std::shared_ptr<SourceLines>>;
  std::string key = (depth == SourceLinesDepth::line_tables ? "lines\n" : "all\n") + path + '\n' + build_id;
  for (const std::string& directory : debug_directories) key += '\n' + directory;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<SourceLines>& slot = opened[key];
  if (!slot) {
    if (depth == SourceLinesDepth::line_tables) slot = LineTableSource::open_for(path, build_id, debug_directories);
    else slot = DwarfSource::open_for(path, build_id, debug_directories);
  }
  return slot;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_SHARED_SOURCE_LINES_HPP_
