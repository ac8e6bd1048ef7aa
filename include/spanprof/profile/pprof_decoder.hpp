// pprof -> Profile: the inverse of pprof_encoder.hpp, for profiles read back from
// disk (the spool) or received from elsewhere.
//
// The input is untrusted: a file on disk can be damaged or planted, and a few
// hundred KiB of gzip can inflate to a quarter of a GiB. So every length, index
// and id is checked before use; the parser is iterative (no recursion a deep
// nesting could exhaust); the work is proportional to the input size; and the
// memory the decoded model may take is bounded (an empty Label costs two bytes on
// the wire but over a hundred in memory, so input size alone is no bound). Any
// failure is returned as a message; nothing throws.
#ifndef SPANPROF_PROFILE_PPROF_DECODER_HPP_
#define SPANPROF_PROFILE_PPROF_DECODER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/gzip.hpp>
#include <spanprof/profile/protobuf_writer.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/profile/profile.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct PprofDecodeOptions {
  // Largest profile.proto a gzip body may inflate to.
  std::size_t max_inflated_bytes = default_gzip_max_output;
  // Approximate heap the decoded Profile (and the decoder's string table) may
  // take. Real profiles are far below it; it exists to stop amplification.
  std::size_t max_model_bytes = std::size_t{1} << 30;
  // Reject what `go tool pprof` rejects: values that do not match the sample
  // types, reserved (0) or duplicate ids, and ids that refer to nothing. With it
  // a consumer can follow every id in the result without checking. Slightly
  // stricter than pprof, which tolerates a dangling Location.mapping_id.
  bool check_references = true;
};

// What the decoder saw on the wire, for tools and tests that inspect it.
struct PprofWireDetails {
  std::string raw;                        // the uncompressed profile.proto bytes
  std::vector<std::string> string_table;  // as stored, entry 0 included
};

// A protobuf wire-format reader over a borrowed buffer. Every read reports
// failure instead of running past the end; it never allocates.
class ProtobufReader {
 public:
  static constexpr std::uint32_t max_field_number = (std::uint32_t{1} << 29) - 1;

  explicit ProtobufReader(std::string_view data) noexcept : data_(data) {}

  bool at_end() const noexcept { return pos_ == data_.size(); }
  std::size_t position() const noexcept { return pos_; }

  // An 11th byte, or a 10th byte with more than the top bit, cannot be a 64-bit
  // value: that is corruption, not a big number.
  bool varint(std::uint64_t& value) noexcept {
    std::uint64_t result = 0;
    for (std::size_t i = 0; i < max_varint_size; ++i) {
      if (pos_ == data_.size()) return false;
      const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
      if (i == max_varint_size - 1 && byte > 1) return false;
      result |= static_cast<std::uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) {
        value = result;
        return true;
      }
    }
    return false;
  }

  bool key(std::uint32_t& field, std::uint32_t& wire_type) noexcept {
    std::uint64_t key = 0;
    if (!varint(key)) return false;
    const std::uint64_t number = key >> 3;
    if (number == 0 || number > max_field_number) return false;
    field = static_cast<std::uint32_t>(number);
    wire_type = static_cast<std::uint32_t>(key & 7);
    return true;
  }

  bool length_delimited(std::string_view& out) noexcept {
    std::uint64_t length = 0;
    if (!varint(length) || length > data_.size() - pos_) return false;
    out = data_.substr(pos_, static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return true;
  }

  // Groups (wire types 3 and 4) are refused rather than skipped: proto3 has none,
  // pprof never wrote any, and skipping them needs a nesting stack.
  bool skip(std::uint32_t wire_type) noexcept {
    std::uint64_t ignored = 0;
    std::string_view ignored_bytes;
    switch (wire_type) {
      case static_cast<std::uint32_t>(WireType::varint):
        return varint(ignored);
      case static_cast<std::uint32_t>(WireType::fixed64):
        return advance(8);
      case static_cast<std::uint32_t>(WireType::length_delimited):
        return length_delimited(ignored_bytes);
      case static_cast<std::uint32_t>(WireType::fixed32):
        return advance(4);
      default:
        return false;
    }
  }

 private:
  bool advance(std::size_t n) noexcept {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }

  std::string_view data_;
  std::size_t pos_ = 0;
};

