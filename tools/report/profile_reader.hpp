// What spanprof-report reads: the files spanprof writes (pprof, gzip'd or not, one
// span's or a batch of many spans; spool files holding a pprof payload), turned
// into one sample tree per span and profile kind.
//
// Every byte is untrusted: a file may be cut short by a crash, belong to another
// program, or be anything a directory happens to hold. read_profile_file() checks
// each index and length before using it and says in one line why it refused a
// file; a refused file leaves the collection as it was. The fuzz target
// tests/fuzz/fuzz_report_reader.cpp feeds it arbitrary bytes.
//
// Frames are stored once for all spans in a tree of (caller, function) nodes, so a
// stack is one node id and the spans of a service share most of their nodes: the
// report stays small with 10,000 spans.
#ifndef SPANPROF_TOOLS_REPORT_PROFILE_READER_HPP_
#define SPANPROF_TOOLS_REPORT_PROFILE_READER_HPP_

#include <spanprof/detail/delivery/spool_format.hpp>
#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/profile/profile.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace spanprof_report {

// One span, gathered from every file that holds some of its samples (a span
// profiled for CPU and wall has two files; a batch holds many spans).
struct SpanSamples {
  std::string span_id;   // lowercase hex, as the span_id label has it
  std::string trace_id;
  std::string name;      // span_name
  std::string reason;    // profile_reason: sampled, slow, error, triggered
  std::int64_t start_unix_ns = 0;  // 0: unknown (a batch does not say when each span started)
  std::int64_t duration_ns = 0;    // 0: unknown, as above
  spanprof::TimeSplit time;        // where its time went, when its profile says (Options::time_split)
  // Per kind (spanprof::ProfileKind): the value (CPU ns, wall ns, bytes allocated) of each stack, by its
  // leaf node; and how many samples were taken (heap: objects allocated).
  std::array<std::unordered_map<std::uint32_t, std::int64_t>, spanprof::profile_kind_count> values;
  // Per kind: the value by source line (Collection::lines) of each sample's leaf.
  std::array<std::unordered_map<std::uint32_t, std::int64_t>, spanprof::profile_kind_count> line_values;
  std::array<std::int64_t, spanprof::profile_kind_count> samples{};
  // Its lock profile's waits (docs/locks.md), by the side it was on, where in its
  // code, and who held the lock.
  struct LockWaits {
    bool held = false;             // the waits were others', for a lock this span held
    std::string site_function;     // the first frame outside the libraries: the lock's
    std::string site_line;         // caller, or where this span released it ("" unknown)
    std::string holder_span_id, holder_span_name, holder_function, holder_location;
    std::int64_t holder_thread = 0;  // 0: unknown
    std::int64_t delay_ns = 0, waits = 0;
  };
  std::vector<LockWaits> lock_waits;
};

// Every span read so far, and the frame tree their stacks point into.
struct Collection {
  static constexpr std::uint32_t root = 0;  // the node above every outermost frame

  std::vector<std::string> functions;  // names, each once
  std::vector<std::string> function_sources;  // functions[i]'s file:first line, or its file; empty: unknown
  std::vector<std::string> lines;  // "file:line" of samples' leaves, each once
  // Node i: (its caller's node, its function). Node 0 is the root.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> nodes{{root, 0}};
  std::vector<SpanSamples> spans;

  // A function by name; its source is the first one any profile gives.
  std::uint32_t function(std::string_view name, std::string_view source = {}) {
    const auto [it, inserted] = function_index_.try_emplace(std::string(name), static_cast<std::uint32_t>(functions.size()));
    if (inserted) {
      functions.push_back(it->first);
      function_sources.emplace_back();
    }
    if (function_sources[it->second].empty() && !source.empty()) function_sources[it->second] = std::string(source);
    return it->second;
  }

  std::uint32_t line(std::string_view file_and_line) {
    const auto [it, inserted] = line_index_.try_emplace(std::string(file_and_line), static_cast<std::uint32_t>(lines.size()));
    if (inserted) lines.push_back(it->first);
    return it->second;
  }

  std::uint32_t child(std::uint32_t parent, std::uint32_t function_id) {
    const std::uint64_t key = static_cast<std::uint64_t>(parent) << 32 | function_id;
    const auto [it, inserted] = node_index_.try_emplace(key, static_cast<std::uint32_t>(nodes.size()));
    if (inserted) nodes.emplace_back(parent, function_id);
    return it->second;
  }

