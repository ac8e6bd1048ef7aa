// A DWARF line program (.debug_line, DWARF 2 to 5): bounded reads of its bytes,
// a table's header, and the state machine that turns its opcodes into rows
// (SPANPROF_WITH_LIBDW=1). The reader of line tables (line_table_source.hpp)
// indexes and looks up with it.
//
// The bytes are hostile input: every read is checked against the section's end,
// and every loop ends with the data.
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_LINE_PROGRAM_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_LINE_PROGRAM_HPP_

#include <spanprof/config.hpp>

#if SPANPROF_WITH_LIBDW

#include <dwarf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Bounded reads from one section; a read past its end fails the reader, and
// every later read returns 0.
class DwarfReader {
 public:
  DwarfReader(const std::string& data, std::uint64_t at, std::uint64_t end) noexcept
      : data_(reinterpret_cast<const unsigned char*>(data.data())), at_(at), end_(std::min<std::uint64_t>(end, data.size())) {
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
    return data_[at_++];
  }
  std::uint64_t fixed(unsigned bytes) noexcept {
    if (bytes > 8 || end_ - at_ < bytes) {
      fail();
      return 0;
    }
    std::uint64_t value = 0;
    for (unsigned i = 0; i < bytes; ++i) value |= std::uint64_t{data_[at_ + i]} << (8 * i);
    at_ += bytes;
    return value;
  }
  std::uint64_t uleb() noexcept {
    std::uint64_t value = 0;
    for (unsigned shift = 0; at_ < end_; shift += 7) {
      const unsigned byte = data_[at_++];
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
      const unsigned byte = data_[at_++];
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
    const char* start = reinterpret_cast<const char*>(data_) + at_;
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
  const unsigned char* data_;
  std::uint64_t at_;
  std::uint64_t end_;
  bool ok_ = true;
};

// A line table's header: what running its opcodes needs, and its file names
// (read the first time an address lands in it).
struct LineProgramHeader {
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

// The header of the line table at offset `at` of `line` (.debug_line); false
// when it is not one this reader runs.
inline bool read_line_program_header(const std::string& line, std::uint64_t at, LineProgramHeader& header) noexcept {
  DwarfReader in(line, at, line.size());
  std::uint64_t length = in.fixed(4);
  if (length == 0xffffffffu) {
    header.offset_size = 8;
    length = in.fixed(8);
  } else if (length >= 0xfffffff0u) {
    return false;
  }
  if (!in.ok() || length > line.size() - in.at()) return false;
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
struct LineStep {
  bool end_sequence = false;
  std::uint64_t address = 0;
  std::uint64_t file = 1;
  std::int64_t line = 1;
  std::uint64_t sequence_opcodes = 0;  // where the sequence this step is in starts
  std::uint64_t next = 0;              // the next opcode's offset
};

// Runs the opcodes of a table of `line` (.debug_line) from `step.next` (its
// program, a sequence's start, or a resume point, with the registers there) to
// the table's end, handing `visit` each row and each sequence's end; `visit`
// returns false to stop.
template <typename Visit>
void run_line_program(const std::string& line, const LineProgramHeader& header, LineStep step, Visit&& visit) {
  DwarfReader in(line, step.next, header.end);
  std::uint64_t op_index = 0;
  const bool vliw = header.max_ops_per_instruction != 1;
  auto advance = [&](std::uint64_t operations) {
    if (!vliw) {
      step.address += header.min_instruction_length * operations;
      return;
    }
    const std::uint64_t ops = header.max_ops_per_instruction;
    step.address += header.min_instruction_length * ((op_index + operations) / ops);
    op_index = (op_index + operations) % ops;
  };
  // Worked out once per run, for opcodes that are most of a program's bytes: a
  // special opcode's operations and line advances (two divisions each, counted
  // up here instead: a run is as short as one lookup, and libc has thousands of
  // tables), and how many arguments each standard opcode takes.
  std::uint8_t operations_of[256];
  std::int16_t lines_of[256];
  std::uint8_t arguments_of[256] = {};
  unsigned operations = 0, line_advance = 0;
  for (unsigned opcode = header.opcode_base; opcode < 256; ++opcode) {
    operations_of[opcode] = static_cast<std::uint8_t>(operations);
    lines_of[opcode] = static_cast<std::int16_t>(header.line_base + static_cast<int>(line_advance));
    if (++line_advance == header.line_range) {
      line_advance = 0;
      ++operations;
    }
  }
  DwarfReader counts(line, header.opcode_lengths, header.names);
  for (unsigned opcode = 1; opcode < header.opcode_base; ++opcode) arguments_of[opcode] = static_cast<std::uint8_t>(counts.fixed(1));
  while (!in.done()) {
    const std::uint8_t opcode = in.byte();
    if (opcode >= header.opcode_base) {  // a special opcode: advance, then a row
      advance(operations_of[opcode]);
      step.line += lines_of[opcode];
      step.next = in.at();
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
          step.next = next;
          if (!visit(step)) return;
          step = LineStep();
          step.sequence_opcodes = next;
          op_index = 0;
        } else if (extended == DW_LNE_set_address) {
          step.address = in.fixed(static_cast<unsigned>(std::min<std::uint64_t>(length - 1, 8)));
          op_index = 0;
        }
        in = DwarfReader(line, next, header.end);
        break;
      }
      case DW_LNS_copy:
        step.next = in.at();
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
      default:  // no row (negate_stmt, set_column, prologue_end...): skip its arguments
        for (unsigned n = arguments_of[opcode]; n > 0 && !in.done(); --n) in.uleb();
    }
  }
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_WITH_LIBDW

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_LINE_PROGRAM_HPP_
