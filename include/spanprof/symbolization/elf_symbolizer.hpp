// The default Symbolizer: reads the ELF symbol tables of the objects loaded in
// this process, in-process and without external tools.
//
// Object files are treated as untrusted input. They can be truncated, replaced
// under a running process or deliberately hostile, so every offset read from
// them is checked against the real size before it is used, and the file is
// read with pread rather than mmap (a file shrinking under a mapping would
// SIGBUS the process).
#ifndef SPANPROF_SYMBOLIZATION_ELF_SYMBOLIZER_HPP_
#define SPANPROF_SYMBOLIZATION_ELF_SYMBOLIZER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/base/loader_lock_gate.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <thread>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// One function symbol, already relocated to its runtime address.
struct ElfSymbol {
  std::uintptr_t address = 0;  // load bias + st_value
  std::uint64_t size = 0;      // st_size; 0 means "up to the next symbol"
  std::string name;            // as in the symbol table (mangled)
  std::string demangled;       // filled on first use by ElfSymbolizer; loaders leave it empty
  std::uint8_t binding = STB_GLOBAL;
};

// What a load learned about the image besides its symbols.
struct ElfImageInfo {
  bool has_symtab = false;  // a non-empty .symtab was present (else a debug file may help)
  std::string build_id;     // lowercase hex of the NT_GNU_BUILD_ID note, empty if none
};

// Random access to an ELF image, either a file or memory (the vDSO).
class ElfBytes {
 public:
  virtual ~ElfBytes() = default;
  virtual std::uint64_t size() const noexcept = 0;
  // Copies [offset, offset + length); false when that is not entirely inside the image.
  virtual bool read(std::uint64_t offset, void* out, std::size_t length) const noexcept = 0;
};

// The most bytes of symbol names one image may yield per byte of its size.
inline constexpr std::uint64_t elf_max_name_bytes_per_file_byte = 64;

// True when [offset, offset + length) lies inside [0, total), without overflowing.
constexpr bool elf_range_fits(std::uint64_t offset, std::uint64_t length, std::uint64_t total) noexcept {
  return length <= total && offset <= total - length;
}

class ElfFileBytes final : public ElfBytes {
 public:
  ElfFileBytes() = default;
  ElfFileBytes(const ElfFileBytes&) = delete;
  ElfFileBytes& operator=(const ElfFileBytes&) = delete;
  ~ElfFileBytes() override {
    if (fd_ >= 0) ::close(fd_);
  }

  // On failure `error` says why; it may allocate, so callers catch bad_alloc.
  bool open(const std::string& path, std::string& error) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      error = std::string("cannot open: ") + std::strerror(errno);
      return false;
    }
    struct stat status {};
    if (::fstat(fd_, &status) != 0) {
      error = std::string("cannot stat: ") + std::strerror(errno);
      return false;
    }
    // A FIFO or device would block or lie about its size.
    if (!S_ISREG(status.st_mode)) {
      error = "not a regular file";
      return false;
    }
    size_ = static_cast<std::uint64_t>(status.st_size);
    return true;
  }

  std::uint64_t size() const noexcept override { return size_; }

  bool read(std::uint64_t offset, void* out, std::size_t length) const noexcept override {
    if (fd_ < 0 || !elf_range_fits(offset, length, size_)) return false;
    auto* cursor = static_cast<char*>(out);
    while (length > 0) {
      const ssize_t got = ::pread(fd_, cursor, length, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      // 0 means the file shrank after fstat: treat it like any truncation.
      if (got <= 0) return false;
      cursor += got;
      offset += static_cast<std::uint64_t>(got);
      length -= static_cast<std::size_t>(got);
    }
    return true;
  }

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

class ElfMemoryBytes final : public ElfBytes {
 public:
  ElfMemoryBytes(const void* data, std::size_t size) noexcept
      : data_(static_cast<const unsigned char*>(data)), size_(size) {}

  std::uint64_t size() const noexcept override { return size_; }

  bool read(std::uint64_t offset, void* out, std::size_t length) const noexcept override {
    if (data_ == nullptr || !elf_range_fits(offset, length, size_)) return false;
    if (length != 0) std::memcpy(out, data_ + offset, length);
    return true;
  }

 private:
  const unsigned char* data_;
  std::size_t size_;
};

inline std::string hex_lowercase(const unsigned char* data, std::size_t size) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    text.push_back(digits[data[i] >> 4]);
    text.push_back(digits[data[i] & 0xf]);
  }
  return text;
}

