// A hostile object file for the ELF symbolizer: a library replaced on disk under a
// running process, a truncated download, or a file made to hurt the reader.
//
// Input: one byte of options (bit 0: read .dynsym too, bit 1: relocate by a load
// bias), then the file. The file goes through both ways the symbolizer reads an
// image: from a file with pread (a memfd, through its /proc/self/fd path, as
// load_elf_function_symbols() opens any object) and from memory (as the vDSO is
// read). The same bytes are also read as a block of ELF notes.
//
// Invariants: both ways agree; a function table is sorted with one symbol per
// address and each symbol is found at its own address; names are non-empty, free
// of NULs and inside the file; what is kept stays proportional to the file (one
// .symtab and one .dynsym, so at most two symbols per 24 bytes, and at most
// elf_max_name_bytes_per_file_byte bytes of names per byte); a build id is
// lowercase hex.
#include "fuzz_support.hpp"

#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace sd = spanprof::detail;

// Set once, in LLVMFuzzerInitialize.
const spanprof_fuzz::MemoryFile* memory_file = nullptr;

bool is_lower_hex(const std::string& text) {
  for (const char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

void check_symbols(const std::vector<sd::ElfSymbol>& symbols, std::size_t file_size) {
  std::size_t name_bytes = 0;
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    const sd::ElfSymbol& symbol = symbols[i];
    SPANPROF_FUZZ_CHECK(i == 0 || symbols[i - 1].address < symbol.address);
    SPANPROF_FUZZ_CHECK(!symbol.name.empty() && symbol.name.size() < file_size);
    SPANPROF_FUZZ_CHECK(symbol.name.find('\0') == std::string::npos);
    SPANPROF_FUZZ_CHECK(sd::find_elf_symbol(symbols, symbol.address, symbol.address) == i);
    name_bytes += symbol.name.size();
  }
  SPANPROF_FUZZ_CHECK(symbols.size() <= 2 * (file_size / sizeof(Elf64_Sym)));
  SPANPROF_FUZZ_CHECK(name_bytes <= sd::elf_max_name_bytes_per_file_byte * file_size);
}

void fuzz_one(std::string_view unit) {
  spanprof_fuzz::Input input(unit);
  const std::uint8_t options = input.byte();
  const bool include_dynsym = (options & 1) != 0;
  const std::uintptr_t bias = (options & 2) != 0 ? 0x7f0000000000u : 0;
  const std::string_view image = input.rest();

  memory_file->write(image);
  std::vector<sd::ElfSymbol> from_file;
  const spanprof::Status from_file_read = sd::load_elf_function_symbols(memory_file->path(), bias, from_file);
  const bool file_ok = from_file_read.is_ok();
  const std::string& file_error = from_file_read.message();
  SPANPROF_FUZZ_CHECK(file_ok ? file_error.empty() : (!file_error.empty() && from_file.empty()));

  const sd::ElfMemoryBytes in_memory(image.data(), image.size());
  std::vector<sd::ElfSymbol> from_memory;
  sd::ElfImageInfo info;
  const spanprof::Status from_memory_read = sd::load_elf_symbols_from(in_memory, bias, include_dynsym, from_memory, info);
  const bool memory_ok = from_memory_read.is_ok();
  const std::string& memory_error = from_memory_read.message();
  SPANPROF_FUZZ_CHECK(is_lower_hex(info.build_id) && info.build_id.size() % 2 == 0 &&
                      info.build_id.size() <= 2 * image.size());
  if (include_dynsym) {
    SPANPROF_FUZZ_CHECK(memory_ok == file_ok);
    if (!memory_ok) SPANPROF_FUZZ_CHECK(memory_error == file_error);
  }
  if (memory_ok) {
    sd::finalize_elf_symbols(from_memory);
    check_symbols(from_memory, image.size());
    if (include_dynsym) {
      SPANPROF_FUZZ_CHECK(from_memory.size() == from_file.size());
      for (std::size_t i = 0; i < from_memory.size(); ++i)
        SPANPROF_FUZZ_CHECK(from_memory[i].address == from_file[i].address &&
                            from_memory[i].name == from_file[i].name && from_memory[i].size == from_file[i].size);
    }
    // What resolve() does with the symbol a sample lands in, for a few of them.
    for (std::size_t i = 0; i < from_memory.size() && i < 4; ++i) {
      if (spanprof_fuzz::demangler_may_explode(from_memory[i].name)) continue;
      const std::string shown = sd::strip_clone_suffixes(sd::demangle_symbol(from_memory[i].name));
      SPANPROF_FUZZ_CHECK(!shown.empty() || from_memory[i].name.empty());
    }
  }

  for (const std::uint64_t alignment : {4u, 8u}) {
    const std::string id =
        sd::find_gnu_build_id(reinterpret_cast<const unsigned char*>(image.data()), image.size(), alignment);
    SPANPROF_FUZZ_CHECK(is_lower_hex(id) && id.size() % 2 == 0 && id.size() <= 2 * image.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  memory_file = new spanprof_fuzz::MemoryFile("spanprof-fuzz-elf");
  // The reader's own errors are expected here by the million.
  spanprof::set_error_handler({});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