// The decoder proper. Methods may throw std::bad_alloc; decode_pprof contains it.
class PprofDecoder {
 public:
  PprofDecoder(const PprofDecodeOptions& options, std::string& error) noexcept
      : options_(options), budget_(options.max_model_bytes), error_(error) {}

  bool decode(std::string_view raw, Profile& p) {
    const bool ok =
        index_top_level(raw) && decode_top_level(raw, p) && (!options_.check_references || check_references(p));
    if (!ok) error_.insert(0, "pprof: ");
    return ok;
  }

  const std::vector<std::string_view>& string_table() const noexcept { return strings_; }

 private:
  static constexpr std::uint32_t varint_wire = static_cast<std::uint32_t>(WireType::varint);
  static constexpr std::uint32_t bytes_wire = static_cast<std::uint32_t>(WireType::length_delimited);

  // ---- errors -------------------------------------------------------------------

  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  // Sub-decoders say what is wrong; each caller adds where, so the message reads
  // outermost first: "sample #3: label #2: str refers to string 99 ...".
  bool located(const std::string& where) {
    error_.insert(0, where + ": ");
    return false;
  }

  bool located(const char* what, std::size_t one_based) {
    return located(std::string(what) + " #" + std::to_string(one_based));
  }

  bool malformed(const char* what) { return fail(std::string("malformed ") + what); }

  bool expect_wire(const char* field, std::uint32_t wire, std::uint32_t expected) {
    if (wire == expected) return true;
    // pprof's own reader refuses a known field with the wrong wire type too; being
    // as strict keeps "decodes here" meaning "opens in pprof".
    return fail(std::string(field) + " has wire type " + std::to_string(wire) + ", expected " +
                std::to_string(expected));
  }

  // ---- budget -------------------------------------------------------------------

  bool charge(std::size_t count, std::size_t each) {
    if (each != 0 && count > budget_ / each) {
      return fail("decoded profile would exceed the " + std::to_string(options_.max_model_bytes) + "-byte model limit");
    }
    budget_ -= count * each;
    return true;
  }

  // ---- scalars --------------------------------------------------------------------

  bool read_varint(ProtobufReader& reader, std::uint32_t wire, const char* field, std::uint64_t& value) {
    if (!expect_wire(field, wire, varint_wire)) return false;
    if (!reader.varint(value)) return malformed(field);
    return true;
  }

  bool read_int64(ProtobufReader& reader, std::uint32_t wire, const char* field, std::int64_t& value) {
    std::uint64_t bits = 0;
    if (!read_varint(reader, wire, field, bits)) return false;
    value = static_cast<std::int64_t>(bits);  // int64 travels as two's complement
    return true;
  }

  bool read_bytes(ProtobufReader& reader, std::uint32_t wire, const char* field, std::string_view& bytes) {
    if (!expect_wire(field, wire, bytes_wire)) return false;
    if (!reader.length_delimited(bytes)) return malformed(field);
    return true;
  }

  bool index_in_table(std::uint64_t index, const char* field) {
    if (index < strings_.size()) return true;
    return fail(std::string(field) + " refers to string " + std::to_string(index) + " of a table of " +
                std::to_string(strings_.size()));
  }

  bool read_string(ProtobufReader& reader, std::uint32_t wire, const char* field, std::string& out) {
    std::uint64_t index = 0;
    if (!read_varint(reader, wire, field, index)) return false;
    return assign_string(index, field, out);
  }

  bool assign_string(std::uint64_t index, const char* field, std::string& out) {
    if (!index_in_table(index, field)) return false;
    const std::string_view text = strings_[static_cast<std::size_t>(index)];
    if (!charge(text.size(), 1)) return false;
    out.assign(text.data(), text.size());
    return true;
  }

  // Repeated scalars arrive packed (proto3's default) or one per key (proto2 and
  // some writers); readers must accept both.
  template <typename T>
  bool read_repeated_varint(ProtobufReader& reader, std::uint32_t wire, const char* field, std::vector<T>& out) {
    std::uint64_t value = 0;
    if (wire == varint_wire) {
      if (!reader.varint(value)) return malformed(field);
      if (!charge(1, sizeof(T))) return false;
      out.push_back(static_cast<T>(value));
      return true;
    }
    std::string_view packed;
    if (!read_bytes(reader, wire, field, packed)) return false;
    // Each varint ends in exactly one byte without the continuation bit, so this
    // is the element count of a well-formed payload: reserve once, charge once.
    const auto count = static_cast<std::size_t>(
        std::count_if(packed.begin(), packed.end(), [](char c) { return (static_cast<std::uint8_t>(c) & 0x80) == 0; }));
    if (!charge(count, sizeof(T))) return false;
    out.reserve(out.size() + count);
    ProtobufReader elements(packed);
    while (!elements.at_end()) {
      if (!elements.varint(value)) return malformed(field);
      out.push_back(static_cast<T>(value));
    }
    return true;
  }