// Finds NT_GNU_BUILD_ID in a block of ELF notes. Notes pad name and descriptor to
// the section's alignment, which is 8 for some toolchains' notes, else 4.
// The bytes of the NT_GNU_BUILD_ID note in `notes`: {nullptr, 0} if none. Allocates
// nothing (it runs under the loader lock, see ElfSymbolizer::scan_one).
inline std::pair<const unsigned char*, std::size_t> find_gnu_build_id_bytes(const unsigned char* notes,
                                                                          std::size_t size,
                                                                          std::uint64_t alignment) noexcept {
  const std::uint64_t align = alignment == 8 ? 8 : 4;
  const auto padded = [align](std::uint64_t n) { return (n + align - 1) / align * align; };
  std::uint64_t pos = 0;
  while (elf_range_fits(pos, sizeof(Elf64_Nhdr), size)) {
    Elf64_Nhdr header;
    std::memcpy(&header, notes + pos, sizeof header);
    const std::uint64_t name_at = pos + sizeof header;
    const std::uint64_t desc_at = name_at + padded(header.n_namesz);
    if (!elf_range_fits(name_at, header.n_namesz, size) || !elf_range_fits(desc_at, header.n_descsz, size)) break;
    if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 && std::memcmp(notes + name_at, "GNU", 4) == 0) {
      return {notes + desc_at, static_cast<std::size_t>(header.n_descsz)};
    }
    pos = desc_at + padded(header.n_descsz);
  }
  return {nullptr, 0};
}

inline std::string find_gnu_build_id(const unsigned char* notes, std::size_t size, std::uint64_t alignment) {
  const auto [bytes, length] = find_gnu_build_id_bytes(notes, size, alignment);
  return bytes != nullptr ? hex_lowercase(bytes, length) : std::string();
}

// Lower sorts first: among aliases at one address (write, __write, __libc_write)
// the name a user wrote in source is the one with fewest leading underscores,
// and public bindings beat local ones.
inline bool preferred_alias(const ElfSymbol& a, const ElfSymbol& b) noexcept {
  const auto underscores = [](const std::string& s) { return s.find_first_not_of('_'); };
  const auto binding_rank = [](std::uint8_t binding) {
    return binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : binding == STB_LOCAL ? 2 : 3;
  };
  if (underscores(a.name) != underscores(b.name)) return underscores(a.name) < underscores(b.name);
  if (binding_rank(a.binding) != binding_rank(b.binding)) return binding_rank(a.binding) < binding_rank(b.binding);
  return a.name < b.name;
}

// Sorts by address and keeps one symbol per address, so lookup is a binary search.
inline void finalize_elf_symbols(std::vector<ElfSymbol>& symbols) {
  std::sort(symbols.begin(), symbols.end(), [](const ElfSymbol& a, const ElfSymbol& b) {
    if (a.address != b.address) return a.address < b.address;
    return preferred_alias(a, b);
  });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (kept != 0 && symbols[kept - 1].address == symbols[i].address) {
      // A sized alias tells us where the function ends even if the preferred one does not.
      symbols[kept - 1].size = std::max(symbols[kept - 1].size, symbols[i].size);
      continue;
    }
    if (kept != i) symbols[kept] = std::move(symbols[i]);
    ++kept;
  }
  symbols.resize(kept);
}

// Index of the symbol covering `address`, or npos. A symbol without a size covers
// up to the next symbol, but never reaches back before `region_start` (the
// containing segment): a stray size-0 symbol must not swallow a whole segment.
inline std::size_t find_elf_symbol(const std::vector<ElfSymbol>& symbols, std::uintptr_t address,
                                   std::uintptr_t region_start) noexcept {
  constexpr std::size_t npos = static_cast<std::size_t>(-1);
  const auto after = std::upper_bound(symbols.begin(), symbols.end(), address,
                                      [](std::uintptr_t a, const ElfSymbol& s) { return a < s.address; });
  if (after == symbols.begin()) return npos;
  const auto& candidate = *(after - 1);
  const bool covers = candidate.size != 0 ? address - candidate.address < candidate.size
                                          : candidate.address >= region_start;
  return covers ? static_cast<std::size_t>(after - 1 - symbols.begin()) : npos;
}

