// Source lines and inlined functions from DWARF, with elfutils' libdw
// (SPANPROF_WITH_LIBDW=1): for a sampled address, the chain of functions the
// compiler inlined there, innermost first, each with its file and line.
//
// An object's DWARF is opened the first time an address lands in it: from the
// object itself, or from its separate debug file (/usr/lib/debug/.build-id/, or the
// .gnu_debuglink name beside the object, in its .debug/ or under /usr/lib/debug/).
// Its compilation units' address ranges are indexed at open, and a unit's functions
// and inlined copies the first time an address lands in it, so a lookup is a few
// binary searches and the unit's line table. It runs on the
// sender's thread only. A debug file that is damaged costs its lines, not the
// profile: libdw reads every size against the file's.
#ifndef SPANPROF_SYMBOLIZATION_DWARF_SOURCE_HPP_
#define SPANPROF_SYMBOLIZATION_DWARF_SOURCE_HPP_

#include <spanprof/config.hpp>

#if SPANPROF_WITH_LIBDW

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// One function of the chain at an address, as DWARF names it. The strings are the
// DwarfSource's (valid while it lives); `name` is the linkage (mangled) name when
// `mangled`, else the plain one.
struct DwarfFrame {
  const char* name = nullptr;
  bool mangled = false;
  const char* file = nullptr;  // where the address is in this function: its line, or its call of the next inner one
  int line = 0;
  int start_line = 0;  // the function's declaration line
};

class DwarfSource {
 public:
  DwarfSource(const DwarfSource&) = delete;
  DwarfSource& operator=(const DwarfSource&) = delete;
  ~DwarfSource() {
    if (dwarf_ != nullptr) ::dwarf_end(dwarf_);
    if (fd_ >= 0) ::close(fd_);
  }

  // The DWARF with line tables for an object at `path` whose GNU build id (hex) is
  // `build_id` (empty: unknown): its own, else its separate debug file's. Null when
  // there is none, or none that matches the object.
  static std::unique_ptr<DwarfSource> open_for(const std::string& path, const std::string& build_id) noexcept {
    SPANPROF_TRY {
      if (::elf_version(EV_CURRENT) == EV_NONE) return nullptr;
      if (auto own = open_file(path, build_id)) return own;
      if (build_id.size() > 2) {
        const std::string by_id =
            "/usr/lib/debug/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
        if (auto separate = open_file(by_id, build_id)) return separate;
      }
      for (const std::string& candidate : debuglink_candidates(path))
        if (auto separate = open_file(candidate, build_id)) return separate;
      return nullptr;
    } SPANPROF_CATCH_ALL {
      return nullptr;
    }
  }

  // The chain at `address` (the object's own address: runtime address minus the
  // load bias), innermost first: the functions inlined there, then the function
  // they were inlined into. False when the address has no line information.
  bool lookup(std::uint64_t address, std::vector<DwarfFrame>& chain) {
    chain.clear();
    const std::size_t unit_index = unit_at(address);
    if (unit_index == no_unit) return false;
    Unit& unit = units_[unit_index];
    Dwarf_Line* line = ::dwarf_getsrc_die(&unit.die, address);
    const char* file = line != nullptr ? ::dwarf_linesrc(line, nullptr, nullptr) : nullptr;
    int line_number = 0;
    if (line != nullptr) ::dwarf_lineno(line, &line_number);
    if (!unit.indexed) index_functions(unit);
    Dwarf_Files* files = nullptr;
    bool have_files = false;
    for (std::int32_t at = innermost_function(unit, address); at >= 0; at = unit.functions[static_cast<std::size_t>(at)].parent) {
      FunctionNode& node = unit.functions[static_cast<std::size_t>(at)];
      DwarfFrame frame;
      frame.name = node.name;
      frame.mangled = node.mangled;
      frame.start_line = node.start_line;
      frame.file = file;
      frame.line = line_number;
      chain.push_back(frame);
      if (!node.inlined) break;
      // The next one out is where this one was inlined: at its call.
      if (!have_files) have_files = ::dwarf_getsrcfiles(&unit.die, &files, nullptr) == 0;
      file = have_files && node.call_file != 0 ? ::dwarf_filesrc(files, node.call_file, nullptr, nullptr) : nullptr;
      line_number = node.call_line;
    }
    if (chain.empty() && file != nullptr) {
      DwarfFrame frame;  // a line, no function: the symbol table names it
      frame.file = file;
      frame.line = line_number;
      chain.push_back(frame);
    }
    return !chain.empty();
  }

 private:
  static constexpr std::size_t no_unit = ~std::size_t{0};

