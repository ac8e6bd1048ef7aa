// What one object file says about its own addresses (link-time, before a load bias
// is added): the function there, from its symbol tables, and, built with libdw
// (SPANPROF_WITH_LIBDW=1), the source line and the functions inlined there, from its
// DWARF. The in-process symbolizer keeps one per loaded object
// (symbolization/elf_symbolizer.hpp); spanprof-report one per object it names a
// stripped program's frames from (--debug-dir).
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_OBJECT_SYMBOLS_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_OBJECT_SYMBOLS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>
#include <spanprof/detail/symbolization/source_lines.hpp>
#include <spanprof/detail/symbolization/symbol_names.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class ObjectSymbols {
 public:
  // Its function symbols at link-time addresses (read with bias 0), finalized.
  void set_symbols(std::vector<ElfSymbol> symbols) noexcept { symbols_ = std::move(symbols); }
#if SPANPROF_WITH_LIBDW
  // Held weakly: their owner (the process's SourceLinesCache, or the caller) may
  // drop them, and this object's frames keep their names.
  void set_source_lines(const std::shared_ptr<SourceLines>& lines) noexcept { lines_ = lines; }
#endif

  // Names `address` in `frame`: its function, and its line and inlined functions
  // when the DWARF says. `region_start` is the start of the segment that holds it
  // (a symbol without a size never reaches back before it). The views point into
  // this object and stay valid while it lives.
  void resolve(std::uintptr_t address, std::uintptr_t region_start, ResolvedFrame& frame) {
    const std::size_t index = find_elf_symbol(symbols_, address, region_start);
    if (index != static_cast<std::size_t>(-1)) {
      ElfSymbol& symbol = symbols_[index];
      // Demangling every symbol up front would dominate load time; most are never sampled.
      if (symbol.demangled.empty()) symbol.demangled = strip_clone_suffixes(demangle_symbol(symbol.name));
      frame.function = symbol.demangled;
      frame.system_name = symbol.name;
    }
#if SPANPROF_WITH_LIBDW
    add_source_lines(address, frame);
#endif
  }

 private:
#if SPANPROF_WITH_LIBDW
  // The function itself keeps the symbol table's name (what a profile without
  // DWARF calls it too); DWARF names it only when the symbol table does not. What
  // the frame shows of the source's strings is copied here: the source may go.
  void add_source_lines(std::uintptr_t address, ResolvedFrame& frame) {
    const std::shared_ptr<SourceLines> lines = lines_.lock();
    if (!lines) return;
    const bool has_line = lines->lookup(address, chain_);
    lines->note_lookup();
    if (!has_line) return;
    const DwarfFrame& outer = chain_.back();
    frame.file = kept(outer.file);
    frame.line = outer.line;
    frame.start_line = outer.start_line;
    if (frame.function.empty() && outer.name != nullptr) {
      frame.function = dwarf_name(outer);
      if (outer.mangled) frame.system_name = kept(outer.name);
    }
    if (chain_.size() < 2) return;
    auto [found, fresh] = inlined_.try_emplace(address);
    std::vector<InlinedFrame>& inlined = found->second;
    for (std::size_t i = 0; fresh && i + 1 < chain_.size(); ++i) {
      const DwarfFrame& from = chain_[i];
      InlinedFrame out;
      if (from.name != nullptr) out.function = dwarf_name(from);
      if (from.mangled) out.system_name = kept(from.name);
      out.file = kept(from.file);
      out.line = from.line;
      out.start_line = from.start_line;
      inlined.push_back(out);
    }
    frame.inlined = inlined.data();
    frame.inlined_count = inlined.size();
  }

  std::string_view dwarf_name(const DwarfFrame& frame) {
    if (!frame.mangled) return kept(frame.name);
    auto [found, fresh] = demangled_.try_emplace(frame.name);
    if (fresh) found->second = strip_clone_suffixes(demangle_symbol(frame.name));
    return found->second;
  }

  std::string_view kept(const char* text) {
    if (text == nullptr) return {};
    auto [found, fresh] = kept_.try_emplace(text);
    if (fresh) found->second = text;
    return found->second;
  }

  std::weak_ptr<SourceLines> lines_;
  // What the DWARF told, kept for the frames handed out (their views point here).
  std::unordered_map<std::uintptr_t, std::vector<InlinedFrame>> inlined_;
  // The names and files they show, copied, by the source's pointer: stable while
  // the source lives, and nothing is asked of it once it is gone.
  std::unordered_map<const char*, std::string> kept_;
  std::unordered_map<const char*, std::string> demangled_;  // DWARF's linkage names
  std::vector<DwarfFrame> chain_;  // one lookup's, reused
#endif
  std::vector<ElfSymbol> symbols_;  // sorted, one per address
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_OBJECT_SYMBOLS_HPP_
