// --debug-dir: names the frames a profile left unnamed (a program stripped of every
// symbol, as shipped to production) from files that still have them, found by the
// GNU build id the profile's mapping records:
//   DIR/.build-id/ab/cdef....debug   debug files, as distributions and
//                                    `objcopy --only-keep-debug` lay them out;
//   any ELF file under DIR           unstripped binaries (read for their build id once).
// Function names come from the file's symbol tables and, built with libdw, lines and
// inlined functions from its DWARF, the same way spanprof names frames in process
// (spanprof/detail/symbolization/object_symbols.hpp). A file that is not ELF, or is damaged,
// names nothing and costs nothing else.
#ifndef SPANPROF_TOOLS_REPORT_DEBUG_FILES_HPP_
#define SPANPROF_TOOLS_REPORT_DEBUG_FILES_HPP_

#include "profile_reader.hpp"

#include <spanprof/detail/symbolization/dwarf_source.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>
#include <spanprof/detail/symbolization/object_symbols.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace spanprof_report {

class DebugFiles {
 public:
  explicit DebugFiles(std::vector<std::string> directories) : directories_(std::move(directories)) {}

  // The frames at `where`, innermost first; false when no file of its build id is
  // found or that file does not name the address.
  bool name(const UnnamedAddress& where, std::vector<NamedFrame>& out) {
    Object* object = object_for(std::string(where.build_id));
    if (object == nullptr) return false;
    std::uint64_t segment = 0;
    if (!object->segment_address(where.mapping_file_offset, where.mapping_size, segment)) return false;
    spanprof::ResolvedFrame frame;
    object->symbols.resolve(static_cast<std::uintptr_t>(segment + where.offset_in_mapping),
                            static_cast<std::uintptr_t>(segment), frame);
    for (std::size_t i = 0; i < frame.inlined_count; ++i) {
      const spanprof::InlinedFrame& inlined = frame.inlined[i];
      out.push_back({std::string(inlined.function), std::string(inlined.file), inlined.line, inlined.start_line});
    }
    if (!frame.function.empty())
      out.push_back({std::string(frame.function), std::string(frame.file), frame.line, frame.start_line});
    return !out.empty();
  }

  // How many profile mappings' files were found, for the tool's summary line.
  std::size_t files_used() const noexcept {
    std::size_t used = 0;
    for (const auto& entry : objects_) used += entry.second != nullptr;
    return used;
  }

 private:
  struct Object {
    Elf64_Ehdr header{};
    spanprof::detail::ElfFileBytes bytes;
    spanprof::detail::ObjectSymbols symbols;
#if SPANPROF_WITH_LIBDW
    std::shared_ptr<spanprof::detail::SourceLines> source_lines;  // `symbols` holds them weakly
#endif
    // The mapping's segment, by (file offset, size): program headers read once per mapping.
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> segments;

    bool segment_address(std::uint64_t file_offset, std::uint64_t size, std::uint64_t& address) {
      const std::pair<std::uint64_t, std::uint64_t> key{file_offset, size};
      if (const auto found = segments.find(key); found != segments.end()) {
        address = found->second;
        return true;
      }
      if (!spanprof::detail::elf_segment_address(bytes, header, file_offset, size, address)) return false;
      segments.emplace(key, address);
      return true;
    }
  };

  Object* object_for(const std::string& build_id) {
    const auto [found, fresh] = objects_.try_emplace(build_id);
    if (!fresh) return found->second.get();
    for (const std::string& directory : directories_) {
      const std::string path = spanprof::detail::build_id_debug_path(build_id, directory);
      if (!path.empty() && (found->second = open(path, build_id))) return found->second.get();
    }
    if (!scanned_) scan();
    if (const auto by_id = scanned_by_build_id_.find(build_id); by_id != scanned_by_build_id_.end())
      found->second = open(by_id->second, build_id);
    return found->second.get();
  }

  static std::unique_ptr<Object> open(const std::string& path, const std::string& build_id) {
    auto object = std::make_unique<Object>();
    std::string file_build_id;
    if (!spanprof::detail::open_elf_file(path, object->bytes, object->header, file_build_id) ||
        file_build_id != build_id)
      return nullptr;
    std::vector<spanprof::detail::ElfSymbol> symbols;
    spanprof::detail::ElfImageInfo info;
    if (spanprof::detail::load_elf_symbols_from(object->bytes, 0, true, symbols, info)) {
      spanprof::detail::finalize_elf_symbols(symbols);
      object->symbols.set_symbols(std::move(symbols));
    }
#if SPANPROF_WITH_LIBDW
    object->source_lines = spanprof::detail::DwarfSource::open_for(path, build_id, {});
    object->symbols.set_source_lines(object->source_lines);
#endif
    return object;
  }

  // Every regular file under the directories, by build id: a few levels deep and a
  // bounded number of files, so that a directory given by mistake (/) ends soon.
  void scan() {
    scanned_ = true;
    constexpr std::size_t most_files = 100000;
    std::size_t files = 0;
    namespace fs = std::filesystem;
    for (const std::string& directory : directories_) {
      std::error_code error;
      for (fs::recursive_directory_iterator it(directory, fs::directory_options::skip_permission_denied, error), end;
           !error && it != end && files < most_files; it.increment(error)) {
        if (it.depth() > 4) it.disable_recursion_pending();
        std::error_code kind_error;
        if (!it->is_regular_file(kind_error)) continue;
        ++files;
        spanprof::detail::ElfFileBytes bytes;
        Elf64_Ehdr header{};
        std::string build_id;
        const std::string path = it->path().string();
        if (spanprof::detail::open_elf_file(path, bytes, header, build_id) && !build_id.empty())
          scanned_by_build_id_.try_emplace(build_id, path);
      }
    }
  }

  std::vector<std::string> directories_;
  std::unordered_map<std::string, std::unique_ptr<Object>> objects_;  // by build id; null: none found
  bool scanned_ = false;
  std::unordered_map<std::string, std::string> scanned_by_build_id_;
};

}  // namespace spanprof_report

#endif  // SPANPROF_TOOLS_REPORT_DEBUG_FILES_HPP_