  // A function (DW_TAG_subprogram) or an inlined copy of one
  // (DW_TAG_inlined_subroutine) with code, and the one it sits in.
  struct FunctionNode {
    std::int32_t parent = -1;  // the enclosing function's node; -1: none
    bool inlined = false;
    bool mangled = false;
    const char* name = nullptr;
    int start_line = 0;
    Dwarf_Word call_file = 0;  // inlined: where it was called, in the enclosing function
    int call_line = 0;
    std::uint32_t first_range = 0;
    std::uint32_t range_count = 0;
  };
  struct Range {
    Dwarf_Addr start;
    Dwarf_Addr end;
    std::int32_t node;  // in functions (a unit's), or the unit (units_)
  };
  struct Unit {
    Dwarf_Die die;
    bool indexed = false;
    std::vector<FunctionNode> functions;
    std::vector<Range> node_ranges;  // each node's, in node order
    std::vector<Range> sorted;       // all of them, by start
  };

  DwarfSource() = default;

  static std::unique_ptr<DwarfSource> open_file(const std::string& path, const std::string& build_id) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    std::unique_ptr<DwarfSource> source(new DwarfSource());
    source->fd_ = fd;
    source->dwarf_ = ::dwarf_begin(fd, DWARF_C_READ);
    if (source->dwarf_ == nullptr) return nullptr;  // no DWARF, or not an ELF file
    if (!build_id.empty()) {
      // A debug file of another build would be confidently wrong.
      const void* bits = nullptr;
      Elf* elf = ::dwarf_getelf(source->dwarf_);
      const ssize_t size = elf != nullptr ? ::dwelf_elf_gnu_build_id(elf, &bits) : -1;
      if (size > 0 && hex(static_cast<const unsigned char*>(bits), static_cast<std::size_t>(size)) != build_id)
        return nullptr;
    }
    if (!source->index_units()) return nullptr;
    return source;
  }

  static std::string hex(const unsigned char* bytes, std::size_t size) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(size * 2);
    for (std::size_t i = 0; i < size; ++i) {
      out += digits[bytes[i] >> 4];
      out += digits[bytes[i] & 15];
    }
    return out;
  }

  // Where GDB looks for the file a .gnu_debuglink section names.
  static std::vector<std::string> debuglink_candidates(const std::string& path) {
    std::vector<std::string> out;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return out;
    Elf* elf = ::elf_begin(fd, ELF_C_READ_MMAP, nullptr);
    if (elf != nullptr) {
      GElf_Word crc = 0;
      const char* name = ::dwelf_elf_gnu_debuglink(elf, &crc);
      if (name != nullptr && *name != '\0' && std::string(name).find('/') == std::string::npos) {
        std::string directory = path.substr(0, path.rfind('/') + 1);
        if (directory.empty()) directory = "./";
        out.push_back(directory + name);
        out.push_back(directory + ".debug/" + name);
        if (directory.front() == '/') out.push_back("/usr/lib/debug" + directory + name);
      }
      ::elf_end(elf);
    }
    ::close(fd);
    return out;
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
        if (end > start) unit_ranges_.push_back({start, end, static_cast<std::int32_t>(units_.size())});
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
      if (address < it->end) return static_cast<std::size_t>(it->node);
    }
    return no_unit;
  }

  // The innermost function or inlined copy whose code holds `address`, or -1.
  // Function ranges nest as their DIEs do, so the range that starts last at or
  // before the address is in the innermost one holding it, or under it.
  static std::int32_t innermost_function(const Unit& unit, Dwarf_Addr address) noexcept {
    auto it = std::upper_bound(unit.sorted.begin(), unit.sorted.end(), address,
                               [](Dwarf_Addr a, const Range& r) { return a < r.start; });
    if (it == unit.sorted.begin()) return -1;
    for (std::int32_t at = (--it)->node; at >= 0; at = unit.functions[static_cast<std::size_t>(at)].parent) {
      const FunctionNode& node = unit.functions[static_cast<std::size_t>(at)];
      for (std::uint32_t r = 0; r < node.range_count; ++r) {
        const Range& range = unit.node_ranges[node.first_range + r];
        if (range.start <= address && address < range.end) return at;
      }
    }
    return -1;
  }

  // One walk over the unit's DIEs, the first time an address lands in it: every
  // function with code and the one around it, and the qualified names of the
  // functions declared in it (namespaces and classes), for the copies that have
  // no linkage name. A lookup is then a binary search; dwarf_getscopes would walk
  // the unit's whole tree at every address (milliseconds in a large unit).
  void index_functions(Unit& unit) {
    unit.indexed = true;
    struct Open {
      Dwarf_Die die;
      std::int32_t function;  // the innermost function node open here
      std::size_t scope_size; // qualified prefix length
    };
    std::vector<Open> stack;
    std::string scope;  // "ns::Class::" of the DIEs below
    Dwarf_Die child;
    if (::dwarf_child(&unit.die, &child) != 0) return;
    stack.push_back({child, -1, 0});
    std::size_t visited = 0;
    while (!stack.empty() && ++visited < max_dies_per_unit) {
      Open open = stack.back();
      stack.pop_back();
      scope.resize(open.scope_size);
      Dwarf_Die& die = open.die;
      // The sibling first, under the same parent.
      Dwarf_Die sibling;
      if (::dwarf_siblingof(&die, &sibling) == 0) stack.push_back({sibling, open.function, open.scope_size});
      const int tag = ::dwarf_tag(&die);
      std::int32_t function = open.function;
      std::size_t child_scope = scope.size();
      if (tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
          tag == DW_TAG_union_type) {
        const char* name = ::dwarf_diename(&die);
        scope += name != nullptr ? name : "(anonymous namespace)";
        scope += "::";
        child_scope = scope.size();
      } else if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
        if (tag == DW_TAG_subprogram) remember_qualified_name(die, scope);
        function = add_function(unit, die, tag == DW_TAG_inlined_subroutine, open.function);
        if (function < 0) function = open.function;  // no code here (a declaration): not a frame
      }
      if (::dwarf_haschildren(&die)) {
        Dwarf_Die first;
        if (::dwarf_child(&die, &first) == 0) stack.push_back({first, function, child_scope});
      }
    }
    for (const Range& range : unit.node_ranges) unit.sorted.push_back(range);
    sort_by_start(unit.sorted);
  }

  std::int32_t add_function(Unit& unit, Dwarf_Die& die, bool inlined, std::int32_t parent) {
    const auto first = static_cast<std::uint32_t>(unit.node_ranges.size());
    const auto index = static_cast<std::int32_t>(unit.functions.size());
    Dwarf_Addr base = 0, start = 0, end = 0;
    for (ptrdiff_t at = 0; (at = ::dwarf_ranges(&die, at, &base, &start, &end)) > 0;)
      if (end > start) unit.node_ranges.push_back({start, end, index});
    if (unit.node_ranges.size() == first) return -1;
    FunctionNode node;
    node.parent = parent;
    node.inlined = inlined;
    node.first_range = first;
    node.range_count = static_cast<std::uint32_t>(unit.node_ranges.size() - first);
    name_of(die, node);
    ::dwarf_decl_line(&die, &node.start_line);
    if (inlined) {
      Dwarf_Attribute attribute;
      Dwarf_Word value = 0;
      if (::dwarf_formudata(::dwarf_attr(&die, DW_AT_call_file, &attribute), &value) == 0) node.call_file = value;
      if (::dwarf_formudata(::dwarf_attr(&die, DW_AT_call_line, &attribute), &value) == 0)
        node.call_line = static_cast<int>(value);
    }
    unit.functions.push_back(node);
    return index;
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
  void name_of(Dwarf_Die& die, FunctionNode& node) {
    Dwarf_Attribute attribute;
    const char* linkage = ::dwarf_formstring(::dwarf_attr_integrate(&die, DW_AT_linkage_name, &attribute));
    if (linkage == nullptr) linkage = ::dwarf_formstring(::dwarf_attr_integrate(&die, DW_AT_MIPS_linkage_name, &attribute));
    if (linkage != nullptr) {
      node.name = linkage;
      node.mangled = true;
      return;
    }
    node.name = ::dwarf_formstring(::dwarf_attr_integrate(&die, DW_AT_name, &attribute));
    Dwarf_Die declaration = die;
    for (const unsigned at : {DW_AT_abstract_origin, DW_AT_specification}) {
      Dwarf_Die next;
      if (::dwarf_formref_die(::dwarf_attr(&declaration, at, &attribute), &next) != nullptr) declaration = next;
    }
    const auto found = qualified_names_.find(::dwarf_dieoffset(&declaration));
    if (found != qualified_names_.end()) node.name = found->second.c_str();
  }

  // A unit larger than this is indexed only this far (a hostile or broken file
  // whose DIEs never end).
  static constexpr std::size_t max_dies_per_unit = std::size_t{1} << 24;

  int fd_ = -1;
  Dwarf* dwarf_ = nullptr;
  std::vector<Unit> units_;  // never resized after open: lookups point into it
  std::vector<Range> unit_ranges_;
  // By declaration offset; node-based, so the names FunctionNode points at stay.
  std::unordered_map<Dwarf_Off, std::string> qualified_names_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_SYMBOLIZATION_DWARF_SOURCE_HPP_