  // ---- pass 1: the top level ------------------------------------------------------
  //
  // The string table may sit anywhere in the message (the encoder writes it after
  // the messages that use it), so the first pass only checks the top level's
  // structure, collects the table and counts the repeated messages; the second
  // decodes them with the whole table known. Both passes are linear.

  bool index_top_level(std::string_view raw) {
    namespace f = pprof_field::profile;
    ProtobufReader reader(raw);
    std::uint32_t field = 0, wire = 0;
    while (!reader.at_end()) {
      const std::size_t at = reader.position();
      if (!reader.key(field, wire)) return fail("malformed field key at byte " + std::to_string(at));
      std::string_view bytes;
      switch (field) {
        case f::sample_type:
        case f::sample:
        case f::mapping:
        case f::location:
        case f::function:
          if (!read_bytes(reader, wire, field_name(field), bytes)) return false;
          ++counts_[field];
          break;
        case f::period_type:
          if (!read_bytes(reader, wire, "period_type", bytes)) return false;
          break;
        case f::string_table:
          if (!read_bytes(reader, wire, "string_table", bytes)) return false;
          if (!charge(1, sizeof(std::string_view))) return false;
          strings_.push_back(bytes);
          break;
        case f::comment:
          // Indices are checked in pass 2, once the table is complete.
          if (wire == varint_wire) {
            std::uint64_t ignored = 0;
            if (!reader.varint(ignored)) return malformed("comment");
          } else if (!read_bytes(reader, wire, "comment", bytes)) {
            return false;
          }
          break;
        case f::drop_frames:
        case f::keep_frames:
        case f::default_sample_type:
        case f::time_nanos:
        case f::duration_nanos:
        case f::period: {
          std::uint64_t ignored = 0;
          if (!read_varint(reader, wire, field_name(field), ignored)) return false;
          break;
        }
        default:
          if (!reader.skip(wire)) return fail("malformed unknown field " + std::to_string(field));
          break;
      }
    }
    // pprof requires it, and index 0 meaning "" is what lets proto3 omit empty strings.
    if (strings_.empty() || !strings_[0].empty()) return fail("string_table must start with the empty string");
    return true;
  }

  static const char* field_name(std::uint32_t field) noexcept {
    namespace f = pprof_field::profile;
    switch (field) {
      case f::sample_type:
        return "sample_type";
      case f::sample:
        return "sample";
      case f::mapping:
        return "mapping";
      case f::location:
        return "location";
      case f::function:
        return "function";
      case f::drop_frames:
        return "drop_frames";
      case f::keep_frames:
        return "keep_frames";
      case f::time_nanos:
        return "time_nanos";
      case f::duration_nanos:
        return "duration_nanos";
      case f::period:
        return "period";
      case f::default_sample_type:
        return "default_sample_type";
      default:
        return "field";
    }
  }

  // ---- pass 2 -------------------------------------------------------------------------

  template <typename T>
  bool reserve(std::vector<T>& items, std::uint32_t field) {
    if (!charge(counts_[field], sizeof(T))) return false;
    items.reserve(counts_[field]);
    return true;
  }

