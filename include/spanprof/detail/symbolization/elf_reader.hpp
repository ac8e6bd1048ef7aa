// Reading the function symbols of one ELF image, a file or memory (the vDSO): the
// symbol tables, the build id note, and the sorted list a lookup searches. The
// ELF symbolizer (symbolization/elf_symbolizer.hpp) reads each loaded object with
// it; tests and the fuzz targets call it directly.
//
// Object files are treated as untrusted input. They can be truncated, replaced
// under a running process or deliberately hostile, so every offset read from
// them is checked against the real size before it is used, and the file is
// read with pread rather than mmap (a file shrinking under a mapping would
// SIGBUS the process).
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_ELF_READER_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_ELF_READER_HPP_

#include <spanprof/detail/base/text.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/sha256.hpp>

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// Why an object file cannot be read for symbols.
inline Status elf_failure(std::string_view why) noexcept { return Status(ErrorCode::symbolization_failed, why); }

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

  // A failure says why; it may allocate, so callers catch bad_alloc.
  Status open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      return elf_failure(std::string("cannot open: ") + error_text(errno));
    }
    struct stat status {};
    if (::fstat(fd_, &status) != 0) {
      return elf_failure(std::string("cannot stat: ") + error_text(errno));
    }
    // A FIFO or device would block or lie about its size.
    if (!S_ISREG(status.st_mode)) {
      return elf_failure("not a regular file");
    }
    size_ = static_cast<std::uint64_t>(status.st_size);
    return Status::ok();
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

// OpenTelemetry's id of an executable file (process.executable.build_id.htlhash, as
// the OpenTelemetry eBPF profiler computes it): the first 128 bits of SHA-256 over
// the file's first 4 KiB, its last 4 KiB and its size (64-bit big-endian), in
// lowercase hex. Names a file without a GNU build id too. Empty when unreadable.
inline std::string elf_htl_hash(const ElfBytes& bytes) {
  constexpr std::uint64_t part = 4096;
  const std::uint64_t size = bytes.size();
  const auto length = static_cast<std::size_t>(std::min(size, part));
  unsigned char chunk[part];
  Sha256 sha;
  if (!bytes.read(0, chunk, length)) return {};
  sha.update(chunk, length);
  if (!bytes.read(size - length, chunk, length)) return {};
  sha.update(chunk, length);
  unsigned char size_bytes[8];
  for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<unsigned char>(size >> (56 - 8 * i));
  sha.update(size_bytes, sizeof size_bytes);
  const Sha256::Digest digest = sha.finish();
  return hex_lowercase(digest.data(), 16);
}

// Where an object's separate debug file sits under a debug directory, by its GNU
// build id (hex): DIR/.build-id/ab/cdef....debug. Empty for an id too short to be one.
inline std::string build_id_debug_path(const std::string& build_id, const std::string& directory) {
  if (build_id.size() < 3 || directory.empty()) return {};
  return directory + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
}

// A colon-separated list of directories (as SPANPROF_DEBUG_DIRS gives it), empty entries dropped.
inline std::vector<std::string> split_directory_list(const std::string& list) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(':', at), list.size());
    if (end > at) out.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return out;
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

// The ELF header and section header table of a little-endian ELF64 of this machine's
// byte order; a failure when the image is not one or they lie outside it.
inline Status read_elf_headers(const ElfBytes& bytes, Elf64_Ehdr& header, std::vector<Elf64_Shdr>& sections) {
  const std::uint64_t image_size = bytes.size();
  if (!bytes.read(0, &header, sizeof header)) {
    return elf_failure("file too small for an ELF header (" + std::to_string(image_size) + " bytes)");
  }
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    return elf_failure("not an ELF file (bad magic)");
  }
  if (header.e_ident[EI_CLASS] != ELFCLASS64) {
    return elf_failure("not a 64-bit ELF file");
  }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  constexpr unsigned char native_data = ELFDATA2MSB;
#else
  constexpr unsigned char native_data = ELFDATA2LSB;
