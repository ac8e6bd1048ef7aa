// Source lines and inlined functions from DWARF, with elfutils' libdw
// (SPANPROF_WITH_LIBDW=1): for a sampled address, the chain of functions the
// compiler inlined there, innermost first, each with its file and line.
//
// An object's DWARF is opened the first time an address lands in it: from the
// object itself, or from its separate debug file (by build id under a debug
// directory, DIR/.build-id/ab/cdef....debug; or the .gnu_debuglink name beside the
// object, in its .debug/, or under a debug directory as GDB looks).
// Its compilation units' address ranges are indexed at open, and a unit's functions
// the first time an address lands in it, so a lookup is two binary searches and a
// walk down the one function's inlined copies; the lines and the calls' files come
// from the same file's line tables (line_table_source.hpp), which run the one
// sequence that holds the address where libdw would expand the unit's whole table.
// It runs on the sender's thread only. A debug file that is damaged costs its lines, not the
// profile: libdw reads every size against the file's.
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_DWARF_SOURCE_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_DWARF_SOURCE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>
#include <spanprof/detail/symbolization/line_table_source.hpp>
#include <spanprof/detail/symbolization/source_lines.hpp>

#if SPANPROF_WITH_LIBDW

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class DwarfSource final : public SourceLines {
 public:
  DwarfSource(const DwarfSource&) = delete;
  DwarfSource& operator=(const DwarfSource&) = delete;
  ~DwarfSource() {
    if (dwarf_ != nullptr) ::dwarf_end(dwarf_);
    if (fd_ >= 0) ::close(fd_);
  }

  // The DWARF with line tables for an object at `path` whose GNU build id (hex) is
  // `build_id` (empty: unknown): its own, else its separate debug file's, looked
  // for under `debug_directories`. Null when there is none, or none that matches
  // the object.
  static std::unique_ptr<DwarfSource> open_for(const std::string& path, const std::string& build_id,
                                               const std::vector<std::string>& debug_directories) noexcept {
    return open_first_candidate<DwarfSource>(path, build_id, debug_directories);
  }

  bool lookup(std::uint64_t address, std::vector<DwarfFrame>& chain) override {
    std::lock_guard<std::mutex> held(mutex_);  // shared by symbolizers (shared_dwarf_source)
    // Kept per address, for the next symbolizer (a restart) too: bounded by the
    // addresses ever sampled in this object.
    auto [cached, fresh] = chains_.try_emplace(address);
    if (fresh) look_up(address, cached->second);
    chain = cached->second;
    return !chain.empty();
  }

  std::uint64_t memory_bytes() noexcept override {
    std::lock_guard<std::mutex> held(mutex_);
    std::uint64_t bytes = sizeof *this + libdw_bytes_ + units_.capacity() * sizeof(Unit) +
                          unit_ranges_.capacity() * sizeof(Range) + nesting_.capacity() * sizeof(Dwarf_Die);
    for (const Unit& unit : units_) bytes += unit.functions.capacity() * sizeof(Range);
    for (const auto& [address, chain] : chains_)
      bytes += hash_node_bytes + sizeof address + sizeof chain + chain.capacity() * sizeof(DwarfFrame);
    for (const auto& [offset, name] : qualified_names_) bytes += hash_node_bytes + sizeof offset + sizeof name + name.capacity();
    // Outside the lock would do too: the line tables have their own.
    if (lines_ != nullptr) bytes += lines_->memory_bytes();
    return bytes;
  }

 private:
  void look_up(std::uint64_t address, std::vector<DwarfFrame>& chain) {
    chain.clear();
    const std::size_t unit_index = unit_at(address);
    if (unit_index == no_unit) return;
    Unit& unit = units_[unit_index];
    // The line from the line tables' reader, which runs the one sequence that
    // holds the address: libdw would expand the unit's whole table and keep it.
    const char* file = nullptr;
    int line_number = 0;
    if (lines_ != nullptr) lines_->line_at(address, file, line_number);
    if (!unit.indexed) index_functions(unit);
    // The function, then the inlined copies inside it that hold the address, down
    // to the innermost: each one's children only, never the unit's whole tree.
    nesting_.clear();
    Dwarf_Die function;
    if (function_at(unit, address, function)) {
      nesting_.push_back(function);
      Dwarf_Die scope = function;
      for (std::size_t depth = 0; depth < max_inline_depth && descend(scope, address); ++depth)
        if (::dwarf_tag(&scope) == DW_TAG_inlined_subroutine) nesting_.push_back(scope);
    }
    Dwarf_Attribute attribute;
    Dwarf_Word table = 0;  // the unit's line table, whose files the calls name
    const bool have_table =
        lines_ != nullptr && ::dwarf_formudata(::dwarf_attr(&unit.die, DW_AT_stmt_list, &attribute), &table) == 0;
    for (std::size_t i = nesting_.size(); i-- > 0;) {
      Dwarf_Die& die = nesting_[i];
      DwarfFrame frame;
      name_of(die, frame);
      if (::dwarf_decl_line(&die, &frame.start_line) != 0 || frame.start_line < 0) frame.start_line = 0;
      frame.file = file;
      frame.line = line_number;
      chain.push_back(frame);
      if (i == 0) break;
      // The next one out is where this one was inlined: at its call.
      Dwarf_Word value = 0;
      file = nullptr;
      line_number = 0;
      if (have_table && ::dwarf_formudata(::dwarf_attr(&die, DW_AT_call_file, &attribute), &value) == 0)
        file = lines_->file_of(table, value);
      // A line past int's range is a damaged file's: unknown, as pprof has no negative lines.
      if (::dwarf_formudata(::dwarf_attr(&die, DW_AT_call_line, &attribute), &value) == 0 && value <= INT_MAX)
        line_number = static_cast<int>(value);
    }
    if (chain.empty() && file != nullptr) {
      DwarfFrame frame;  // a line, no function: the symbol table names it
      frame.file = file;
      frame.line = line_number;
      chain.push_back(frame);
    }
  }

  static constexpr std::size_t no_unit = ~std::size_t{0};
  // Deeper inlining than this is cut (a hostile file's nesting has no end).
  static constexpr std::size_t max_inline_depth = 64;

  struct Range {
    Dwarf_Addr start;
    Dwarf_Addr end;
    std::size_t index;  // the unit (units_), or the function's DIE offset (Unit::functions)
  };
  struct Unit {
    Dwarf_Die die;
    bool indexed = false;
    std::vector<Range> functions;  // its functions' code, by start; index: the DIE's offset
  };

  DwarfSource() = default;

 public:
  // The DWARF of the one file at `path`; null when none, or of another build.
  static std::unique_ptr<DwarfSource> open_file(const std::string& path, const std::string& build_id) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    std::unique_ptr<DwarfSource> source(new DwarfSource());
    source->fd_ = fd;
    source->dwarf_ = ::dwarf_begin(fd, DWARF_C_READ);
    if (source->dwarf_ == nullptr) return nullptr;  // no DWARF, or not an ELF file
    if (!same_build(::dwarf_getelf(source->dwarf_), build_id)) return nullptr;
    source->libdw_bytes_ = libdw_section_bytes(::dwarf_getelf(source->dwarf_));
    source->lines_ = LineTableSource::open_file(path, build_id);
    if (!source->index_units()) return nullptr;
    return source;
  }

 private:

  // What libdw holds of the file's sections: those a lookup reads, and every
  // compressed one (inflated whole when the file is opened). The other sections
  // are mapped, never read.
  static std::uint64_t libdw_section_bytes(Elf* elf) noexcept {
    std::size_t names = 0;
    if (elf == nullptr || ::elf_getshdrstrndx(elf, &names) != 0) return 0;
    std::uint64_t bytes = 0;
    for (Elf_Scn* section = nullptr; (section = ::elf_nextscn(elf, section)) != nullptr;) {
      GElf_Shdr header;
      if (::gelf_getshdr(section, &header) == nullptr) continue;
      const char* name = ::elf_strptr(elf, names, header.sh_name);
      if (name == nullptr || std::strncmp(name, ".debug_", 7) != 0) continue;
      GElf_Chdr inflated;
      if ((header.sh_flags & SHF_COMPRESSED) != 0 && ::gelf_getchdr(section, &inflated) != nullptr) {
        bytes += inflated.ch_size;
        continue;
      }
      for (const char* read : {".debug_info", ".debug_abbrev", ".debug_str", ".debug_str_offsets", ".debug_addr",
                               ".debug_ranges", ".debug_rnglists", ".debug_aranges"})
        if (std::strcmp(name, read) == 0) bytes += header.sh_size;
    }
    return bytes;
  }

  // Every compilation unit's address ranges, sorted: a unit is found without aranges
  // (Clang emits none by default).
  bool index_units() {
    Dwarf_CU* cu = nullptr;
    Dwarf_Die die, sub;
    Dwarf_Half version = 0;
    std::uint8_t type = 0;
    while (::dwarf_get_units(dwarf_, cu, &cu, &version, &type, &die, &sub) == 0) {
      if (::dwarf_tag(&die) != DW_TAG_compile_unit && ::dwarf_tag(&die) != DW_TAG_partial_unit) continue;
      const std::size_t before = unit_ranges_.size();
      Dwarf_Addr base = 0, start = 0, end = 0;
      for (ptrdiff_t at = 0; (at = ::dwarf_ranges(&die, at, &base, &start, &end)) > 0;)
        if (end > start) unit_ranges_.push_back({start, end, units_.size()});
      if (unit_ranges_.size() == before) continue;
      units_.emplace_back();
      units_.back().die = die;
    }
    sort_by_start(unit_ranges_);
    return !unit_ranges_.empty();
  }

  static void sort_by_start(std::vector<Range>& ranges) {
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  }

  std::size_t unit_at(Dwarf_Addr address) const noexcept {
    auto it = std::upper_bound(unit_ranges_.begin(), unit_ranges_.end(), address,
                               [](Dwarf_Addr a, const Range& r) { return a < r.start; });
    // Units' ranges do not overlap in a linked object; a few steps back cover one
    // unit's hole filled by another.
    for (int steps = 0; it != unit_ranges_.begin() && steps < 4; ++steps) {
      --it;
      if (address < it->end) return it->index;
    }
    return no_unit;
  }

  // The function (DW_TAG_subprogram) whose code holds `address`.
  bool function_at(const Unit& unit, Dwarf_Addr address, Dwarf_Die& out) noexcept {
    auto it = std::upper_bound(unit.functions.begin(), unit.functions.end(), address,
                               [](Dwarf_Addr a, const Range& r) { return a < r.start; });
    for (int steps = 0; it != unit.functions.begin() && steps < 4; ++steps) {
      --it;
      if (address < it->end) return ::dwarf_offdie(dwarf_, static_cast<Dwarf_Off>(it->index), &out) != nullptr;
    }
    return false;
  }

  // Moves `scope` to its child whose code holds `address` (an inlined copy, or a
  // block around one); false when none does.
  static bool descend(Dwarf_Die& scope, Dwarf_Addr address) noexcept {
    Dwarf_Die child;
    if (::dwarf_child(&scope, &child) != 0) return false;
    for (std::size_t siblings = 0; siblings < max_dies_per_unit; ++siblings) {
      const int tag = ::dwarf_tag(&child);
      if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block) && ::dwarf_haspc(&child, address) == 1) {
        scope = child;
        return true;
      }
      if (::dwarf_siblingof(&child, &child) != 0) return false;
    }
    return false;
  }

  // One walk over the unit's top-level entries (into namespaces and classes, never
  // into a function), the first time an address lands in it: its functions' code
  // ranges, and the qualified names of the functions declared in it (for the
  // copies that have no linkage name). dwarf_getscopes would walk the unit's whole
  // tree at every address (milliseconds in a large unit), and an index of every
  // inlined copy tens of megabytes for a large program.
  void index_functions(Unit& unit) {
    unit.indexed = true;
    struct Open {
      Dwarf_Die die;
      std::size_t scope_size;  // qualified prefix length
    };
    std::vector<Open> stack;
    std::string scope;  // "ns::Class::" of the entries below
    Dwarf_Die child;
    if (::dwarf_child(&unit.die, &child) != 0) return;
    stack.push_back({child, 0});
    std::size_t visited = 0;
    while (!stack.empty() && ++visited < max_dies_per_unit) {
      Open open = stack.back();
      stack.pop_back();
      scope.resize(open.scope_size);
      Dwarf_Die& die = open.die;
      Dwarf_Die sibling;
      if (::dwarf_siblingof(&die, &sibling) == 0) stack.push_back({sibling, open.scope_size});
      const int tag = ::dwarf_tag(&die);
      if (tag == DW_TAG_subprogram) {
        remember_qualified_name(die, scope);
        Dwarf_Addr base = 0, start = 0, end = 0;
        for (ptrdiff_t at = 0; (at = ::dwarf_ranges(&die, at, &base, &start, &end)) > 0;)
          if (end > start) unit.functions.push_back({start, end, static_cast<std::size_t>(::dwarf_dieoffset(&die))});
        continue;
      }
      if (tag != DW_TAG_namespace && tag != DW_TAG_class_type && tag != DW_TAG_structure_type &&
          tag != DW_TAG_union_type)
        continue;
      const char* name = ::dwarf_diename(&die);
      scope += name != nullptr ? name : "(anonymous namespace)";
      scope += "::";
      Dwarf_Die first;
      if (::dwarf_haschildren(&die) && ::dwarf_child(&die, &first) == 0) stack.push_back({first, scope.size()});
    }
    sort_by_start(unit.functions);
  }

  // A function without a linkage name (internal linkage, C): its name with the
  // namespaces and classes around its declaration, found by the declaration's offset.
  void remember_qualified_name(Dwarf_Die& die, const std::string& scope) {
    if (scope.empty()) return;
    Dwarf_Attribute attribute;
    if (::dwarf_attr(&die, DW_AT_linkage_name, &attribute) != nullptr) return;
    const char* name = ::dwarf_formstring(::dwarf_attr(&die, DW_AT_name, &attribute));
    if (name == nullptr) return;
    qualified_names_.emplace(::dwarf_dieoffset(&die), scope + name);
  }

  // The linkage name (demangled by the caller into the name the symbol table
  // gives), else the plain name qualified as declared; from the abstract origin
  // for an inlined copy.
  void name_of(Dwarf_Die& die, DwarfFrame& frame) {
    Dwarf_Attribute attribute;
    const char* linkage = ::dwarf_formstring(::dwarf_attr_integrate(&die, DW_AT_linkage_name, &attribute));
    if (linkage == nullptr) linkage = ::dwarf_formstring(::dwarf_attr_integrate(&die, DW_AT_MIPS_linkage_name, &attribute));
    if (linkage != nullptr) {
      frame.name = linkage;
      frame.mangled = true;
      return;
    }
    frame.name = ::dwarf_formstring(::dwarf_attr_integrate(&die, DW_AT_name, &attribute));
    Dwarf_Die declaration = die;
    for (const unsigned at : {DW_AT_abstract_origin, DW_AT_specification}) {
      Dwarf_Die next;
      if (::dwarf_formref_die(::dwarf_attr(&declaration, at, &attribute), &next) != nullptr) declaration = next;
    }
    const auto found = qualified_names_.find(::dwarf_dieoffset(&declaration));
    if (found != qualified_names_.end()) frame.name = found->second.c_str();
  }

  // A unit larger than this is indexed only this far (a hostile or broken file
  // whose DIEs never end).
  static constexpr std::size_t max_dies_per_unit = std::size_t{1} << 24;

  std::mutex mutex_;
  int fd_ = -1;
  Dwarf* dwarf_ = nullptr;
  std::uint64_t libdw_bytes_ = 0;
  std::unique_ptr<LineTableSource> lines_;  // the same file's line tables
  std::vector<Unit> units_;
  std::vector<Range> unit_ranges_;
  std::vector<Dwarf_Die> nesting_;  // one lookup's, reused
  std::unordered_map<std::uint64_t, std::vector<DwarfFrame>> chains_;  // by address
  // By declaration offset; node-based, so the names DwarfFrame::name points at stay.
  std::unordered_map<Dwarf_Off, std::string> qualified_names_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_DWARF_SOURCE_HPP_