// Appends the STT_FUNC and STT_GNU_IFUNC symbols of .symtab (and of .dynsym when
// `include_dynsym`) to `out`, unsorted. Returns false with `error` set when the
// image is not a readable little ELF64 of this machine's byte order or any
// offset it needs points outside the image; `out` may then hold a partial list.
inline bool load_elf_symbols_from(const ElfBytes& bytes, std::uintptr_t bias, bool include_dynsym,
                                  std::vector<ElfSymbol>& out, ElfImageInfo& info, std::string& error) {
  const std::uint64_t image_size = bytes.size();
  Elf64_Ehdr header;
  if (!bytes.read(0, &header, sizeof header)) {
    error = "file too small for an ELF header (" + std::to_string(image_size) + " bytes)";
    return false;
  }
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    error = "not an ELF file (bad magic)";
    return false;
  }
  if (header.e_ident[EI_CLASS] != ELFCLASS64) {
    error = "not a 64-bit ELF file";
    return false;
  }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  constexpr unsigned char native_data = ELFDATA2MSB;
#else
  constexpr unsigned char native_data = ELFDATA2LSB;
#endif
  if (header.e_ident[EI_DATA] != native_data) {
    error = "ELF byte order differs from this machine";
    return false;
  }
  if (header.e_shoff == 0) {
    error = "no section header table (stripped with sstrip?)";
    return false;
  }
  if (header.e_shentsize != sizeof(Elf64_Shdr)) {
    error = "unexpected section header size " + std::to_string(header.e_shentsize);
    return false;
  }

  std::uint64_t section_count = header.e_shnum;
  if (section_count == 0) {
    // Extended numbering: more than 0xff00 sections, the count lives in section 0.
    Elf64_Shdr first;
    if (!bytes.read(header.e_shoff, &first, sizeof first)) {
      error = "section header table offset " + std::to_string(header.e_shoff) + " is beyond the end of the file";
      return false;
    }
    section_count = first.sh_size;
  }
  if (section_count > image_size / sizeof(Elf64_Shdr) ||
      !elf_range_fits(header.e_shoff, section_count * sizeof(Elf64_Shdr), image_size)) {
    error = "section header table (offset " + std::to_string(header.e_shoff) + ", " +
            std::to_string(section_count) + " entries) extends beyond the end of the file (" +
            std::to_string(image_size) + " bytes)";
    return false;
  }
  std::vector<Elf64_Shdr> sections(static_cast<std::size_t>(section_count));
  if (!bytes.read(header.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr))) {
    error = "cannot read the section header table";
    return false;
  }

  const auto read_section = [&](const Elf64_Shdr& section, auto& buffer) {
    using Element = typename std::decay_t<decltype(buffer)>::value_type;
    if (!elf_range_fits(section.sh_offset, section.sh_size, image_size)) return false;
    buffer.resize(static_cast<std::size_t>(section.sh_size / sizeof(Element)));
    return bytes.read(section.sh_offset, buffer.data(), buffer.size() * sizeof(Element));
  };

  // Section headers may all name the same bytes. Real note sections never
  // overlap, so more note bytes than the file holds means a file made to be read
  // over and over (time growing with its square): the build id is optional, stop.
  std::uint64_t note_bytes_left = image_size;
  for (const auto& section : sections) {
    if (section.sh_type != SHT_NOTE || !info.build_id.empty()) continue;
    std::vector<unsigned char> notes;
    if (!read_section(section, notes)) {
      error = "note section extends beyond the end of the file";
      return false;
    }
    if (notes.size() > note_bytes_left) break;
    note_bytes_left -= notes.size();
    info.build_id = find_gnu_build_id(notes.data(), notes.size(), section.sh_addralign);
  }

  // Every symbol gets its own copy of its name, and any number of entries may
  // point at one long string: without a bound a few KiB of file turn into GiB of
  // names. Each symbol has its own 24-byte entry in the file, so real files keep
  // (average name length / 24) bytes per byte of file: a few for C++.
  std::uint64_t name_bytes_left = image_size > UINT64_MAX / elf_max_name_bytes_per_file_byte
                                      ? UINT64_MAX
                                      : image_size * elf_max_name_bytes_per_file_byte;
  bool read_symtab = false, read_dynsym = false;
  std::vector<Elf64_Sym> entries;
  std::vector<char> names;
  for (const auto& section : sections) {
    const bool is_symtab = section.sh_type == SHT_SYMTAB;
    if (!is_symtab && !(include_dynsym && section.sh_type == SHT_DYNSYM)) continue;
    // The gABI allows one of each. More headers, perhaps all naming one table,
    // would only repeat symbols: time and memory would grow with their square.
    bool& already_read = is_symtab ? read_symtab : read_dynsym;
    if (already_read) continue;
    already_read = true;
    const char* const table = is_symtab ? ".symtab" : ".dynsym";
    if (section.sh_entsize != sizeof(Elf64_Sym)) {
      error = std::string(table) + " has entry size " + std::to_string(section.sh_entsize);
      return false;
    }
    if (section.sh_link >= sections.size() || sections[section.sh_link].sh_type != SHT_STRTAB) {
      error = std::string(table) + " links to section " + std::to_string(section.sh_link) +
              ", which is not a string table";
      return false;
    }
    if (!read_section(section, entries)) {
      error = std::string(table) + " extends beyond the end of the file";
      return false;
    }
    if (!read_section(sections[section.sh_link], names)) {
      error = std::string(table) + "'s string table extends beyond the end of the file";
      return false;
    }
    if (is_symtab && !entries.empty()) info.has_symtab = true;
    for (const auto& entry : entries) {
      const unsigned type = ELF64_ST_TYPE(entry.st_info);
      if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
      if (entry.st_shndx == SHN_UNDEF || entry.st_value == 0) continue;
      if (entry.st_name >= names.size()) {
        error = std::string(table) + " has a symbol name offset outside its string table";
        return false;
      }
      const char* name = names.data() + entry.st_name;
      const auto* end = static_cast<const char*>(std::memchr(name, '\0', names.size() - entry.st_name));
      if (end == nullptr) {
        error = std::string(table) + " has an unterminated symbol name";
        return false;
      }
      if (end == name) continue;
      const auto name_size = static_cast<std::uint64_t>(end - name);
      if (name_size > name_bytes_left) {
        error = std::string(table) + "'s symbol names add up to more than " +
                std::to_string(elf_max_name_bytes_per_file_byte) + " times the size of the file";
        return false;
      }
      name_bytes_left -= name_size;
      ElfSymbol symbol;
      symbol.address = bias + static_cast<std::uintptr_t>(entry.st_value);
      symbol.size = entry.st_size;
      symbol.name.assign(name, end);
      symbol.binding = static_cast<std::uint8_t>(ELF64_ST_BIND(entry.st_info));
      out.push_back(std::move(symbol));
    }
  }
  return true;
}

