// Source lines from an object's DWARF line tables alone (.debug_line), without
// its debug information entries: for a sampled address, its file and line, no
// inlined functions (SPANPROF_WITH_LIBDW=1, for libelf).
//
// A distribution's debug file keeps its sections compressed, and libdw inflates
// every one of them at open, where a profile needs the lines of a few frames. This
// reader inflates the line tables and the strings their file names use, indexes
// each sequence's address range once, and runs the one sequence that holds an
// address the first time that address is asked (then kept): what it keeps is the
// line tables and one entry per sequence (docs/source-lines.md has the figures).
//
// The file is hostile input: every read is checked against the section's end,
// every loop ends with the data, a section claiming more than max_section_bytes
// inflated is not read.
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_LINE_TABLE_SOURCE_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_LINE_TABLE_SOURCE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/symbolization/source_lines.hpp>

#if SPANPROF_WITH_LIBDW

#include <dwarf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
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

  // The file and line of the row that holds `address` (kept per address asked).
  bool line_at(std::uint64_t address, const char*& file, int& line) {
    std::lock_guard<std::mutex> lock(mutex_);  // shared by symbolizers
    auto [cached, fresh] = rows_.try_emplace(address);
    if (fresh) cached->second = row_at(address);
    file = cached->second.file;
    line = cached->second.line;
    return file != nullptr || line != 0;
  }

  std::uint64_t memory_bytes() noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t bytes = sizeof *this + line_.capacity() + line_str_.capacity() + str_.capacity() +
                          sequences_.capacity() * sizeof(Sequence) +
                          headers_.size() * (sizeof(Header) + sizeof(std::uint32_t) + hash_node_bytes) +
                          rows_.size() * (sizeof(Row) + sizeof(std::uint64_t) + hash_node_bytes);
    for (const auto& [table, names] : file_names_) {
      bytes += hash_node_bytes + sizeof names + names.capacity() * sizeof(std::string);
      for (const std::string& name : names) bytes += name.capacity();
    }
    return bytes;
  }

  // File `index` of the line table at offset `table` (a unit's DW_AT_stmt_list),
  // with its directory; null when unknown.
  const char* file_of(std::uint64_t table, std::uint64_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto header = table <= UINT32_MAX ? headers_.find(static_cast<std::uint32_t>(table)) : headers_.end();
    return header != headers_.end() ? file_name(header->first, header->second, index) : nullptr;
  }

 private:
  // A section larger than this inflated is not read (a hostile header's size).
  static constexpr std::uint64_t max_section_bytes = std::uint64_t{1} << 30;

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
  };
  // A line table's header: what running its opcodes needs, and its file names
  // (read the first time an address lands in it).
  struct Header {
    std::uint64_t end = 0;  // of the table, in .debug_line
    std::uint64_t program = 0;
    std::uint16_t version = 0;
    std::uint8_t offset_size = 4;
    std::uint8_t address_size = 8;
    std::uint8_t min_instruction_length = 1;
    std::uint8_t max_ops_per_instruction = 1;
    std::int8_t line_base = 0;
    std::uint8_t line_range = 0;
    std::uint8_t opcode_base = 0;
    std::uint64_t opcode_lengths = 0;  // where the standard opcodes' argument counts are
    std::uint64_t names = 0;           // where its directories and files are described
  };

  // Bounded reads from one section; a read past its end fails the reader, and
  // every later read returns 0.
  class Reader {
   public:
    Reader(const std::string& data, std::uint64_t at, std::uint64_t end) noexcept
        : data_(&data), at_(at), end_(std::min<std::uint64_t>(end, data.size())) {
      if (at_ > end_) fail();
    }
    bool ok() const noexcept { return ok_; }
    bool done() const noexcept { return !ok_ || at_ >= end_; }
    std::uint64_t at() const noexcept { return at_; }
    void fail() noexcept {
      ok_ = false;
      at_ = end_;
    }
    std::uint8_t byte() noexcept {
      if (at_ >= end_) {
        fail();
        return 0;
      }
      return static_cast<std::uint8_t>((*data_)[at_++]);
    }
    std::uint64_t fixed(unsigned bytes) noexcept {
      if (bytes > 8 || end_ - at_ < bytes) {
        fail();
        return 0;
      }
      std::uint64_t value = 0;
      for (unsigned i = 0; i < bytes; ++i) value |= std::uint64_t{static_cast<unsigned char>((*data_)[at_ + i])} << (8 * i);
      at_ += bytes;
      return value;
    }
    std::uint64_t uleb() noexcept {
      std::uint64_t value = 0;
      for (unsigned shift = 0; at_ < end_; shift += 7) {
        const auto byte = static_cast<unsigned char>((*data_)[at_++]);
        if (shift < 64) value |= std::uint64_t{byte & 0x7fu} << shift;
        if ((byte & 0x80u) == 0) return value;
      }
      fail();
      return 0;
    }
    std::int64_t sleb() noexcept {
      std::uint64_t value = 0;
      unsigned shift = 0;
      for (; at_ < end_; ) {
        const auto byte = static_cast<unsigned char>((*data_)[at_++]);
        if (shift < 64) value |= std::uint64_t{byte & 0x7fu} << shift;
        shift += 7;
        if ((byte & 0x80u) == 0) {
          if (shift < 64 && (byte & 0x40u) != 0) value |= ~std::uint64_t{0} << shift;
          return static_cast<std::int64_t>(value);
        }
      }
      fail();
      return 0;
    }
    // A NUL-terminated string in place.
    std::string_view text() noexcept {
      const char* start = data_->data() + at_;
      const void* nul = std::memchr(start, '\0', end_ - at_);
      if (nul == nullptr) {
        fail();
        return {};
      }
      const std::string_view out(start, static_cast<const char*>(nul) - start);
      at_ += out.size() + 1;
      return out;
    }
    void skip(std::uint64_t bytes) noexcept {
      if (end_ - at_ < bytes) fail();
      else at_ += bytes;
    }

   private:
    const std::string* data_;
    std::uint64_t at_;
    std::uint64_t end_;
    bool ok_ = true;
  };

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
    if (ours) read_sections(elf, wanted);
    if (elf != nullptr) ::elf_end(elf);
    ::close(fd);
    return ours;
  }

  void read_sections(Elf* elf, std::initializer_list<std::pair<const char*, std::string*>> wanted) {
    std::size_t names = 0;
    if (::elf_getshdrstrndx(elf, &names) != 0) return;
    for (Elf_Scn* section = ::elf_nextscn(elf, nullptr); section != nullptr; section = ::elf_nextscn(elf, section)) {
      GElf_Shdr header;
      if (::gelf_getshdr(section, &header) == nullptr || header.sh_type == SHT_NOBITS) continue;
      const char* name = ::elf_strptr(elf, names, header.sh_name);
      if (name == nullptr) continue;
      std::string* into = nullptr;
      for (const auto& [wanted_name, out] : wanted)
        if (std::strcmp(name, wanted_name) == 0) into = out;
      if (into == nullptr) continue;
      if ((header.sh_flags & SHF_COMPRESSED) != 0) {
        GElf_Chdr compressed;
        if (::gelf_getchdr(section, &compressed) == nullptr || compressed.ch_size > max_section_bytes ||
            ::elf_compress(section, 0, 0) < 0)
          continue;
      } else if (header.sh_size > max_section_bytes) {
        continue;
      }
      Elf_Data* data = ::elf_getdata(section, nullptr);
      if (data == nullptr || data->d_buf == nullptr) continue;
      into->assign(static_cast<const char*>(data->d_buf), data->d_size);
    }
  }

  // Each table's header, and each sequence's address range and first opcode,
  // found by running every table's opcodes once and keeping no row.
  bool index_sequences() {
    for (std::uint64_t at = 0; at < line_.size() && at <= UINT32_MAX;) {
      Header header;
      if (!read_header(at, header)) break;
      const auto table = static_cast<std::uint32_t>(at);
      std::uint64_t first = 0;
      bool started = false;
      run(header, header.program, [&](const Step& step) {
        if (!step.end_sequence) {
          if (!started) first = step.address;
          started = true;
          return true;
        }
        // A sequence of code the linker discarded starts at 0 (or at a tombstone past its end).
        if (started && first != 0 && step.address > first && step.sequence_opcodes <= UINT32_MAX)
          sequences_.push_back({first, step.address, table, static_cast<std::uint32_t>(step.sequence_opcodes)});
        started = false;
        return true;
      });
      headers_.emplace(table, header);
      at = header.end;
    }
    std::sort(sequences_.begin(), sequences_.end(),
              [](const Sequence& a, const Sequence& b) { return a.start < b.start; });
    sequences_.shrink_to_fit();
    return !sequences_.empty();
  }

  bool read_header(std::uint64_t at, Header& header) const noexcept {
    Reader in(line_, at, line_.size());
    std::uint64_t length = in.fixed(4);
    if (length == 0xffffffffu) {
      header.offset_size = 8;
      length = in.fixed(8);
    } else if (length >= 0xfffffff0u) {
      return false;
    }
    if (!in.ok() || length > line_.size() - in.at()) return false;
    header.end = in.at() + length;
    header.version = static_cast<std::uint16_t>(in.fixed(2));
    if (header.version < 2 || header.version > 5) return false;
    if (header.version >= 5) {
      header.address_size = static_cast<std::uint8_t>(in.fixed(1));
      in.fixed(1);  // segment selector size
    }
    const std::uint64_t header_length = in.fixed(header.offset_size);
    if (!in.ok() || header_length > header.end - in.at()) return false;
    header.program = in.at() + header_length;
    header.min_instruction_length = static_cast<std::uint8_t>(in.fixed(1));
    if (header.version >= 4) header.max_ops_per_instruction = static_cast<std::uint8_t>(in.fixed(1));
    in.fixed(1);  // default_is_stmt: a lookup takes every row, as libdw's does
    header.line_base = static_cast<std::int8_t>(in.fixed(1));
    header.line_range = static_cast<std::uint8_t>(in.fixed(1));
    header.opcode_base = static_cast<std::uint8_t>(in.fixed(1));
    header.opcode_lengths = in.at();
    in.skip(header.opcode_base > 0 ? header.opcode_base - 1u : 0u);
    header.names = in.at();
    if (header.max_ops_per_instruction == 0) header.max_ops_per_instruction = 1;
    if (header.address_size != 4 && header.address_size != 8) header.address_size = 8;
    return in.ok() && header.line_range != 0 && header.opcode_base != 0 && header.names <= header.program;
  }

  // One step of a line program that a caller sees: a row, or a sequence's end.
  struct Step {
    bool end_sequence = false;
    std::uint64_t address = 0;
    std::uint64_t file = 1;
    std::int64_t line = 1;
    std::uint64_t sequence_opcodes = 0;  // where the sequence this step is in starts
  };

  // Runs a table's opcodes from `from` (its program, or a sequence's start) to the
  // table's end, handing `visit` each row and each sequence's end; `visit` returns
  // false to stop.
  template <typename Visit>
  void run(const Header& header, std::uint64_t from, Visit&& visit) const {
    Reader in(line_, from, header.end);
    Step step;
    step.sequence_opcodes = from;
    std::uint64_t op_index = 0;
    auto advance = [&](std::uint64_t operations) {
      if (header.max_ops_per_instruction == 1) {
        step.address += header.min_instruction_length * operations;
        return;
      }
      const std::uint64_t ops = header.max_ops_per_instruction;  // VLIW
      step.address += header.min_instruction_length * ((op_index + operations) / ops);
      op_index = (op_index + operations) % ops;
    };
    // A special opcode's operation and line advances, worked out once per run:
    // special opcodes are most of a program's bytes, each would cost two divisions.
    std::uint8_t operations_of[256];
    std::int16_t lines_of[256];
    for (unsigned opcode = header.opcode_base; opcode < 256; ++opcode) {
      const unsigned adjusted = opcode - header.opcode_base;
      operations_of[opcode] = static_cast<std::uint8_t>(adjusted / header.line_range);
      lines_of[opcode] = static_cast<std::int16_t>(header.line_base + static_cast<int>(adjusted % header.line_range));
    }
    while (!in.done()) {
      const std::uint8_t opcode = in.byte();
      if (opcode >= header.opcode_base) {  // a special opcode: advance, then a row
        advance(operations_of[opcode]);
        step.line += lines_of[opcode];
        if (!visit(step)) return;
        continue;
      }
      switch (opcode) {
        case 0: {  // an extended opcode, its length first
          const std::uint64_t length = in.uleb();
          if (!in.ok() || length == 0 || length > header.end - in.at()) return;
          const std::uint64_t next = in.at() + length;
          const auto extended = static_cast<std::uint8_t>(in.fixed(1));
          if (extended == DW_LNE_end_sequence) {
            step.end_sequence = true;
            if (!visit(step)) return;
            step = Step();
            step.sequence_opcodes = next;
            op_index = 0;
          } else if (extended == DW_LNE_set_address) {
            step.address = in.fixed(static_cast<unsigned>(std::min<std::uint64_t>(length - 1, 8)));
            op_index = 0;
          }
          in = Reader(line_, next, header.end);
          break;
        }
        case DW_LNS_copy:
          if (!visit(step)) return;
          break;
        case DW_LNS_advance_pc: advance(in.uleb()); break;
        case DW_LNS_advance_line: step.line += in.sleb(); break;
        case DW_LNS_set_file: step.file = in.uleb(); break;
        case DW_LNS_const_add_pc: advance(operations_of[255]); break;
        case DW_LNS_fixed_advance_pc:
          step.address += in.fixed(2);
          op_index = 0;
          break;
        default: {  // no row (negate_stmt, set_column, prologue_end...): skip its arguments
          Reader count(line_, header.opcode_lengths + opcode - 1u, header.names);
          for (std::uint64_t n = count.fixed(1); n > 0 && !in.done(); --n) in.uleb();
        }
      }
    }
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
    run(header->second, sequence->opcodes, [&](const Step& step) {
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
  // By table; built once each, so the names rows_ points at stay.
  std::unordered_map<std::uint32_t, std::vector<std::string>> file_names_;
  std::unordered_map<std::uint64_t, Row> rows_;  // by address asked
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_LINE_TABLE_SOURCE_HPP_