  // The span with these ids, created on first sight.
  SpanSamples& span(std::string_view trace_id, std::string_view span_id) {
    std::string key(trace_id);
    key += '/';
    key += span_id;
    const auto [it, inserted] = span_index_.try_emplace(std::move(key), spans.size());
    if (inserted) {
      SpanSamples& added = spans.emplace_back();
      added.trace_id = std::string(trace_id);
      added.span_id = std::string(span_id);
    }
    return spans[it->second];
  }

 private:
  std::unordered_map<std::string, std::uint32_t> function_index_;
  std::unordered_map<std::string, std::uint32_t> line_index_;
  std::unordered_map<std::uint64_t, std::uint32_t> node_index_;
  std::unordered_map<std::string, std::size_t> span_index_;
};

// A frame that a profile left unnamed, named afterwards (--debug-dir): innermost first.
struct NamedFrame {
  std::string function;
  std::string file;  // empty: unknown
  std::int64_t line = 0;
  std::int64_t start_line = 0;
};

// Where an unnamed location's address is: the GNU build id of the object mapped
// there, and its mapping (as the profile's Mapping gives it).
struct UnnamedAddress {
  std::string_view build_id;
  std::uint64_t mapping_file_offset = 0;
  std::uint64_t mapping_size = 0;
  std::uint64_t offset_in_mapping = 0;
};

struct ReadOptions {
  // A few hundred KiB of gzip can inflate to GiB; spanprof's own profiles are far
  // below this.
  std::size_t max_decompressed_bytes = std::size_t{256} << 20;
  // Names what the profile left unnamed (a stripped program's frames), or says it
  // cannot (false). Empty: such frames are shown by address.
  std::function<bool(const UnnamedAddress&, std::vector<NamedFrame>&)> name_unnamed;
};

namespace detail {

// A bounds-checked cursor over protobuf wire bytes: each read fails rather than
// run past the end.
class Wire {
 public:
  explicit Wire(std::string_view bytes) noexcept : bytes_(bytes) {}
  bool done() const noexcept { return at_ == bytes_.size(); }

  bool varint(std::uint64_t& value) noexcept {
    value = 0;
    for (unsigned shift = 0; shift < 64 && at_ < bytes_.size(); shift += 7) {
      const auto byte = static_cast<std::uint8_t>(bytes_[at_++]);
      value |= std::uint64_t{byte & 0x7fu} << shift;
      if (byte < 0x80) return true;
    }
    return false;
  }

  // The next field's number and wire type, and its value: a varint, or the bytes
  // of a length-delimited field. Fixed-width fields are stepped over.
  bool field(std::uint32_t& number, std::uint32_t& type, std::uint64_t& value, std::string_view& bytes) noexcept {
    std::uint64_t key = 0;
    if (!varint(key) || key >> 3 == 0 || key >> 3 > 0x1fffffff) return false;
    number = static_cast<std::uint32_t>(key >> 3);
    type = static_cast<std::uint32_t>(key & 7);
    switch (type) {
      case 0: return varint(value);
      case 1: return skip(8);
      case 5: return skip(4);
      case 2:
        if (!varint(value) || value > bytes_.size() - at_) return false;
        bytes = bytes_.substr(at_, static_cast<std::size_t>(value));
        at_ += static_cast<std::size_t>(value);
        return true;
      default: return false;
    }
  }

