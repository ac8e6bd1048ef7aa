// What an object's DWARF says about one of its addresses (SPANPROF_WITH_LIBDW=1),
// and where that DWARF is: the interface both readers share, and the lookup of
// a separate debug file, as GDB looks.
//
// Two readers answer it: DwarfSource (dwarf_source.hpp, through libdw) gives the
// chain of inlined functions with their lines, from the whole debug information;
// LineTableSource (line_table_source.hpp) gives the line alone, from the line
// tables. Which one reads an object is the symbolizer's choice
// (ElfSymbolizerOptions::system_library_lines).
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_SOURCE_LINES_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_SOURCE_LINES_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>

#if SPANPROF_WITH_LIBDW

#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// One function of the chain at an address, as DWARF names it. The strings are the
// source's (valid while it lives); `name` is the linkage (mangled) name when
// `mangled`, else the plain one; null when only the line is known.
struct DwarfFrame {
  const char* name = nullptr;
  bool mangled = false;
  const char* file = nullptr;  // where the address is in this function: its line, or its call of the next inner one
  int line = 0;
  int start_line = 0;  // the function's declaration line
};

class SourceLines {
 public:
  virtual ~SourceLines() = default;
  // The chain at `address` (the object's own address: runtime address minus the
  // load bias), innermost first: the functions inlined there, then the function
  // they were inlined into. False when the address has no line information. The
  // strings stay valid while this source lives. Called by one thread at a time per
  // symbolizer, by several symbolizers at once.
  virtual bool lookup(std::uint64_t address, std::vector<DwarfFrame>& chain) = 0;
  // What it keeps, in bytes: the sections it read or inflated (or that libdw
  // did for it), and what it learned of them.
  virtual std::uint64_t memory_bytes() noexcept = 0;

  // When it was last looked up, on the process's count of lookups: the process
  // cache (shared_source_lines.hpp) drops the least recently looked up first.
  std::uint64_t note_lookup() noexcept {
    const std::uint64_t now = lookups().fetch_add(1, std::memory_order_relaxed) + 1;
    last_lookup_.store(now, std::memory_order_relaxed);
    return now;
  }
  std::uint64_t last_lookup() const noexcept { return last_lookup_.load(std::memory_order_relaxed); }

 private:
  static std::atomic<std::uint64_t>& lookups() noexcept {
    static std::atomic<std::uint64_t> count{0};
    return count;
  }
  std::atomic<std::uint64_t> last_lookup_{0};
};

// What an unordered container's node costs beyond its value: the node's link and
// hash, and its bucket.
inline constexpr std::uint64_t hash_node_bytes = 3 * sizeof(void*);

// Where GDB looks for the file a .gnu_debuglink section names.
inline std::vector<std::string> debuglink_candidates(const std::string& path,
                                                     const std::vector<std::string>& debug_directories) {
  std::vector<std::string> out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  Elf* elf = ::elf_begin(fd, ELF_C_READ, nullptr);
  if (elf != nullptr) {
    GElf_Word crc = 0;
    const char* name = ::dwelf_elf_gnu_debuglink(elf, &crc);
    if (name != nullptr && *name != '\0' && std::string(name).find('/') == std::string::npos) {
      std::string directory = path.substr(0, path.rfind('/') + 1);
      if (directory.empty()) directory = "./";
      out.push_back(directory + name);
      out.push_back(directory + ".debug/" + name);
      if (directory.front() == '/')
        for (const std::string& debug_directory : debug_directories) out.push_back(debug_directory + directory + name);
    }
    ::elf_end(elf);
  }
  ::close(fd);
  return out;
}

// The files that may hold the DWARF of the object at `path`, in the order to try
// them: the object itself, its separate debug file by build id under each debug
// directory, then by its .gnu_debuglink name.
inline std::vector<std::string> debug_file_candidates(const std::string& path, const std::string& build_id,
                                                      const std::vector<std::string>& debug_directories) {
  std::vector<std::string> out{path};
  for (const std::string& directory : debug_directories) {
    std::string by_id = build_id_debug_path(build_id, directory);
    if (!by_id.empty()) out.push_back(std::move(by_id));
  }
  for (std::string& candidate : debuglink_candidates(path, debug_directories)) out.push_back(std::move(candidate));
  return out;
}

// The first of the object's candidate files that `Source::open_file` reads, or
// null: the one search both readers make.
template <typename Source>
std::unique_ptr<Source> open_first_candidate(const std::string& path, const std::string& build_id,
                                             const std::vector<std::string>& debug_directories) noexcept {
  SPANPROF_TRY {
    if (::elf_version(EV_CURRENT) == EV_NONE) return nullptr;
    for (const std::string& candidate : debug_file_candidates(path, build_id, debug_directories))
      if (auto source = Source::open_file(candidate, build_id)) return source;
    return nullptr;
  } SPANPROF_CATCH_ALL {
    return nullptr;
  }
}

// False when the file's GNU build id is known and differs from `build_id` (a
// debug file of another build would be confidently wrong).
inline bool same_build(Elf* elf, const std::string& build_id) {
  if (build_id.empty()) return true;
  const void* bits = nullptr;
  const ssize_t size = elf != nullptr ? ::dwelf_elf_gnu_build_id(elf, &bits) : -1;
  return size <= 0 || hex_lowercase(static_cast<const unsigned char*>(bits), static_cast<std::size_t>(size)) == build_id;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_SOURCE_LINES_HPP_