  bool decode_top_level(std::string_view raw, Profile& p) {
    namespace f = pprof_field::profile;
    if (!reserve(p.sample_types, f::sample_type) || !reserve(p.samples, f::sample) ||
        !reserve(p.mappings, f::mapping) || !reserve(p.locations, f::location) || !reserve(p.functions, f::function)) {
      return false;
    }
    ProtobufReader reader(raw);
    std::uint32_t field = 0, wire = 0;
    std::vector<std::uint64_t> comment_indices;
    while (!reader.at_end()) {
      // Pass 1 proved the structure; these checks only keep the code honest.
      if (!reader.key(field, wire)) return malformed("field key");
      std::string_view bytes;
      std::uint64_t value = 0;
      bool ok = true;
      switch (field) {
        case f::sample_type:
          ok = reader.length_delimited(bytes) && value_type(bytes, p.sample_types.emplace_back());
          if (!ok) return located("sample_type", p.sample_types.size());
          break;
        case f::sample:
          ok = reader.length_delimited(bytes) && sample(bytes, p.samples.emplace_back());
          if (!ok) return located("sample", p.samples.size());
          break;
        case f::mapping:
          ok = reader.length_delimited(bytes) && mapping(bytes, p.mappings.emplace_back());
          if (!ok) return located("mapping", p.mappings.size());
          break;
        case f::location:
          ok = reader.length_delimited(bytes) && location(bytes, p.locations.emplace_back());
          if (!ok) return located("location", p.locations.size());
          break;
        case f::function:
          ok = reader.length_delimited(bytes) && function(bytes, p.functions.emplace_back());
          if (!ok) return located("function", p.functions.size());
          break;
        case f::period_type:
          // A repeated non-repeated message merges, as protobuf specifies.
          if (!reader.length_delimited(bytes) || !value_type(bytes, p.period_type)) return located("period_type");
          break;
        case f::comment:
          if (!read_repeated_varint(reader, wire, "comment", comment_indices)) return false;
          break;
        case f::time_nanos:
          if (!read_int64(reader, wire, "time_nanos", p.time_nanos)) return false;
          break;
        case f::duration_nanos:
          if (!read_int64(reader, wire, "duration_nanos", p.duration_nanos)) return false;
          break;
        case f::period:
          if (!read_int64(reader, wire, "period", p.period)) return false;
          break;
        case f::default_sample_type:
          if (!read_string(reader, wire, "default_sample_type", p.default_sample_type)) return false;
          break;
        case f::drop_frames:
        case f::keep_frames:
          // Not part of the model, but a dangling index is still a broken profile.
          if (!read_varint(reader, wire, field_name(field), value) || !index_in_table(value, field_name(field))) {
            return false;
          }
          break;
        default:
          if (!reader.skip(wire)) return malformed("unknown field");
          break;
      }
    }
    if (!charge(comment_indices.size(), sizeof(std::string))) return false;
    p.comments.reserve(comment_indices.size());
    for (const std::uint64_t index : comment_indices) {
      if (!assign_string(index, "comment", p.comments.emplace_back())) return false;
    }
    return true;
  }

  // ---- messages -----------------------------------------------------------------------