 private:
  bool skip(std::size_t n) noexcept {
    if (n > bytes_.size() - at_) return false;
    at_ += n;
    return true;
  }
  std::string_view bytes_;
  std::size_t at_ = 0;
};

// Appends a repeated integer field's values: packed (type 2) or one per field.
inline bool append_varints(std::uint32_t type, std::uint64_t value, std::string_view packed,
                           std::vector<std::uint64_t>& out) {
  if (type == 0) {
    out.push_back(value);
    return true;
  }
  if (type != 2) return false;
  Wire wire(packed);
  while (!wire.done()) {
    if (!wire.varint(value)) return false;
    out.push_back(value);
  }
  return true;
}

// A message's fields in one pass, handed to `visit(number, type, value, bytes)`,
// which returns false on a field it cannot accept.
template <class Visit>
bool for_each_field(std::string_view message, Visit&& visit) {
  Wire wire(message);
  std::uint32_t number = 0, type = 0;
  while (!wire.done()) {
    std::uint64_t value = 0;
    std::string_view bytes;
    if (!wire.field(number, type, value, bytes) || !visit(number, type, value, bytes)) return false;
  }
  return true;
}

// profile.proto, as far as the report needs it. Messages are kept as bytes until
// the string table, which may come last, is complete.
struct PprofMessages {
  std::vector<std::string_view> strings, sample_types, samples, mappings, locations, functions;
  std::uint64_t default_sample_type = 0;
  std::int64_t time_nanos = 0, duration_nanos = 0;
  std::vector<std::uint64_t> comments;  // string indices
};

// profile.proto's field numbers (google/pprof proto/profile.proto).
namespace field {
inline constexpr std::uint32_t sample_type = 1, sample = 2, mapping = 3, location = 4, function = 5, string_table = 6,
                               time_nanos = 9, duration_nanos = 10, comment = 13, default_sample_type = 14;
inline constexpr std::uint32_t value_type_type = 1;
inline constexpr std::uint32_t sample_location_id = 1, sample_value = 2, sample_label = 3;
inline constexpr std::uint32_t label_key = 1, label_str = 2, label_num = 3;
inline constexpr std::uint32_t mapping_id = 1, mapping_memory_start = 2, mapping_memory_limit = 3,
                               mapping_file_offset = 4, mapping_build_id = 6;
inline constexpr std::uint32_t location_id = 1, location_mapping_id = 2, location_address = 3, location_line = 4;
inline constexpr std::uint32_t line_function_id = 1, line_line = 2;
inline constexpr std::uint32_t function_id = 1, function_name = 2, function_system_name = 3, function_filename = 4,
                               function_start_line = 5;
}  // namespace field

class PprofReader {
 public:
  PprofReader(Collection& into, const ReadOptions& options, std::string& why)
      : into_(into), options_(options), why_(why) {}

  // Reads the uncompressed profile.proto bytes. The spool's record, when the
  // profile came from one, gives the span's timing.
  bool read(std::string_view proto, const spanprof::SpanRecord* spool_record) {
    if (!split(proto)) return fail("malformed protobuf (not a pprof profile, or cut short)");
    if (m_.strings.empty() || !m_.strings[0].empty()) return fail("not a pprof profile (no string table)");
    if (!pick_values()) return false;
    if (!read_mappings() || !read_functions() || !read_locations()) return false;
    return read_samples(spool_record);
  }

 private:
  bool fail(std::string message) {
    why_ = std::move(message);
    return false;
  }

  bool string_at(std::uint64_t index, std::string_view& out) {
    if (index >= m_.strings.size()) return fail("malformed: string index " + std::to_string(index) + " out of range");
    out = m_.strings[static_cast<std::size_t>(index)];
    return true;
  }

  bool split(std::string_view proto) {
    return for_each_field(proto, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view bytes) {
      std::vector<std::string_view>* list = nullptr;
      switch (number) {
        case field::sample_type: list = &m_.sample_types; break;
        case field::sample: list = &m_.samples; break;
        case field::mapping: list = &m_.mappings; break;
        case field::location: list = &m_.locations; break;
        case field::function: list = &m_.functions; break;
        case field::string_table: list = &m_.strings; break;
        case field::time_nanos: m_.time_nanos = static_cast<std::int64_t>(value); return type == 0;
        case field::duration_nanos: m_.duration_nanos = static_cast<std::int64_t>(value); return type == 0;
        case field::default_sample_type: m_.default_sample_type = value; return type == 0;
        case field::comment: return append_varints(type, value, bytes, m_.comments);
        default: return true;  // period: not shown
      }
      if (type != 2) return false;
      list->push_back(bytes);
      return true;
    });
  }

