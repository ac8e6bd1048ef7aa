// A hostile debug file for the DWARF reader (detail/symbolization/dwarf_source.hpp, with
// libdw): a separate debug file of another build dropped under a build-id path, a
// truncated download, or a file made to hurt the reader. Also what names a profile
// later from such a file (detail/symbolization/object_symbols.hpp, elf_segment_address,
// elf_htl_hash), as spanprof-report --debug-dir does.
//
// Input: one byte of options (bits 0-2: how many addresses past each function
// start are looked up, bit 3: look every address up twice), then the file, which
// is read through a memfd's /proc/self/fd path, as DwarfSource opens any object.
//
// Invariants: an open without units fails; a chain holds at most 65 frames
// (64 inlined, the function), each with lines >= 0; looking an address up again gives the same chain; names handed
// out by ObjectSymbols are non-empty; the file id is 32 lowercase hex digits.
#include "fuzz_support.hpp"

#include <spanprof/detail/symbolization/dwarf_source.hpp>
#include <spanprof/detail/symbolization/line_table_source.hpp>
#include <spanprof/detail/symbolization/object_symbols.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace sd = spanprof::detail;

// Set once, in LLVMFuzzerInitialize.
const spanprof_fuzz::MemoryFile* memory_file = nullptr;

void check_chain(const std::vector<sd::DwarfFrame>& chain) {
  SPANPROF_FUZZ_CHECK(chain.size() <= 65);
  for (const sd::DwarfFrame& frame : chain) {
    SPANPROF_FUZZ_CHECK(frame.line >= 0 && frame.start_line >= 0);
    if (frame.name != nullptr) SPANPROF_FUZZ_CHECK(std::strlen(frame.name) < (std::size_t{1} << 24));
  }
}

bool same_chain(const std::vector<sd::DwarfFrame>& a, const std::vector<sd::DwarfFrame>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].file != b[i].file || a[i].line != b[i].line) return false;
  return true;
}

void fuzz_one(std::string_view unit) {
  spanprof_fuzz::Input input(unit);
  const std::uint8_t options = input.byte();
  const unsigned steps = options & 7u;
  const bool twice = (options & 8u) != 0;
  const std::string_view image = input.rest();
  memory_file->write(image);

  // The addresses a profile would hold: function starts and a few bytes into them.
  const sd::ElfMemoryBytes bytes(image.data(), image.size());
  std::vector<sd::ElfSymbol> symbols;
  sd::ElfImageInfo info;
  const bool have_symbols = sd::load_elf_symbols_from(bytes, 0, true, symbols, info).is_ok();
  if (have_symbols) sd::finalize_elf_symbols(symbols);
  if (symbols.size() > 16) symbols.resize(16);

  // Both readers: all of the DWARF (libdw), and the line tables alone.
  std::shared_ptr<sd::SourceLines> dwarf = sd::DwarfSource::open_for(memory_file->path(), "", {});
  const std::shared_ptr<sd::SourceLines> line_tables = sd::LineTableSource::open_for(memory_file->path(), "", {});
  std::vector<sd::DwarfFrame> chain, again;
  for (sd::SourceLines* source : {dwarf.get(), line_tables.get()}) {
    if (source == nullptr) continue;
    for (const sd::ElfSymbol& symbol : symbols) {
      for (unsigned step = 0; step <= steps; ++step) {
        const std::uint64_t address = symbol.address + step;
        if (!source->lookup(address, chain)) {
          SPANPROF_FUZZ_CHECK(chain.empty());
          continue;
        }
        check_chain(chain);
        if (twice) {
          SPANPROF_FUZZ_CHECK(source->lookup(address, again));
          SPANPROF_FUZZ_CHECK(same_chain(chain, again));
        }
      }
    }
  }

  // Naming as spanprof-report does, through the same reader.
  sd::ObjectSymbols object;
  object.set_symbols(symbols);
  object.set_source_lines(dwarf);
  for (const sd::ElfSymbol& symbol : symbols) {
    if (spanprof_fuzz::demangler_may_explode(symbol.name)) continue;
    spanprof::ResolvedFrame frame;
    object.resolve(symbol.address, symbol.address, frame);
    for (std::size_t i = 0; i < frame.inlined_count; ++i) SPANPROF_FUZZ_CHECK(frame.inlined[i].line >= 0);
  }
  Elf64_Ehdr header{};
  std::vector<Elf64_Shdr> sections;
  if (sd::read_elf_headers(bytes, header, sections)) {
    std::uint64_t address = 0;
    (void)sd::elf_segment_address(bytes, header, 0x1000, 0x1000, address);
  }
  const std::string file_id = sd::elf_htl_hash(bytes);
  SPANPROF_FUZZ_CHECK(file_id.size() == 32 && file_id.find_first_not_of("0123456789abcdef") == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  memory_file = new spanprof_fuzz::MemoryFile("spanprof-fuzz-dwarf");
  spanprof::set_error_handler({});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