  bool value_type(std::string_view bytes, ValueType& out) {
    namespace f = pprof_field::value_type;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("field key");
      bool ok = true;
      switch (field) {
        case f::type:
          ok = read_string(reader, wire, "type", out.type);
          break;
        case f::unit:
          ok = read_string(reader, wire, "unit", out.unit);
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown field");
          break;
      }
      if (!ok) return false;
    }
    return true;
  }

  bool label(std::string_view bytes, Label& out) {
    namespace f = pprof_field::label;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::uint64_t str_index = 0, unit_index = 0;
    std::int64_t num = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("field key");
      bool ok = true;
      switch (field) {
        case f::key:
          ok = read_string(reader, wire, "key", out.key);
          break;
        case f::str:
          ok = read_varint(reader, wire, "str", str_index);
          break;
        case f::num:
          ok = read_int64(reader, wire, "num", num);
          break;
        case f::num_unit:
          ok = read_varint(reader, wire, "num_unit", unit_index);
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown field");
          break;
      }
      if (!ok) return false;
    }
    if (!index_in_table(str_index, "str") || !index_in_table(unit_index, "num_unit")) return false;
    // pprof's rule, on values rather than presence: a label with a string is a
    // string label, and only a nonzero number or unit makes a numeric one. The
    // losing side is dropped so decoding what the encoder wrote from this result
    // gives this result again.
    if (str_index != 0 || (num == 0 && unit_index == 0)) return assign_string(str_index, "str", out.str);
    out.is_num = true;
    out.num = num;
    return assign_string(unit_index, "num_unit", out.num_unit);
  }

  bool sample(std::string_view bytes, Sample& out) {
    namespace f = pprof_field::sample;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("field key");
      std::string_view nested;
      bool ok = true;
      switch (field) {
        case f::location_id:
          ok = read_repeated_varint(reader, wire, "location_id", out.location_ids);
          break;
        case f::value:
          ok = read_repeated_varint(reader, wire, "value", out.values);
          break;
        case f::label:
          ok = read_bytes(reader, wire, "label", nested) && charge(1, sizeof(Label));
          if (ok && !label(nested, out.labels.emplace_back())) return located("label", out.labels.size());
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown field");
          break;
      }
      if (!ok) return false;
    }
    return true;
  }

  bool mapping(std::string_view bytes, Mapping& out) {
    namespace f = pprof_field::mapping;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::uint64_t value = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("field key");
      bool ok = true;
      switch (field) {
        case f::id:
          ok = read_varint(reader, wire, "id", out.id);
          break;
        case f::memory_start:
          ok = read_varint(reader, wire, "memory_start", out.memory_start);
          break;
        case f::memory_limit:
          ok = read_varint(reader, wire, "memory_limit", out.memory_limit);
          break;
        case f::file_offset:
          ok = read_varint(reader, wire, "file_offset", out.file_offset);
          break;
        case f::filename:
          ok = read_string(reader, wire, "filename", out.filename);
          break;
        case f::build_id:
          ok = read_string(reader, wire, "build_id", out.build_id);
          break;
        case f::has_functions:
          ok = read_varint(reader, wire, "has_functions", value);
          out.has_functions = value != 0;
          break;
        case f::has_filenames:
        case f::has_line_numbers:
        case f::has_inline_frames:
          ok = read_varint(reader, wire, "has_* flag", value);
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown field");
          break;
      }
      if (!ok) return false;
    }
    return true;
  }

  bool location(std::string_view bytes, Location& out) {
    namespace f = pprof_field::location;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::uint64_t value = 0;
    std::uint64_t later_function_id = 0;
    bool seen_line = false;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("field key");
      std::string_view nested;
      bool ok = true;
      switch (field) {
        case f::id:
          ok = read_varint(reader, wire, "id", out.id);
          break;
        case f::mapping_id:
          ok = read_varint(reader, wire, "mapping_id", out.mapping_id);
          break;
        case f::address:
          ok = read_varint(reader, wire, "address", out.address);
          break;
        case f::is_folded:
          ok = read_varint(reader, wire, "is_folded", value);
          break;
        case f::line:
          ok =
              read_bytes(reader, wire, "line", nested) && line(nested, seen_line ? later_function_id : out.function_id);
          seen_line = true;
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown field");
          break;
      }
      if (!ok) return false;
    }
    return true;
  }

  // Lines after the first are inlined callers; the model keeps one function per
  // location, the innermost, so only the first line's function_id is kept (the
  // others are still checked).
  bool line(std::string_view bytes, std::uint64_t& function_id) {
    namespace f = pprof_field::line;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::uint64_t ignored = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("line field key");
      bool ok = true;
      switch (field) {
        case f::function_id:
          ok = read_varint(reader, wire, "line.function_id", function_id);
          break;
        case f::line:
          ok = read_varint(reader, wire, "line.line", ignored);
          break;
        case f::column:
          ok = read_varint(reader, wire, "line.column", ignored);
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown line field");
          break;
      }
      if (!ok) return false;
    }
    return true;
  }

  bool function(std::string_view bytes, Function& out) {
    namespace f = pprof_field::function;
    ProtobufReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::uint64_t ignored = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return malformed("field key");
      bool ok = true;
      switch (field) {
        case f::id:
          ok = read_varint(reader, wire, "id", out.id);
          break;
        case f::name:
          ok = read_string(reader, wire, "name", out.name);
          break;
        case f::system_name:
          ok = read_string(reader, wire, "system_name", out.system_name);
          break;
        case f::filename:
          ok = read_string(reader, wire, "filename", out.filename);
          break;
        case f::start_line:
          ok = read_varint(reader, wire, "start_line", ignored);
          break;
        default:
          ok = reader.skip(wire) || malformed("unknown field");
          break;
      }
      if (!ok) return false;
    }
    return true;
  }

  // ---- references ---------------------------------------------------------------------
  //
  // Sorted id lists, not hash sets: ids are attacker-chosen and std::hash of an
  // integer is the identity, so a hash set could be driven quadratic.

  template <typename T>
  bool sorted_ids(const std::vector<T>& items, const char* what, std::vector<std::uint64_t>& ids) {
    ids.clear();
    ids.reserve(items.size());
    for (const T& item : items) {
      if (item.id == 0) return fail(std::string(what) + " with the reserved id 0");
      ids.push_back(item.id);
    }
    std::sort(ids.begin(), ids.end());
    const auto duplicate = std::adjacent_find(ids.begin(), ids.end());
    if (duplicate != ids.end()) return fail(std::string("duplicate ") + what + " id " + std::to_string(*duplicate));
    return true;
  }

  static bool known(const std::vector<std::uint64_t>& ids, std::uint64_t id) noexcept {
    return std::binary_search(ids.begin(), ids.end(), id);
  }

  bool check_references(const Profile& p) {
    std::vector<std::uint64_t> mapping_ids, function_ids, location_ids;
    if (!sorted_ids(p.mappings, "mapping", mapping_ids) || !sorted_ids(p.functions, "function", function_ids) ||
        !sorted_ids(p.locations, "location", location_ids)) {
      return false;
    }
    for (const Location& loc : p.locations) {
      if (loc.mapping_id != 0 && !known(mapping_ids, loc.mapping_id)) {
        return fail("location " + std::to_string(loc.id) + " refers to missing mapping " +
                    std::to_string(loc.mapping_id));
      }
      if (loc.function_id != 0 && !known(function_ids, loc.function_id)) {
        return fail("location " + std::to_string(loc.id) + " refers to missing function " +
                    std::to_string(loc.function_id));
      }
    }
    for (std::size_t i = 0; i < p.samples.size(); ++i) {
      const Sample& s = p.samples[i];
      if (s.values.size() != p.sample_types.size()) {
        return fail("sample #" + std::to_string(i + 1) + " has " + std::to_string(s.values.size()) + " values for " +
                    std::to_string(p.sample_types.size()) + " sample types");
      }
      for (const std::uint64_t id : s.location_ids) {
        if (!known(location_ids, id)) {
          return fail("sample #" + std::to_string(i + 1) + " refers to missing location " + std::to_string(id));
        }
      }
    }
    return true;
  }

  const PprofDecodeOptions& options_;
  std::size_t budget_;
  std::string& error_;
  std::vector<std::string_view> strings_;
  std::size_t counts_[pprof_field::profile::function + 1] = {};
};