  // Which value of each sample the report shows, and which counts samples: the
  // types spanprof writes (profile_builder.hpp), named as Go's profiles name them.
  bool pick_values() {
    std::vector<std::string_view> types;
    for (const std::string_view message : m_.sample_types) {
      std::uint64_t type_index = 0;
      const bool ok = for_each_field(message, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view) {
        if (number == field::value_type_type) type_index = value;
        return number != field::value_type_type || type == 0;
      });
      std::string_view name;
      if (!ok) return fail("malformed sample type");
      if (!string_at(type_index, name)) return false;
      types.push_back(name);
    }
    auto index_of = [&](std::string_view name) {
      for (std::size_t i = 0; i < types.size(); ++i)
        if (types[i] == name) return static_cast<int>(i);
      return -1;
    };
    if ((value_ = index_of("cpu")) >= 0) {
      kind_ = spanprof::ProfileKind::cpu;
      count_ = index_of("samples");
    } else if ((value_ = index_of("wall")) >= 0) {
      kind_ = spanprof::ProfileKind::wall;
      count_ = index_of("samples");
    } else if ((value_ = index_of("alloc_space")) >= 0) {
      kind_ = spanprof::ProfileKind::heap;
      count_ = index_of("alloc_objects");
    } else if ((value_ = index_of("delay")) >= 0) {
      kind_ = spanprof::ProfileKind::lock;
      count_ = index_of("contentions");
    } else {
      return fail("no cpu, wall, alloc_space or delay values: not a profile spanprof writes");
    }
    return true;
  }

  // The mappings, needed only to name what the profile left unnamed.
  bool read_mappings() {
    if (!options_.name_unnamed) return true;
    for (const std::string_view message : m_.mappings) {
      std::uint64_t id = 0, build_id = 0;
      Mapping mapping;
      const bool ok = for_each_field(message, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view) {
        switch (number) {
          case field::mapping_id: id = value; break;
          case field::mapping_memory_start: mapping.start = value; break;
          case field::mapping_memory_limit: mapping.limit = value; break;
          case field::mapping_file_offset: mapping.file_offset = value; break;
          case field::mapping_build_id: build_id = value; break;
          default: return true;
        }
        return type == 0;
      });
      if (!ok) return fail("malformed mapping");
      if (!string_at(build_id, mapping.build_id)) return false;
      mappings_[id] = mapping;
    }
    return true;
  }

  bool read_functions() {
    for (const std::string_view message : m_.functions) {
      std::uint64_t id = 0, name = 0, system_name = 0, filename = 0, start_line = 0;
      const bool ok = for_each_field(message, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view) {
        if (number == field::function_id) id = value;
        if (number == field::function_name) name = value;
        if (number == field::function_system_name) system_name = value;
        if (number == field::function_filename) filename = value;
        if (number == field::function_start_line) start_line = value;
        return number > field::function_start_line || type == 0;
      });
      std::string_view text, file;
      if (!ok) return fail("malformed function");
      if (!string_at(name != 0 ? name : system_name, text) || !string_at(filename, file)) return false;
      FunctionRead& function = functions_[id];
      function.name = text.empty() ? "(unnamed)" : text;
      function.file = file;
      function.start_line = static_cast<std::int64_t>(start_line);
    }
    return true;
  }

  static std::string source_of(std::string_view file, std::int64_t line) {
    if (file.empty()) return {};
    std::string text(file);
    if (line > 0) text += ':' + std::to_string(line);
    return text;
  }

  // Each location's functions, innermost first (pprof lists inlined functions
  // before the one they were inlined into), and its innermost line; an unnamed
  // one is named by options_.name_unnamed, else by its address.
  bool read_locations() {
    std::vector<NamedFrame> named;
    for (const std::string_view message : m_.locations) {
      std::uint64_t id = 0, address = 0, mapping_id = 0;
      LocationRead location;
      bool known = true;
      const bool ok = for_each_field(message, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view bytes) {
        if (number == field::location_id || number == field::location_address || number == field::location_mapping_id) {
          (number == field::location_id ? id : number == field::location_address ? address : mapping_id) = value;
          return type == 0;
        }
        if (number != field::location_line) return true;
        if (type != 2) return false;
        std::uint64_t function_id = 0, line = 0;
        if (!for_each_field(bytes, [&](std::uint32_t n, std::uint32_t t, std::uint64_t v, std::string_view) {
              if (n == field::line_function_id) function_id = v;
              if (n == field::line_line) line = v;
              return n > field::line_line || t == 0;
            }))
          return false;
        const auto found = functions_.find(function_id);
        if (found == functions_.end()) {
          known = false;
          return true;
        }
        const FunctionRead& function = found->second;
        add_frame(location, function.name, function.file, function.start_line, static_cast<std::int64_t>(line));
        return true;
      });
      if (!ok) return fail("malformed location");
      if (!known) return fail("malformed: a location names a function the profile does not have");
      if (id == 0) return fail("malformed: a location without an id");
      if (location.functions.empty() && name_later(mapping_id, address, named)) {
        for (const NamedFrame& frame : named) add_frame(location, frame.function, frame.file, frame.start_line, frame.line);
      }
      if (location.functions.empty()) location.functions.push_back(into_.function(hex_address(address)));
      locations_[id] = std::move(location);
    }
    return true;
  }

  // A location's next frame out, innermost first; its line is the location's if none
  // further in had one.
  struct LocationRead;
  void add_frame(LocationRead& location, std::string_view function, std::string_view file, std::int64_t start_line,
                 std::int64_t line) {
    location.functions.push_back(into_.function(function, source_of(file, start_line)));
    if (location.line == no_line && !file.empty() && line > 0) location.line = into_.line(source_of(file, line));
    if (kind_ != spanprof::ProfileKind::lock || spanprof::detail::is_library_function(function)) return;
    // A frame without a source file is a library's too (fwrite, above a wait on
    // glibc's own lock), unless no frame has one.
    if (location.site_function == no_function && !file.empty()) {
      location.site_function = location.functions.back();
      if (line > 0) location.site_line = into_.line(source_of(file, line));
    } else if (location.unsourced_site_function == no_function && file.empty()) {
      location.unsourced_site_function = location.functions.back();
    }
  }

  bool name_later(std::uint64_t mapping_id, std::uint64_t address, std::vector<NamedFrame>& named) {
    named.clear();
    if (!options_.name_unnamed) return false;
    const auto mapping = mappings_.find(mapping_id);
    if (mapping == mappings_.end() || mapping->second.build_id.empty()) return false;
    const Mapping& m = mapping->second;
    if (address < m.start || address >= m.limit) return false;
    UnnamedAddress where;
    where.build_id = m.build_id;
    where.mapping_file_offset = m.file_offset;
    where.mapping_size = m.limit - m.start;
    where.offset_in_mapping = address - m.start;
    return options_.name_unnamed(where, named) && !named.empty();
  }

  static std::string hex_address(std::uint64_t address) {
    std::string text = "0x";
    bool leading = true;
    for (int shift = 60; shift >= 0; shift -= 4) {
      const unsigned digit = static_cast<unsigned>(address >> shift) & 0xf;
      if (leading && digit == 0 && shift != 0) continue;
      leading = false;
      text += spanprof::detail::lower_hex_digits[digit];
    }
    return text;
  }

  bool read_samples(const spanprof::SpanRecord* spool_record) {
    // Samples are checked whole before any reaches the collection: a refused
    // file adds nothing.
    struct Read {
      std::string_view trace_id, span_id, name, reason;
      std::uint32_t node;
      std::uint32_t line;
      std::int64_t value, count;
      // A lock sample's: its side, the holder, and the first frame outside the libraries.
      std::string_view lock_role, holder_span_id, holder_span_name, holder_function, holder_location;
      std::int64_t holder_thread;
      std::uint32_t site_function, site_line;
    };
    std::vector<Read> reads;
    reads.reserve(m_.samples.size());
    std::vector<std::uint64_t> location_ids, values;
    std::size_t without_span = 0;
    for (const std::string_view message : m_.samples) {
      location_ids.clear();
      values.clear();
      Read read{};
      read.line = no_line;
      read.site_function = no_function;
      read.site_line = no_line;
      bool labels_ok = true;
      const bool ok = for_each_field(message, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view bytes) {
        if (number == field::sample_location_id) return append_varints(type, value, bytes, location_ids);
        if (number == field::sample_value) return append_varints(type, value, bytes, values);
        if (number != field::sample_label) return true;
        if (type != 2) return false;
        labels_ok = labels_ok && read_label(bytes, read);
        return true;
      });
      if (!ok) return fail("malformed sample");
      if (!labels_ok) return false;
      if (static_cast<std::size_t>(value_) >= values.size()) return fail("malformed: a sample lacks its values");
      if (read.span_id.empty()) ++without_span;
      read.value = static_cast<std::int64_t>(values[static_cast<std::size_t>(value_)]);
      read.count = count_ >= 0 && static_cast<std::size_t>(count_) < values.size()
                       ? static_cast<std::int64_t>(values[static_cast<std::size_t>(count_)])
                       : 1;
      // The stack goes into the tree outermost frame first.
      std::uint32_t node = Collection::root;
      std::uint32_t unsourced_site = no_function;
      for (auto id = location_ids.rbegin(); id != location_ids.rend(); ++id) {
        const auto found = locations_.find(*id);
        if (found == locations_.end()) return fail("malformed: a sample refers to location " + std::to_string(*id) + ", which the profile does not have");
        for (auto function = found->second.functions.rbegin(); function != found->second.functions.rend(); ++function)
          node = into_.child(node, *function);
        read.line = found->second.line;  // the leaf's, last
        if (found->second.site_function != no_function) {  // the innermost such frame, last
          read.site_function = found->second.site_function;
          read.site_line = found->second.site_line;
        } else if (found->second.unsourced_site_function != no_function) {
          unsourced_site = found->second.unsourced_site_function;
        }
      }
      if (read.site_function == no_function) read.site_function = unsourced_site;
      read.node = node;
      reads.push_back(read);
    }
    if (reads.empty()) return fail("no samples");
    // A span profile labels every sample with its span. The process's continuous
    // profile (Options::continuous) labels those taken in a span: the window is
    // the whole process, its spans' parts, and what ran outside any span, each
    // shown as a span of its own. Another program's profile (no span labels, no
    // "spanprof <version>" comment) is not spanprof's to show.
    const bool process_window = without_span > 0;
    if (process_window && !written_by_spanprof())
      return fail("samples without a span_id label, and no spanprof comment: not a spanprof profile");
    const std::string window_id = process_window ? std::to_string(m_.time_nanos) : std::string();
    const std::string process_id = "process-" + window_id, outside_id = "outside-" + window_id;
    // One span's profile says when it ran; a batch's times are the whole window's.
    bool one_span = !process_window;
    for (const Read& read : reads) one_span = one_span && read.span_id == reads[0].span_id && read.trace_id == reads[0].trace_id;
    const auto kind = static_cast<std::size_t>(kind_);
    const auto add = [&](SpanSamples& span, const Read& read) {
      span.values[kind][read.node] += read.value;
      if (read.line != no_line) span.line_values[kind][read.line] += read.value;
      span.samples[kind] += read.count;
    };
    const auto window_span = [&](const std::string& id, const char* name) -> SpanSamples& {
      SpanSamples& span = into_.span("", id);
      span.name = name;
      span.reason = "continuous";
      span.start_unix_ns = m_.time_nanos;
      span.duration_ns = m_.duration_nanos;
      return span;
    };
    for (const Read& read : reads) {
      if (process_window) {
        add(window_span(process_id, "(the whole process)"), read);
        if (read.span_id.empty()) {
          add(window_span(outside_id, "(outside any span)"), read);
          continue;
        }
      }
      SpanSamples& span = into_.span(read.trace_id, read.span_id);
      if (span.name.empty()) span.name = std::string(read.name);
      if (span.reason.empty()) span.reason = std::string(read.reason);
      if (kind_ == spanprof::ProfileKind::lock) add_lock_waits(span, read);
      if (one_span) {
        span.start_unix_ns = spool_record != nullptr ? spool_record->start_unix_ns : m_.time_nanos;
        span.duration_ns = spool_record != nullptr ? spool_record->duration_ns : m_.duration_nanos;
        if (spool_record != nullptr && spool_record->time.measured()) span.time = spool_record->time;
        for (const std::uint64_t index : m_.comments) {
          spanprof::TimeSplit split;
          if (index < m_.strings.size() && spanprof::parse_time_split_comment(m_.strings[index], split)) span.time = split;
        }
      }
      add(span, read);
    }
    return true;
  }

  template <class Read>
  void add_lock_waits(SpanSamples& span, const Read& read) {
    SpanSamples::LockWaits waits;
    waits.held = read.lock_role == "holder";
    if (read.site_function != no_function) waits.site_function = into_.functions[read.site_function];
    if (read.site_line != no_line) waits.site_line = into_.lines[read.site_line];
    waits.holder_span_id = std::string(read.holder_span_id);
    waits.holder_span_name = std::string(read.holder_span_name);
    waits.holder_function = std::string(read.holder_function);
    waits.holder_location = std::string(read.holder_location);
    waits.holder_thread = read.holder_thread;
    for (SpanSamples::LockWaits& known : span.lock_waits) {
      if (known.held == waits.held && known.site_function == waits.site_function && known.site_line == waits.site_line &&
          known.holder_span_id == waits.holder_span_id && known.holder_function == waits.holder_function &&
          known.holder_location == waits.holder_location && known.holder_thread == waits.holder_thread) {
        known.delay_ns += read.value;
        known.waits += read.count;
        return;
      }
    }
    waits.delay_ns = read.value;
    waits.waits = read.count;
    span.lock_waits.push_back(std::move(waits));
  }

  bool written_by_spanprof() const {
    for (const std::uint64_t index : m_.comments)
      if (index < m_.strings.size() && m_.strings[index].substr(0, 9) == "spanprof ") return true;
    return false;
  }

  template <class Read>
  bool read_label(std::string_view message, Read& read) {
    std::uint64_t key = 0, str = 0, num = 0;
    if (!for_each_field(message, [&](std::uint32_t number, std::uint32_t type, std::uint64_t value, std::string_view) {
          if (number == field::label_key) key = value;
          if (number == field::label_str) str = value;
          if (number == field::label_num) num = value;
          return number > field::label_num || type == 0;
        }))
      return fail("malformed label");
    std::string_view key_text, value_text;
    if (!string_at(key, key_text) || !string_at(str, value_text)) return false;
    namespace labels = spanprof::detail;
    if (key_text == labels::trace_id_label) read.trace_id = value_text;
    if (key_text == labels::span_id_label) read.span_id = value_text;
    if (key_text == labels::span_name_label) read.name = value_text;
    if (key_text == labels::profile_reason_label) read.reason = value_text;
    if (key_text == labels::lock_role_label) read.lock_role = value_text;
    if (key_text == labels::holder_span_id_label) read.holder_span_id = value_text;
    if (key_text == labels::holder_span_name_label) read.holder_span_name = value_text;
    if (key_text == labels::holder_function_label) read.holder_function = value_text;
    if (key_text == labels::holder_location_label) read.holder_location = value_text;
    if (key_text == labels::holder_thread_label) read.holder_thread = static_cast<std::int64_t>(num);
    return true;
  }

  static constexpr std::uint32_t no_line = ~std::uint32_t{0};
  static constexpr std::uint32_t no_function = ~std::uint32_t{0};
  struct Mapping {
    std::uint64_t start = 0, limit = 0, file_offset = 0;
    std::string_view build_id;
  };
  struct FunctionRead {
    std::string_view name, file;
    std::int64_t start_line = 0;
  };
  struct LocationRead {
    std::vector<std::uint32_t> functions;  // Collection's, innermost first
    std::uint32_t line = no_line;          // Collection's, the innermost known
    // The innermost function outside the standard and C libraries, and its line
    // (spanprof::detail::is_library_function): where a lock was taken or released.
    std::uint32_t site_function = no_function;
    std::uint32_t site_line = no_line;
    std::uint32_t unsourced_site_function = no_function;  // the same without a source file
  };

  Collection& into_;
  const ReadOptions& options_;
  std::string& why_;
  PprofMessages m_;
  spanprof::ProfileKind kind_ = spanprof::ProfileKind::cpu;
  int value_ = -1, count_ = -1;
  std::unordered_map<std::uint64_t, Mapping> mappings_;
  std::unordered_map<std::uint64_t, FunctionRead> functions_;
  std::unordered_map<std::uint64_t, LocationRead> locations_;
};