// Test and tooling entry point: the function symbols of one ELF64 file, sorted by
// address with one symbol per address, relocated by `bias` (0 gives link-time
// addresses). Reads .symtab and .dynsym of that file only, no separate debug
// file; leaves ElfSymbol::demangled empty. Returns false with a human-readable
// `error` when the file cannot be opened or is not a valid ELF64; never throws.
inline bool load_elf_function_symbols(const std::string& path, std::uintptr_t bias, std::vector<ElfSymbol>& out,
                                      std::string& error) noexcept {
  SPANPROF_TRY {
    out.clear();
    error.clear();
    ElfFileBytes file;
    ElfImageInfo info;
    if (!file.open(path, error) || !load_elf_symbols_from(file, bias, true, out, info, error)) {
      out.clear();
      return false;
    }
    finalize_elf_symbols(out);
    return true;
  } SPANPROF_CATCH_ALL {
    out.clear();
    SPANPROF_TRY {
      error = "out of memory while reading symbols";
    } SPANPROF_CATCH_ALL {
    }
    return false;
  }
}

// The demangled form of a C++ symbol name, or the name itself when it is not a
// mangled C++ name. Clone suffixes (".cold", ".isra.0") come out as "[clone ...]"
// (strip_clone_suffixes removes them).
inline std::string demangle_symbol(const std::string& name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return name;
  // The demangler recurses over the name; an absurd one from a hostile file is
  // not worth the stack.
  constexpr std::size_t max_demangled_input = 16 * 1024;
  if (name.size() > max_demangled_input) return name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                   std::free);
  if (status != 0 || demangled == nullptr) return name;
  return std::string(demangled.get());
}

// The name a function is known by, without the suffixes GCC and Clang give the
// copies they make of it: " [clone .constprop.0]" in a demangled C++ name,
// ".constprop.0", ".isra.0", ".part.0", ".cold", ".lto_priv.0", ".localalias",
// ".llvm.123" on a plain one. Without this one function splits into several
// entries in a flame graph (pprof strips them; Pyroscope and Grafana do not).
inline std::string strip_clone_suffixes(std::string name) {
  for (;;) {
    constexpr std::string_view clone = " [clone ";
    if (name.size() > clone.size() && name.back() == ']') {
      const std::size_t at = name.rfind(clone);
      if (at != std::string::npos && at > 0) {
        name.resize(at);
        continue;
      }
    }
    // ".<suffix>" or ".<suffix>.<digits>" at the end of a plain symbol name.
    std::size_t end = name.size();
    while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
    if (end < name.size() && end > 0 && name[end - 1] == '.') --end;  // a ".N" after the suffix
    else end = name.size();
    bool stripped = false;
    for (const std::string_view suffix : {".constprop", ".isra", ".part", ".cold", ".lto_priv", ".localalias",
                                          ".clone", ".llvm", ".specialized"}) {
      if (end > suffix.size() && std::string_view(name).substr(end - suffix.size(), suffix.size()) == suffix) {
        name.resize(end - suffix.size());
        stripped = true;
        break;
      }
    }
    if (!stripped) return name;
  }
}