#endif
  if (header.e_ident[EI_DATA] != native_data) {
    return elf_failure("ELF byte order differs from this machine");
  }
  if (header.e_shoff == 0) {
    return elf_failure("no section header table (stripped with sstrip?)");
  }
  if (header.e_shentsize != sizeof(Elf64_Shdr)) {
    return elf_failure("unexpected section header size " + std::to_string(header.e_shentsize));
  }

  std::uint64_t section_count = header.e_shnum;
  if (section_count == 0) {
    // Extended numbering: more than 0xff00 sections, the count lives in section 0.
    Elf64_Shdr first;
    if (!bytes.read(header.e_shoff, &first, sizeof first)) {
      return elf_failure("section header table offset " + std::to_string(header.e_shoff) + " is beyond the end of the file");
    }
    section_count = first.sh_size;
  }
  if (section_count > image_size / sizeof(Elf64_Shdr) ||
      !elf_range_fits(header.e_shoff, section_count * sizeof(Elf64_Shdr), image_size)) {
    return elf_failure("section header table (offset " + std::to_string(header.e_shoff) + ", " +
            std::to_string(section_count) + " entries) extends beyond the end of the file (" +
            std::to_string(image_size) + " bytes)");
  }
  sections.resize(static_cast<std::size_t>(section_count));
  if (!bytes.read(header.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr))) {
    return elf_failure("cannot read the section header table");
  }
  return Status::ok();
}

// A section's bytes as elements of `buffer`; false when they lie outside the image.
template <class Buffer>
bool read_elf_section(const ElfBytes& bytes, const Elf64_Shdr& section, Buffer& buffer) {
  using Element = typename Buffer::value_type;
  if (!elf_range_fits(section.sh_offset, section.sh_size, bytes.size())) return false;
  buffer.resize(static_cast<std::size_t>(section.sh_size / sizeof(Element)));
  return bytes.read(section.sh_offset, buffer.data(), buffer.size() * sizeof(Element));
}

// The GNU build id (hex) from the note sections; empty when there is none.
inline Status read_elf_build_id(const ElfBytes& bytes, const std::vector<Elf64_Shdr>& sections,
                                std::string& build_id) {
  const std::uint64_t image_size = bytes.size();
  // Section headers may all name the same bytes. Real note sections never
  // overlap, so more note bytes than the file holds means a file made to be read
  // over and over (time growing with its square): the build id is optional, stop.
  std::uint64_t note_bytes_left = image_size;
  for (const auto& section : sections) {
    if (section.sh_type != SHT_NOTE || !build_id.empty()) continue;
    std::vector<unsigned char> notes;
    if (!read_elf_section(bytes, section, notes)) {
      return elf_failure("note section extends beyond the end of the file");
    }
    if (notes.size() > note_bytes_left) break;
    note_bytes_left -= notes.size();
    build_id = find_gnu_build_id(notes.data(), notes.size(), section.sh_addralign);
  }
  return Status::ok();
}

// Opens `path` and reads its ELF header and GNU build id (empty when it has none):
// what finds an object or debug file by build id. A failure when it is not a
// readable ELF64 of this machine.
inline Status open_elf_file(const std::string& path, ElfFileBytes& file, Elf64_Ehdr& header,
                            std::string& build_id) {
  std::vector<Elf64_Shdr> sections;
  if (Status opened = file.open(path); !opened) return opened;
  if (Status read = read_elf_headers(file, header, sections); !read) return read;
  return read_elf_build_id(file, sections, build_id);
}

// The object's own (link-time) address of the loaded executable segment that a
// profile's mapping shows: `file_offset` its p_offset, `size` its p_memsz. The
// object's program headers say it; a debug file's too, except that
// objcopy --only-keep-debug rewrites their offsets, so there the segment is the
// executable one of that size (and of that offset's page alignment).
inline bool elf_segment_address(const ElfBytes& bytes, const Elf64_Ehdr& header, std::uint64_t file_offset,
                                std::uint64_t size, std::uint64_t& address) {
  constexpr std::uint64_t most_segments = 4096;
  if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phnum > most_segments) return false;
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  if (!bytes.read(header.e_phoff, segments.data(), segments.size() * sizeof(Elf64_Phdr))) return false;
  const Elf64_Phdr* same_size = nullptr;
  std::size_t same_size_count = 0;
  for (const Elf64_Phdr& segment : segments) {
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    if (segment.p_offset == file_offset && segment.p_memsz == size && segment.p_filesz != 0) {
      address = segment.p_vaddr;
      return true;
    }
    const std::uint64_t align = segment.p_align > 1 ? segment.p_align : 1;
    if (segment.p_memsz == size && segment.p_vaddr % align == file_offset % align) {
      same_size = &segment;
      ++same_size_count;
    }
  }
  if (same_size_count != 1) return false;  // none, or no telling which
  address = same_size->p_vaddr;
  return true;
}