inline bool is_gzip(std::string_view bytes) noexcept {
  return bytes.size() >= 2 && static_cast<std::uint8_t>(bytes[0]) == 0x1f && static_cast<std::uint8_t>(bytes[1]) == 0x8b;
}

// A spool file names its uploader in a record of its own, and decode() takes the
// name it expects: read it first.
inline std::string_view spool_uploader(std::string_view file) noexcept {
  namespace format = spanprof::detail::spool_format;
  if (file.size() < format::header_size + format::crc_size) return {};
  std::size_t at = format::header_size;
  const std::size_t end = file.size() - format::crc_size;
  while (end - at >= format::record_header_size) {
    const std::uint64_t id = format::get_le(file.data() + at, 4);
    const std::uint64_t size = format::get_le(file.data() + at + 4, 8);
    at += format::record_header_size;
    if (size > end - at) return {};
    if (id == static_cast<std::uint32_t>(format::Field::uploader)) return file.substr(at, static_cast<std::size_t>(size));
    at += static_cast<std::size_t>(size);
  }
  return {};
}

inline bool is_spool_file(std::string_view bytes) noexcept {
  namespace format = spanprof::detail::spool_format;
  return bytes.size() >= sizeof format::magic && bytes.compare(0, sizeof format::magic, std::string_view(format::magic, sizeof format::magic)) == 0;
}

