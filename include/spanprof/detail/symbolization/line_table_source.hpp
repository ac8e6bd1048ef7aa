// Source lines from an object's DWARF line tables alone (.debug_line), without
// its debug information entries: for a sampled address, its file and line, no
// inlined functions (SPANPROF_WITH_LIBDW=1, for libelf).
//
// A distribution's debug file keeps its sections compressed, and libdw inflates
// every one of them at open, where a profile needs the lines of a few frames. This
// reader inflates the line tables and the strings their file names use, indexes
// each sequence's address range and resume points once, and for an address runs
// the part of its sequence from the nearest resume point: what it keeps is the
// line tables, one entry per sequence and a few per sequence's thousand rows
// (docs/source-lines.md has the figures). The line program itself is read by
// line_program.hpp.
//
// The file is hostile input: a section is read only when the file holds all of
// it, or, compressed, when its claimed size is one its bytes can inflate to, and
// never over max_section_bytes: memory is given to a section's bytes, not its claim.
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_LINE_TABLE_SOURCE_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_LINE_TABLE_SOURCE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/symbolization/line_program.hpp>
#include <spanprof/detail/symbolization/source_lines.hpp>

#if SPANPROF_WITH_LIBDW

#include <dwarf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class LineTableSource final : public SourceLines {
 public:
  // The line tables of the object at `path` (GNU build id `build_id`, hex; empty:
  // unknown): its own, else its separate debug file's. Null when none has any.
  static std::unique_ptr<LineTableSource> open_for(const std::string& path, const std::string& build_id,
                                                   const std::vector<std::string>& debug_directories) noexcept {
    return open_first_candidate<LineTableSource>(path, build_id, debug_directories);
  }

  // The line tables of the one file at `path`: for DwarfSource, which reads the
  // same file's units. Null when it has none or is of another build.
  static std::unique_ptr<LineTableSource> open_file(const std::string& path, const std::string& build_id) {
    std::unique_ptr<LineTableSource> source(new LineTableSource());
    source->path_ = path;
    source->build_id_ = build_id;
    if (!source->read_sections({{".debug_line", &source->line_}, {".debug_line_str", &source->line_str_}}) ||
        source->line_.empty() || !source->index_sequences())
      return nullptr;
    return source;
  }

  bool lookup(std::uint64_t address, std::vector<DwarfFrame>& chain) override {
    chain.clear();
    DwarfFrame frame;
    if (!line_at(address, frame.file, frame.line)) return false;
    chain.push_back(frame);
    return true;
  }

  // The file and line of the row that holds `address`.
  bool line_at(std::uint64_t address, const char*& file, int& line) {
    std::lock_guard<std::mutex> held(mutex_);  // shared by symbolizers
    const Row row = row_at(address);
    file = row.file;
    line = row.line;
    return file != nullptr || line != 0;
  }

  std::uint64_t memory_bytes() noexcept override {
    std::lock_guard<std::mutex> held(mutex_);
    std::uint64_t bytes = sizeof *this + line_.capacity() + line_str_.capacity() + str_.capacity() +
                          sequences_.capacity() * sizeof(Sequence) + checkpoints_.capacity() * sizeof(Checkpoint) +
                          headers_.size() * (sizeof(Header) + sizeof(std::uint32_t) + hash_node_bytes);
    for (const auto& [table, names] : file_names_) {
      bytes += hash_node_bytes + sizeof names + names.capacity() * sizeof(std::string);
      for (const std::string& name : names) bytes += name.capacity();
    }
    return bytes;
  }

  // File `index` of the line table at offset `table` (a unit's DW_AT_stmt_list),
  // with its directory; null when unknown.
  const char* file_of(std::uint64_t table, std::uint64_t index) {
    std::lock_guard<std::mutex> held(mutex_);
    const auto header = table <= UINT32_MAX ? headers_.find(static_cast<std::uint32_t>(table)) : headers_.end();
    return header != headers_.end() ? file_name(header->first, header->second, index) : nullptr;
  }

 private:
  // A section larger than this inflated is not read (a hostile header's size).
  static constexpr std::uint64_t max_section_bytes = std::uint64_t{1} << 30;
  // zlib's deflate inflates at most 1032 bytes from one: a claim above that is a lie.
  static constexpr std::uint64_t max_inflation_ratio = 1032;

  using Header = LineProgramHeader;
  using Reader = DwarfReader;
  using Step = LineStep;

  struct Row {
    const char* file = nullptr;
    int line = 0;
  };
  // One sequence of a line table: its code's addresses, where its opcodes start,
  // and the table (by its offset in .debug_line) whose header it uses.
  struct Sequence {
    std::uint64_t start;
    std::uint64_t end;
    std::uint32_t table;
    std::uint32_t opcodes;
    std::uint32_t first_checkpoint;  // in checkpoints_, by address
    std::uint32_t checkpoint_count;
  };
  // Where a run can resume inside a sequence: right after one of its rows, with
  // the registers that row left. Taken every checkpoint_spacing bytes of opcodes,
  // so that a lookup runs that many at most, not its sequence from the start
  // (a unit's main sequence may hold thousands of rows, and a profile's addresses
  // cluster in a few of them).
  struct Checkpoint {
    std::uint64_t address;
    std::int64_t line;
    std::uint32_t opcodes;  // the next opcode's offset in .debug_line
    std::uint32_t file;
  };
  static constexpr std::uint64_t checkpoint_spacing = 512;


  LineTableSource() = default;

  // .debug_str, the first time a file name needs it (rare: compilers put file
  // names in .debug_line_str).
  const std::string& strings() {
    if (!strings_read_) {
      strings_read_ = true;
      (void)read_sections({{".debug_str", &str_}});
    }
    return str_;
  }

  // The sections named, inflated, from the file; false when it is not the ELF
  // file of the object's build.
  bool read_sections(std::initializer_list<std::pair<const char*, std::string*>> wanted) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    // Read with pread, not mapped: a file that shrinks under a mapping is a SIGBUS.
    Elf* elf = ::elf_begin(fd, ELF_C_READ, nullptr);
    const bool ours = elf != nullptr && ::elf_kind(elf) == ELF_K_ELF && same_build(elf, build_id_);
    if (ours) read_sections(fd, elf, wanted);
    if (elf != nullptr) ::elf_end(elf);
    ::close(fd);
    return ours;
  }

  // Each straight into its place: libelf's own copy of a section, inflated or
  // not, would be freed at once, and the allocator keeps such memory resident.
  void read_sections(int fd, Elf* elf, std::initializer_list<std::pair<const char*, std::string*>> wanted) {
    std::size_t names = 0;
    struct stat file {};
    if (::elf_getshdrstrndx(elf, &names) != 0 || ::fstat(fd, &file) != 0 || file.st_size < 0) return;
    const auto file_bytes = static_cast<std::uint64_t>(file.st_size);
    for (Elf_Scn* section = ::elf_nextscn(elf, nullptr); section != nullptr; section = ::elf_nextscn(elf, section)) {
      GElf_Shdr header;
      if (::gelf_getshdr(section, &header) == nullptr || header.sh_type == SHT_NOBITS) continue;
      const char* name = ::elf_strptr(elf, names, header.sh_name);
      if (name == nullptr) continue;
      std::string* into = nullptr;
      for (const auto& [wanted_name, out] : wanted)
        if (std::strcmp(name, wanted_name) == 0) into = out;
      if (into == nullptr) continue;
      const bool read = (header.sh_flags & SHF_COMPRESSED) != 0 ? inflate_section(elf, section, *into)
                                                                : read_section(fd, header, file_bytes, *into);
      if (!read) into->clear();
    }
  }

  static bool read_section(int fd, const GElf_Shdr& header, std::uint64_t file_bytes, std::string& out) {
    if (header.sh_size > max_section_bytes || header.sh_offset > file_bytes ||
        header.sh_size > file_bytes - header.sh_offset)
      return false;
    out.resize(header.sh_size);
    std::uint64_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, &out[done], out.size() - done, static_cast<off_t>(header.sh_offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::uint64_t>(n);
    }
    return true;
  }

  // A section compressed with zlib (SHF_COMPRESSED, ELFCOMPRESS_ZLIB), inflated from
  // the raw bytes libelf read.
  static bool inflate_section(Elf* elf, Elf_Scn* section, std::string& out) {
    GElf_Chdr compressed;
    if (::gelf_getchdr(section, &compressed) == nullptr || compressed.ch_type != ELFCOMPRESS_ZLIB ||
        compressed.ch_size > max_section_bytes)
      return false;
    const std::size_t header_size = ::gelf_fsize(elf, ELF_T_CHDR, 1, EV_CURRENT);
    const Elf_Data* raw = ::elf_rawdata(section, nullptr);
    if (raw == nullptr || raw->d_buf == nullptr || header_size == 0 || raw->d_size < header_size ||
        raw->d_size - header_size > UINT_MAX || compressed.ch_size / max_inflation_ratio > raw->d_size - header_size)
      return false;
    out.resize(compressed.ch_size);
    z_stream stream{};
    if (::inflateInit(&stream) != Z_OK) return false;
    stream.next_in = static_cast<Bytef*>(raw->d_buf) + header_size;
    stream.avail_in = static_cast<uInt>(raw->d_size - header_size);
    stream.next_out = reinterpret_cast<Bytef*>(&out[0]);
    stream.avail_out = static_cast<uInt>(out.size());
    const int status = ::inflate(&stream, Z_FINISH);
    const bool whole = status == Z_STREAM_END && stream.total_out == out.size();
    ::inflateEnd(&stream);
    return whole;
  }

  // Each table's header, and each sequence's address range, first opcode and
  // checkpoints, found by running every table's opcodes once.
  bool index_sequences() {
    for (std::uint64_t at = 0; at < line_.size() && at <= UINT32_MAX;) {
      Header header;
      if (!read_line_program_header(line_, at, header)) break;
      const auto table = static_cast<std::uint32_t>(at);
      std::uint64_t first = 0;
      bool started = false;
      std::size_t sequence_checkpoints = checkpoints_.size();  // the sequence's first
      // Only where a sequence's addresses never go back, as DWARF requires (a
      // damaged one is run from its start); VLIW's operation index is not kept.
      bool resumable = header.max_ops_per_instruction == 1;
      std::uint64_t last_opcodes = 0, last_address = 0;
      Step start;
      start.next = start.sequence_opcodes = header.program;
      run_line_program(line_, header, start, [&](const Step& step) {
        if (!step.end_sequence) {
          if (!started) {
            first = step.address;
            sequence_checkpoints = checkpoints_.size();
            last_opcodes = step.sequence_opcodes;
            last_address = step.address;
          }
          started = true;
          if (step.address < last_address) resumable = false;
          last_address = step.address;
          if (resumable && step.next - last_opcodes >= checkpoint_spacing && step.next <= UINT32_MAX &&
              step.file <= UINT32_MAX) {
            checkpoints_.push_back({step.address, step.line, static_cast<std::uint32_t>(step.next),
                                    static_cast<std::uint32_t>(step.file)});
            last_opcodes = step.next;
          }
          return true;
        }
        std::size_t count = checkpoints_.size() - sequence_checkpoints;
        // A sequence of code the linker discarded starts at 0 (or at a tombstone past its end).
        if (started && first != 0 && step.address > first && step.sequence_opcodes <= UINT32_MAX) {
          if (!resumable) {
            checkpoints_.resize(sequence_checkpoints);
            count = 0;
          }
          sequences_.push_back({first, step.address, table, static_cast<std::uint32_t>(step.sequence_opcodes),
                                static_cast<std::uint32_t>(count != 0 ? sequence_checkpoints : 0),
                                static_cast<std::uint32_t>(count)});
        } else if (started) {
          checkpoints_.resize(sequence_checkpoints);
        }
        started = false;
        resumable = header.max_ops_per_instruction == 1;
        return true;
      });
      if (started) checkpoints_.resize(sequence_checkpoints);  // a sequence the table never ended
      headers_.emplace(table, header);
      at = header.end;
    }
    std::sort(sequences_.begin(), sequences_.end(),
              [](const Sequence& a, const Sequence& b) { return a.start < b.start; });
    sequences_.shrink_to_fit();
    checkpoints_.shrink_to_fit();
    return !sequences_.empty();
  }

  // The row that holds `address`: the last one at or before it in its sequence.
  Row row_at(std::uint64_t address) {
    auto it = std::upper_bound(sequences_.begin(), sequences_.end(), address,
                               [](std::uint64_t a, const Sequence& s) { return a < s.start; });
    const Sequence* sequence = nullptr;
    for (int steps = 0; it != sequences_.begin() && steps < 4 && sequence == nullptr; ++steps) {
      --it;
      if (address < it->end) sequence = &*it;
    }
    if (sequence == nullptr) return {};
    const auto header = headers_.find(sequence->table);
    if (header == headers_.end()) return {};
    Step found;
    bool have = false;
    Step start;
    start.next = start.sequence_opcodes = sequence->opcodes;
    const auto checkpoints = checkpoints_.begin() + sequence->first_checkpoint;
    const auto resume = std::upper_bound(checkpoints, checkpoints + sequence->checkpoint_count, address,
                                         [](std::uint64_t a, const Checkpoint& c) { return a < c.address; });
    if (resume != checkpoints) {  // the row it was taken at is the last one so far at or before `address`
      const Checkpoint& checkpoint = *(resume - 1);
      start.address = checkpoint.address;
      start.file = checkpoint.file;
      start.line = checkpoint.line;
      start.next = checkpoint.opcodes;
      found = start;
      have = true;
    }
    run_line_program(line_, header->second, start, [&](const Step& step) {
      if (step.end_sequence || step.address > address) return false;
      found = step;
      have = true;
      return true;
    });
    if (!have) return {};
    Row row;
    row.file = file_name(sequence->table, header->second, found.file);
    row.line = found.line > 0 && found.line <= INT_MAX ? static_cast<int>(found.line) : 0;
    return row;
  }

  // File `index` of a table, with its directory; null when unknown.
  const char* file_name(std::uint32_t table, const Header& header, std::uint64_t index) {
    auto [names, fresh] = file_names_.try_emplace(table);
    if (fresh) read_file_names(header, names->second);
    // Files count from 1 before DWARF 5, from 0 in it.
    const std::uint64_t slot = header.version >= 5 ? index : index - 1;
    if (header.version < 5 && index == 0) return nullptr;
    if (slot >= names->second.size() || names->second[slot].empty()) return nullptr;
    return names->second[slot].c_str();
  }

  // A header's directory and file tables: each file's name with its directory.
  void read_file_names(const Header& header, std::vector<std::string>& files) {
    Reader in(line_, header.names, header.program);
    std::vector<std::string_view> directories;
    std::vector<NameEntry> entries;
    if (header.version < 5) {
      directories.emplace_back();  // 0: the compilation's directory, not in the line table
      for (std::string_view d = in.text(); in.ok() && !d.empty(); d = in.text()) directories.push_back(d);
      for (std::string_view f = in.text(); in.ok() && !f.empty(); f = in.text()) {
        NameEntry entry{f, in.uleb()};
        in.uleb();  // modification time
        in.uleb();  // size
        entries.push_back(entry);
      }
    } else {
      read_entries(in, header, [&](const NameEntry& e) { directories.push_back(e.path); });
      read_entries(in, header, [&](const NameEntry& e) { entries.push_back(e); });
    }
    files.reserve(entries.size());
    for (const NameEntry& entry : entries) {
      std::string name;
      if (!entry.path.empty() && entry.path.front() != '/' && entry.directory < directories.size() &&
          !directories[entry.directory].empty()) {
        name.assign(directories[entry.directory]);
        name += '/';
      }
      name += entry.path;
      files.push_back(std::move(name));
    }
  }

  // A directory or a file of a line table's header.
  struct NameEntry {
    std::string_view path;
    std::uint64_t directory = 0;
  };

  // A DWARF 5 directory or file table: its entry format, then its entries.
  template <typename Add>
  void read_entries(Reader& in, const Header& header, Add&& add) {
    struct Field {
      std::uint64_t content;
      std::uint64_t form;
    };
    std::vector<Field> format(in.fixed(1));
    for (Field& field : format) field = {in.uleb(), in.uleb()};
    std::uint64_t count = in.uleb();
    if (format.empty()) count = 0;
    for (std::uint64_t n = 0; n < count && !in.done(); ++n) {
      NameEntry entry;
      for (const Field& field : format) {
        std::string_view text;
        std::uint64_t number = 0;
        if (!read_form(in, header, field.form, text, number)) return;
        if (field.content == DW_LNCT_path) entry.path = text;
        else if (field.content == DW_LNCT_directory_index) entry.directory = number;
      }
      add(entry);
    }
  }

  // One attribute value of a DWARF 5 entry: a string or a number. False for a
  // form a line table does not use (its names are then unknown).
  bool read_form(Reader& in, const Header& header, std::uint64_t form, std::string_view& text,
                 std::uint64_t& number) {
    switch (form) {
      case DW_FORM_string: text = in.text(); break;
      case DW_FORM_line_strp: text = string_at(line_str_, in.fixed(header.offset_size)); break;
      case DW_FORM_strp: text = string_at(strings(), in.fixed(header.offset_size)); break;
      case DW_FORM_udata: number = in.uleb(); break;
      case DW_FORM_data1: number = in.fixed(1); break;
      case DW_FORM_data2: number = in.fixed(2); break;
      case DW_FORM_data4: number = in.fixed(4); break;
      case DW_FORM_data8: number = in.fixed(8); break;
      case DW_FORM_data16: in.skip(16); break;
      case DW_FORM_block: in.skip(in.uleb()); break;
      default: return false;
    }
    return in.ok();
  }

  static std::string_view string_at(const std::string& section, std::uint64_t offset) noexcept {
    if (offset >= section.size()) return {};
    const char* start = section.data() + offset;
    const void* nul = std::memchr(start, '\0', section.size() - offset);
    return nul != nullptr ? std::string_view(start, static_cast<const char*>(nul) - start) : std::string_view();
  }

  std::mutex mutex_;
  std::string path_, build_id_;  // the file read, and the build it must be
  std::string line_, line_str_, str_;  // the sections, inflated
  bool strings_read_ = false;
  std::vector<Sequence> sequences_;    // by start
  std::unordered_map<std::uint32_t, Header> headers_;  // by the table's offset
  std::vector<Checkpoint> checkpoints_;  // each sequence's, by address
  // By table; built once each, so the names handed out stay.
  std::unordered_map<std::uint32_t, std::vector<std::string>> file_names_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_LINE_TABLE_SOURCE_HPP_