// Decodes a .pb.gz body (gzip magic) or raw profile.proto bytes into `out`.
// Never throws; on failure `out` is empty and `error` says what and where.
inline bool decode_pprof(std::string_view gzip_or_raw_bytes, Profile& out, std::string& error,
                         const PprofDecodeOptions& options, PprofWireDetails* details = nullptr) noexcept {
  out = Profile{};
  try {
    // A raw profile.proto cannot start with 0x1f (field 3, wire type 7 does not
    // exist), so the gzip magic is unambiguous. pprof accepts no other wrapping.
    std::string inflated;
    std::string_view raw = gzip_or_raw_bytes;
    if (raw.size() >= 2 && static_cast<std::uint8_t>(raw[0]) == 0x1f && static_cast<std::uint8_t>(raw[1]) == 0x8b) {
      if (!gzip_decompress(raw, inflated, error, options.max_inflated_bytes)) {
        error.insert(0, "pprof: ");
        return false;
      }
      raw = inflated;
    }
    Profile decoded;
    PprofDecoder decoder(options, error);
    if (!decoder.decode(raw, decoded)) return false;
    if (details != nullptr) {
      details->string_table.assign(decoder.string_table().begin(), decoder.string_table().end());
      if (inflated.empty()) {
        details->raw.assign(raw.data(), raw.size());
      } else {
        details->raw = std::move(inflated);
      }
    }
    out = std::move(decoded);
    return true;
  } catch (const std::bad_alloc&) {
    set_error_message(error, "pprof: out of memory while decoding");
  } catch (...) {
    set_error_message(error, "pprof: decoding failed");
  }
  out = Profile{};
  return false;
}

inline bool decode_pprof(std::string_view gzip_or_raw_bytes, Profile& out, std::string& error) noexcept {
  return decode_pprof(gzip_or_raw_bytes, out, error, PprofDecodeOptions{});
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_PPROF_DECODER_HPP_