// The pprof inside a Pyroscope push request (PushRequest.series[0].samples[0].
// raw_profile, as delivery/pyroscope_uploader.hpp writes it), or "" when `payload`
// is not one. spanprof's pprof is always gzip'd, which tells the two apart.
inline std::string_view pyroscope_push_profile(std::string_view payload) {
  constexpr std::uint32_t push_request_series = 1, series_samples = 2, sample_raw_profile = 1;
  std::string_view found;
  auto nested = [&found](std::uint32_t wanted, auto&& inner) {
    return [&found, wanted, inner](std::uint32_t number, std::uint32_t type, std::uint64_t, std::string_view bytes) {
      if (number == wanted && type == 2 && found.empty()) return inner(bytes);
      return true;
    };
  };
  const bool ok = for_each_field(payload, nested(push_request_series, [&](std::string_view series) {
    return for_each_field(series, nested(series_samples, [&](std::string_view sample) {
      return for_each_field(sample, nested(sample_raw_profile, [&](std::string_view raw) {
        if (is_gzip(raw)) found = raw;
        return true;
      }));
    }));
  }));
  return ok ? found : std::string_view();
}

inline bool read_pprof_bytes(std::string_view bytes, const spanprof::SpanRecord* spool_record, Collection& into,
                             const ReadOptions& options, std::string& why) {
  std::string inflated;
  if (is_gzip(bytes)) {
    if (const spanprof::Status inflated_ok =
            spanprof::detail::gzip_decompress(bytes, inflated, options.max_decompressed_bytes);
        !inflated_ok) {
      why = inflated_ok.message();
      return false;
    }
    bytes = inflated;
  }
  return PprofReader(into, options, why).read(bytes, spool_record);
}

}  // namespace detail