// Objects are found with dl_iterate_phdr; each executable PT_LOAD segment is a
// Module. Symbols are read the first time an address lands in an object, so a
// process pays only for the libraries it is actually sampled in. One instance
// serves one thread; it takes no locks.
class ElfSymbolizer final : public Symbolizer {
 public:
  ElfSymbolizer() = default;
  ElfSymbolizer(const ElfSymbolizer&) = delete;
  ElfSymbolizer& operator=(const ElfSymbolizer&) = delete;

  ResolvedFrame resolve(std::uintptr_t address) noexcept override {
    SPANPROF_TRY {
      if (!scanned_) rescan();
      if (const auto cached = cache_.find(address); cached != cache_.end()) return cached->second;
      const Range* range = find_range(address);
      if (range == nullptr) {
        // Probably a library dlopen'ed since the last scan. Rescanning costs a walk
        // over all loaded objects, so garbage addresses may not trigger it often.
        const auto now = std::chrono::steady_clock::now();
        if (now - last_scan_ < std::chrono::seconds(1)) return {};
        rescan();
        range = find_range(address);
        if (range == nullptr) return {};
      }
      ResolvedFrame frame;
      frame.module = range->module;
      LoadedObject& object = *range->object;
      if (object.state == LoadedObject::State::unloaded) load_symbols(object);
      if (object.state == LoadedObject::State::loaded) {
        const std::size_t index = find_elf_symbol(object.symbols, address, range->module->start);
        if (index != static_cast<std::size_t>(-1)) {
          ElfSymbol& symbol = object.symbols[index];
          // Demangling every symbol up front would dominate load time; most are never sampled.
          if (symbol.demangled.empty()) symbol.demangled = strip_clone_suffixes(demangle_symbol(symbol.name));
          frame.function = symbol.demangled;
          frame.system_name = symbol.name;
        }
      }
      if (cache_.size() >= max_cached_addresses) cache_.clear();
      cache_.emplace(address, frame);
      return frame;
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "ELF symbolizer failed internally (out of memory?)");
      return {};
    }
  }

  void refresh() noexcept override {
    SPANPROF_TRY {
      rescan();
      // Callers were told views die here, so objects kept alive for them can go.
      retired_.clear();
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "ELF symbolizer failed to rescan loaded objects (out of memory?)");
    }
  }

  // For diagnostics and tests: the executable segments known since the last
  // scan (the first resolve() performs the first scan).
  std::vector<Module> modules() const {
    std::vector<Module> result;
    for (const auto& range : ranges_) result.push_back(*range.module);
    return result;
  }

 private:
  // Bounds memory in a process whose code is large and sampled for days; refilling is cheap.
  static constexpr std::size_t max_cached_addresses = std::size_t{1} << 20;
  // A process that dlopens and dlcloses plugins all day, with nobody calling
  // refresh(), must not keep every symbol table it ever read.
  static constexpr std::size_t max_retired_objects = 32;

  struct LoadedObject {
    enum class State { unloaded, loaded, failed };
    std::string loader_name;  // dlpi_name; with the bias, identifies the object across rescans
    std::uintptr_t bias = 0;
    std::string open_path;    // what to read: the file, or /proc/self/exe for the main program
    std::string display_path; // Module::path, also the key for "reported once"
    const unsigned char* memory_image = nullptr;  // the vDSO has no file; its image is read in place
    std::size_t memory_image_size = 0;
    std::string build_id;     // from the in-memory notes: what is really running
    std::vector<Module> modules;  // never resized after a scan: frames point into it
    State state = State::unloaded;
    std::vector<ElfSymbol> symbols;  // sorted, one per address
  };

  struct Range {
    std::uintptr_t start;
    std::uintptr_t limit;
    const Module* module;
    LoadedObject* object;
  };

  // What dl_iterate_phdr showed, processed after the loader lock is released.
  struct ScannedObject {
    std::string loader_name;
    std::uintptr_t bias = 0;
    bool is_main_program = false;
    const unsigned char* memory_image = nullptr;
    std::size_t memory_image_size = 0;
    std::string build_id;
    std::vector<Module> modules;  // path still empty
  };

  // The same, as the loader callback copies it: into room reserved before the
  // scan, so that under the loader lock nothing allocates and nothing waits. A
  // thread whose sample signal arrived inside malloc holds the allocator's lock
  // while its handler's stack walker (libunwind) waits for the loader lock; a
  // callback that allocated under that lock closed the circle (64 threads under
  // CPU and heap profiling deadlocked).
  struct CopiedSegment {
    std::uintptr_t start = 0;
    std::uintptr_t limit = 0;
    std::uint64_t file_offset = 0;
  };
  struct CopiedObject {
    std::size_t name_at = 0;  // in ScanState::names
    std::size_t name_size = 0;
    std::uintptr_t bias = 0;
    bool is_main_program = false;
    const unsigned char* memory_image = nullptr;
    std::size_t memory_image_size = 0;
    unsigned char build_id[64] = {};
    std::size_t build_id_size = 0;
    std::size_t first_segment = 0;  // in ScanState::segments
    std::size_t segment_count = 0;
  };

  struct ScanState {
    // Filled only within their reserved capacity; what would not fit is counted,
    // and the scan runs again with that much room.
    std::vector<CopiedObject> objects;
    std::vector<CopiedSegment> segments;
    std::string names;
    std::size_t objects_wanted = 0;
    std::size_t segments_wanted = 0;
    std::size_t names_wanted = 0;
    std::uintptr_t vdso_header = 0;
    std::uintptr_t page_size = 4096;
    bool first = true;

    bool fits() const noexcept {
      return objects_wanted <= objects.capacity() && segments_wanted <= segments.capacity() &&
             names_wanted <= names.capacity();
    }
  };

  static int scan_one(dl_phdr_info* info, std::size_t, void* data) noexcept {
    auto& state = *static_cast<ScanState*>(data);
    const bool first = state.first;
    state.first = false;
    CopiedObject object;
    const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
    object.name_size = std::strlen(name);
    object.bias = static_cast<std::uintptr_t>(info->dlpi_addr);
    object.is_main_program = first && object.name_size == 0;
    std::size_t executable = 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& segment = info->dlpi_phdr[i];
      if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X) != 0 && segment.p_memsz != 0) ++executable;
    }
    const bool room = state.objects.size() < state.objects.capacity() &&
                      state.segments.capacity() - state.segments.size() >= executable &&
                      state.names.capacity() - state.names.size() >= object.name_size;
    state.objects_wanted += 1;
    state.segments_wanted += executable;
    state.names_wanted += object.name_size;
    if (!room) return 0;  // counted: the next scan has room for it
    object.first_segment = state.segments.size();
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& segment = info->dlpi_phdr[i];
      const std::uintptr_t start = object.bias + segment.p_vaddr;
      if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X) != 0 && segment.p_memsz != 0) {
        state.segments.push_back(CopiedSegment{start, start + segment.p_memsz, segment.p_offset});
        ++object.segment_count;
      }
      if (segment.p_type == PT_LOAD && state.vdso_header != 0 && state.vdso_header >= start &&
          state.vdso_header - start < segment.p_memsz) {
        // The vDSO's section headers sit past p_filesz but inside the last mapped
        // page, and whole pages are always mapped.
        const std::uintptr_t end = start + segment.p_memsz;
        const std::uintptr_t mapped_end = (end + state.page_size - 1) / state.page_size * state.page_size;
        object.memory_image = reinterpret_cast<const unsigned char*>(state.vdso_header);
        object.memory_image_size = mapped_end - state.vdso_header;
      }
      // Notes are read here, under the loader lock, so a concurrent dlclose cannot unmap them.
      if (segment.p_type == PT_NOTE && object.build_id_size == 0) {
        const auto [bytes, length] = find_gnu_build_id_bytes(reinterpret_cast<const unsigned char*>(start),
                                                             static_cast<std::size_t>(segment.p_filesz), segment.p_align);
        object.build_id_size = std::min(length, sizeof object.build_id);
        if (bytes != nullptr) std::memcpy(object.build_id, bytes, object.build_id_size);
      }
    }
    object.name_at = state.names.size();
    state.names.append(name, object.name_size);
    state.objects.push_back(object);
    return 0;
  }

  // Every loaded object with executable code and a file (or image) to read it from.
  static std::vector<ScannedObject> scan_loaded_objects() {
    ScanState state;
    state.vdso_header = static_cast<std::uintptr_t>(::getauxval(AT_SYSINFO_EHDR));
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0) state.page_size = static_cast<std::uintptr_t>(page);
    std::size_t objects = 64, segments = 128, names = 8192;
    for (int attempt = 0;; ++attempt) {
      state.objects.clear();
      state.segments.clear();
      state.names.clear();
      state.objects.reserve(objects);
      state.segments.reserve(segments);
      state.names.reserve(names);
      state.objects_wanted = state.segments_wanted = state.names_wanted = 0;
      state.first = true;
      // Not while a fork is under way (base/loader_lock_gate.hpp): wait it out.
      while (!loader_lock_gate().enter()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ::dl_iterate_phdr(&ElfSymbolizer::scan_one, &state);
      loader_lock_gate().leave();
      // Objects loaded between two scans: a few attempts with room to spare, then
      // whatever fitted (the next rescan finds the rest).
      if (state.fits() || attempt == 3) break;
      objects = state.objects_wanted * 2;
      segments = state.segments_wanted * 2;
      names = state.names_wanted * 2;
    }
    std::vector<ScannedObject> scanned;
    scanned.reserve(state.objects.size());
    for (const CopiedObject& copied : state.objects) {
      const bool has_source =
          copied.is_main_program || copied.memory_image != nullptr || copied.name_size != 0;
      if (copied.segment_count == 0 || !has_source) continue;
      ScannedObject object;
      object.loader_name = state.names.substr(copied.name_at, copied.name_size);
      object.bias = copied.bias;
      object.is_main_program = copied.is_main_program;
      object.memory_image = copied.memory_image;
      object.memory_image_size = copied.memory_image_size;
      object.build_id = hex_lowercase(copied.build_id, copied.build_id_size);
      for (std::size_t i = 0; i < copied.segment_count; ++i) {
        const CopiedSegment& segment = state.segments[copied.first_segment + i];
        Module module;
        module.start = segment.start;
        module.limit = segment.limit;
        module.file_offset = segment.file_offset;
        object.modules.push_back(std::move(module));
      }
      scanned.push_back(std::move(object));
    }
    return scanned;
  }

  static std::string real_path_of(const char* path) {
    std::unique_ptr<char, void (*)(void*)> resolved(::realpath(path, nullptr), std::free);
    return resolved ? std::string(resolved.get()) : std::string(path);
  }

  void rescan() {
    scanned_ = true;
    last_scan_ = std::chrono::steady_clock::now();
    std::vector<ScannedObject> scanned_objects = scan_loaded_objects();

    std::vector<std::unique_ptr<LoadedObject>> next;
    next.reserve(scanned_objects.size());
    for (auto& scanned : scanned_objects) {
      const auto same = std::find_if(objects_.begin(), objects_.end(), [&](const auto& existing) {
        return existing && existing->loader_name == scanned.loader_name && existing->bias == scanned.bias &&
               existing->build_id == scanned.build_id && existing->modules.size() == scanned.modules.size() &&
               existing->modules.front().start == scanned.modules.front().start;
      });
      if (same != objects_.end()) {
        next.push_back(std::move(*same));
        continue;
      }
      auto object = std::make_unique<LoadedObject>();
      object->loader_name = std::move(scanned.loader_name);
      object->bias = scanned.bias;
      object->memory_image = scanned.memory_image;
      object->memory_image_size = scanned.memory_image_size;
      object->build_id = std::move(scanned.build_id);
      if (object->memory_image != nullptr) {
        object->display_path = "[vdso]";  // what /proc/self/maps calls it
      } else if (scanned.is_main_program) {
        // Reading through /proc/self/exe still works when the binary was replaced or deleted.
        object->open_path = "/proc/self/exe";
        object->display_path = real_path_of("/proc/self/exe");
      } else {
        object->open_path = object->loader_name;
        object->display_path = real_path_of(object->loader_name.c_str());
      }
      object->modules = std::move(scanned.modules);
      for (auto& module : object->modules) {
        module.path = object->display_path;
        module.build_id = object->build_id;
      }
      next.push_back(std::move(object));
    }

    bool unloaded_any = false;
    for (auto& old : objects_) {
      if (!old) continue;
      unloaded_any = true;
      retired_.push_back(std::move(old));
    }
    objects_ = std::move(next);
    if (retired_.size() > max_retired_objects) {
      retired_.erase(retired_.begin(), retired_.end() - static_cast<std::ptrdiff_t>(max_retired_objects));
    }
    // Cached frames of an unloaded object would name whatever is mapped there next.
    if (unloaded_any) cache_.clear();

    ranges_.clear();
    for (const auto& object : objects_) {
      for (const auto& module : object->modules) {
        ranges_.push_back(Range{module.start, module.limit, &module, object.get()});
      }
    }
    std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  }

  const Range* find_range(std::uintptr_t address) const noexcept {
    const auto after = std::upper_bound(ranges_.begin(), ranges_.end(), address,
                                        [](std::uintptr_t a, const Range& r) { return a < r.start; });
    if (after == ranges_.begin()) return nullptr;
    const Range& candidate = *(after - 1);
    return address < candidate.limit ? &candidate : nullptr;
  }

  void load_symbols(LoadedObject& object) {
    object.state = LoadedObject::State::failed;  // until proven otherwise
    // A path is reported once per build: a fixed file reloaded later gets its chance.
    const std::string failure_key = object.display_path + '\n' + object.build_id;
    if (failed_objects_.count(failure_key) != 0) return;

    std::vector<ElfSymbol> symbols;
    ElfImageInfo info;
    std::string error;
    bool ok = false;
    if (object.memory_image != nullptr) {
      const ElfMemoryBytes image(object.memory_image, object.memory_image_size);
      ok = load_elf_symbols_from(image, object.bias, true, symbols, info, error);
    } else {
      ElfFileBytes file;
      ok = file.open(object.open_path, error) && load_elf_symbols_from(file, object.bias, true, symbols, info, error);
      if (ok && !object.build_id.empty() && !info.build_id.empty() && info.build_id != object.build_id) {
        // Its symbols would be confidently wrong.
        ok = false;
        error = "build id " + info.build_id + " on disk differs from the loaded " + object.build_id +
                " (file replaced since it was loaded?)";
      }
    }
    if (!ok) {
      failed_objects_.insert(failure_key);
      report_error(ErrorCode::symbolization_failed,
                   "cannot read symbols from " + object.display_path + ": " + error);
      return;
    }
    if (!info.has_symtab) add_separate_debug_symbols(object, info, symbols);
    finalize_elf_symbols(symbols);
    object.symbols = std::move(symbols);
    object.state = LoadedObject::State::loaded;
  }

  // Distributions strip .symtab (static and internal functions) into debug
  // packages keyed by build id. Such a file is optional, so its absence or
  // damage is silent: .dynsym still names the exported functions.
  static void add_separate_debug_symbols(const LoadedObject& object, const ElfImageInfo& info,
                                         std::vector<ElfSymbol>& symbols) {
    const std::string& build_id = !object.build_id.empty() ? object.build_id : info.build_id;
    if (build_id.size() < 3) return;
    const std::string path =
        "/usr/lib/debug/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
    ElfFileBytes file;
    std::string error;
    if (!file.open(path, error)) return;
    std::vector<ElfSymbol> debug_symbols;
    ElfImageInfo debug_info;
    if (!load_elf_symbols_from(file, object.bias, false, debug_symbols, debug_info, error)) return;
    if (!debug_info.build_id.empty() && debug_info.build_id != build_id) return;
    symbols.insert(symbols.end(), std::make_move_iterator(debug_symbols.begin()),
                   std::make_move_iterator(debug_symbols.end()));
  }

  std::vector<std::unique_ptr<LoadedObject>> objects_;
  // Unloaded since the last refresh(); frames handed out earlier may still point
  // into them. Only the newest max_retired_objects are kept, so frames of an
  // unloaded object outlive at most that many further unloads.
  std::vector<std::unique_ptr<LoadedObject>> retired_;
  std::vector<Range> ranges_;  // sorted by start
  std::unordered_map<std::uintptr_t, ResolvedFrame> cache_;
  std::unordered_set<std::string> failed_objects_;  // display path + build id, already reported
  bool scanned_ = false;
  std::chrono::steady_clock::time_point last_scan_{};
};

}  // namespace detail

// The default symbolizer: reads the ELF symbol tables of the objects loaded in
// this process. Returns nullptr only when even this small allocation fails.
inline std::unique_ptr<Symbolizer> make_elf_symbolizer() noexcept {
  SPANPROF_TRY {
    return std::make_unique<detail::ElfSymbolizer>();
  } SPANPROF_CATCH_ALL {
    return nullptr;
  }
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SYMBOLIZATION_ELF_SYMBOLIZER_HPP_