// Appends the STT_FUNC and STT_GNU_IFUNC symbols of .symtab (and of .dynsym when
// `include_dynsym`) to `out`, unsorted. Returns a failure when the
// image is not a readable little ELF64 of this machine's byte order or any
// offset it needs points outside the image; `out` may then hold a partial list.
inline Status load_elf_symbols_from(const ElfBytes& bytes, std::uintptr_t bias, bool include_dynsym,
                                    std::vector<ElfSymbol>& out, ElfImageInfo& info) {
  Elf64_Ehdr header;
  std::vector<Elf64_Shdr> sections;
  if (Status read = read_elf_headers(bytes, header, sections); !read) return read;
  if (Status read = read_elf_build_id(bytes, sections, info.build_id); !read) return read;
  const std::uint64_t image_size = bytes.size();
  const auto read_section = [&](const Elf64_Shdr& section, auto& buffer) { return read_elf_section(bytes, section, buffer); };

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
      return elf_failure(std::string(table) + " has entry size " + std::to_string(section.sh_entsize));
    }
    if (section.sh_link >= sections.size() || sections[section.sh_link].sh_type != SHT_STRTAB) {
      return elf_failure(std::string(table) + " links to section " + std::to_string(section.sh_link) +
              ", which is not a string table");
    }
    if (!read_section(section, entries)) {
      return elf_failure(std::string(table) + " extends beyond the end of the file");
    }
    if (!read_section(sections[section.sh_link], names)) {
      return elf_failure(std::string(table) + "'s string table extends beyond the end of the file");
    }
    if (is_symtab && !entries.empty()) info.has_symtab = true;
    for (const auto& entry : entries) {
      const unsigned type = ELF64_ST_TYPE(entry.st_info);
      if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
      if (entry.st_shndx == SHN_UNDEF || entry.st_value == 0) continue;
      if (entry.st_name >= names.size()) {
        return elf_failure(std::string(table) + " has a symbol name offset outside its string table");
      }
      const char* name = names.data() + entry.st_name;
      const auto* end = static_cast<const char*>(std::memchr(name, '\0', names.size() - entry.st_name));
      if (end == nullptr) {
        return elf_failure(std::string(table) + " has an unterminated symbol name");
      }
      if (end == name) continue;
      const auto name_size = static_cast<std::uint64_t>(end - name);
      if (name_size > name_bytes_left) {
        return elf_failure(std::string(table) + "'s symbol names add up to more than " +
                std::to_string(elf_max_name_bytes_per_file_byte) + " times the size of the file");
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
  return Status::ok();
}

// Test and tooling entry point: the function symbols of one ELF64 file, sorted by
// address with one symbol per address, relocated by `bias` (0 gives link-time
// addresses). Reads .symtab and .dynsym of that file only, no separate debug
// file; leaves ElfSymbol::demangled empty. Returns a failure that says why when the
// file cannot be opened or is not a valid ELF64; never throws.
inline Status load_elf_function_symbols(const std::string& path, std::uintptr_t bias,
                                        std::vector<ElfSymbol>& out) noexcept {
  SPANPROF_TRY {
    out.clear();
    ElfFileBytes file;
    ElfImageInfo info;
    Status read = file.open(path);
    if (read) read = load_elf_symbols_from(file, bias, true, out, info);
    if (!read) {
      out.clear();
      return read;
    }
    finalize_elf_symbols(out);
    return Status::ok();
  } SPANPROF_CATCH_ALL {
    out.clear();
    return elf_failure("out of memory while reading symbols");
  }
  return elf_failure("unreachable");  // -fno-exceptions: the try is an if (true)
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_ELF_READER_HPP_