// Adds the spans of one file's bytes to `into`: a pprof profile (gzip'd or not)
// or a spool file whose payload holds one (the file, callback and Pyroscope
// uploaders'; an OTLP request is refused). On refusal returns false, says why in one
// line in `why`, and leaves `into` as it was (the frame tree may have grown, which
// changes no span). Never throws but std::bad_alloc.
inline bool read_profile_file(std::string_view bytes, Collection& into, std::string& why, const ReadOptions& options = {}) {
  if (bytes.empty()) {
    why = "empty file";
    return false;
  }
  // The readers check a whole file before adding any of its samples.
  bool ok = false;
  if (detail::is_spool_file(bytes)) {
    spanprof::EncodedProfile record;
    std::string payload;
    const std::string uploader(detail::spool_uploader(bytes));
    if (const spanprof::Status decoded = spanprof::detail::spool_format::decode(bytes, uploader, record, payload);
        !decoded) {
      why = "spool file: " + decoded.message();
      return false;
    }
    std::string_view pprof = payload;
    if (!detail::is_gzip(pprof) && !detail::pyroscope_push_profile(pprof).empty())
      pprof = detail::pyroscope_push_profile(pprof);
    ok = detail::read_pprof_bytes(pprof, record.span_count == 1 ? &record.record : nullptr, into, options, why);
    if (!ok) why = "spool file of uploader '" + uploader + "': payload: " + why;
  } else {
    ok = detail::read_pprof_bytes(bytes, nullptr, into, options, why);
  }
  return ok;
}

}  // namespace spanprof_report

#endif  // SPANPROF_TOOLS_REPORT_PROFILE_READER_HPP_
