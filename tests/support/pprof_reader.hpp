// Test-side pprof decoder: gunzip + profile.proto -> spanprof::Profile, with the
// string table resolved, so tests assert on the bytes the encoder really wrote
// rather than on the model that went in. Deliberately independent of the writer.
#pragma once

#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/profile/profile.hpp>

#include "command.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace pprof_test {

// A bounds-checked protobuf wire reader; every read reports failure instead of
// running past the end.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data) : data_(data) {}

  bool at_end() const { return pos_ >= data_.size(); }

  bool varint(std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  bool key(std::uint32_t& field, std::uint32_t& wire_type) {
    std::uint64_t tag = 0;
    if (!varint(tag)) return false;
    field = static_cast<std::uint32_t>(tag >> 3);
    wire_type = static_cast<std::uint32_t>(tag & 7);
    return field != 0;
  }

  bool bytes(std::string_view& out) {
    std::uint64_t length = 0;
    if (!varint(length) || length > data_.size() - pos_) return false;
    out = data_.substr(pos_, static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return true;
  }

  bool skip(std::uint32_t wire_type) {
    std::uint64_t ignored = 0;
    std::string_view ignored_bytes;
    switch (wire_type) {
      case 0: return varint(ignored);
      case 1: return advance(8);
      case 2: return bytes(ignored_bytes);
      case 5: return advance(4);
      default: return false;
    }
  }

  // Repeated varints arrive packed (wire type 2) or one per key (wire type 0);
  // decoders must accept both.
  bool repeated_varint(std::uint32_t wire_type, std::vector<std::uint64_t>& out) {
    std::uint64_t value = 0;
    if (wire_type == 0) {
      if (!varint(value)) return false;
      out.push_back(value);
      return true;
    }
    if (wire_type != 2) return false;
    std::string_view packed;
    if (!bytes(packed)) return false;
    ProtoReader inner(packed);
    while (!inner.at_end()) {
      if (!inner.varint(value)) return false;
      out.push_back(value);
    }
    return true;
  }

 private:
  bool advance(std::size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }

  std::string_view data_;
  std::size_t pos_ = 0;
};

struct DecodedPprof {
  spanprof::Profile profile;
  std::vector<std::string> string_table;  // as stored, index 0 included
  std::string raw;                        // the uncompressed profile.proto bytes
};

namespace detail {

struct Decoder {
  DecodedPprof& out;
  std::string& error;

  bool fail(const std::string& message) {
    error = "pprof decode: " + message;
    return false;
  }

  bool string_at(std::uint64_t index, std::string& text) {
    if (index >= out.string_table.size()) return fail("string index " + std::to_string(index) + " out of range");
    text = out.string_table[static_cast<std::size_t>(index)];
    return true;
  }

  bool value_type(std::string_view bytes, spanprof::ValueType& vt) {
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad ValueType key");
      std::uint64_t v = 0;
      if ((field == 1 || field == 2) && wire == 0) {
        if (!reader.varint(v) || !string_at(v, field == 1 ? vt.type : vt.unit)) return fail("bad ValueType");
      } else if (!reader.skip(wire)) {
        return fail("bad ValueType field");
      }
    }
    return true;
  }

  bool label(std::string_view bytes, spanprof::Label& label) {
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    bool has_str = false, has_num = false;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad Label key");
      std::uint64_t v = 0;
      if (field >= 1 && field <= 4 && wire == 0) {
        if (!reader.varint(v)) return fail("bad Label varint");
        if (field == 1 && !string_at(v, label.key)) return false;
        if (field == 2) {
          if (!string_at(v, label.str)) return false;
          has_str = v != 0;
        }
        if (field == 3) {
          label.num = static_cast<std::int64_t>(v);
          has_num = true;
        }
        if (field == 4) {
          if (!string_at(v, label.num_unit)) return false;
          has_num = true;
        }
      } else if (!reader.skip(wire)) {
        return fail("bad Label field");
      }
    }
    label.is_num = !has_str && has_num;
    return true;
  }

  bool sample(std::string_view bytes, spanprof::Sample& sample) {
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::vector<std::uint64_t> values;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad Sample key");
      if (field == 1) {
        if (!reader.repeated_varint(wire, sample.location_ids)) return fail("bad Sample.location_id");
      } else if (field == 2) {
        if (!reader.repeated_varint(wire, values)) return fail("bad Sample.value");
      } else if (field == 3 && wire == 2) {
        std::string_view nested;
        sample.labels.emplace_back();
        if (!reader.bytes(nested) || !label(nested, sample.labels.back())) return fail("bad Sample.label");
      } else if (!reader.skip(wire)) {
        return fail("bad Sample field");
      }
    }
    for (const std::uint64_t v : values) sample.values.push_back(static_cast<std::int64_t>(v));
    return true;
  }

  bool mapping(std::string_view bytes, spanprof::Mapping& m) {
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad Mapping key");
      std::uint64_t v = 0;
      if (wire != 0) {
        if (!reader.skip(wire)) return fail("bad Mapping field");
        continue;
      }
      if (!reader.varint(v)) return fail("bad Mapping varint");
      switch (field) {
        case 1: m.id = v; break;
        case 2: m.memory_start = v; break;
        case 3: m.memory_limit = v; break;
        case 4: m.file_offset = v; break;
        case 5: if (!string_at(v, m.filename)) return false; break;
        case 6: if (!string_at(v, m.build_id)) return false; break;
        case 7: m.has_functions = v != 0; break;
        default: break;
      }
    }
    return true;
  }

  bool location(std::string_view bytes, spanprof::Location& loc) {
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    std::vector<spanprof::Line> lines;  // innermost first, as pprof lists them
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad Location key");
      std::uint64_t v = 0;
      if (field == 4 && wire == 2) {
        std::string_view line_bytes;
        if (!reader.bytes(line_bytes)) return fail("bad Location.line");
        ProtoReader line(line_bytes);
        std::uint32_t line_field = 0, line_wire = 0;
        spanprof::Line decoded;
        while (!line.at_end()) {
          if (!line.key(line_field, line_wire)) return fail("bad Line key");
          if ((line_field == 1 || line_field == 2) && line_wire == 0) {
            if (!line.varint(v)) return fail("bad Line varint");
            if (line_field == 1) decoded.function_id = v;
            else decoded.line = static_cast<std::int64_t>(v);
          } else if (!line.skip(line_wire)) {
            return fail("bad Line field");
          }
        }
        lines.push_back(decoded);
      } else if (wire == 0 && field >= 1 && field <= 3) {
        if (!reader.varint(v)) return fail("bad Location varint");
        if (field == 1) loc.id = v;
        if (field == 2) loc.mapping_id = v;
        if (field == 3) loc.address = v;
      } else if (!reader.skip(wire)) {
        return fail("bad Location field");
      }
    }
    // The model's function is the last line's (the one the others were inlined into).
    if (!lines.empty()) {
      loc.function_id = lines.back().function_id;
      loc.line = lines.back().line;
      lines.pop_back();
      loc.inlined = std::move(lines);
    }
    return true;
  }

  bool function(std::string_view bytes, spanprof::Function& fn) {
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad Function key");
      std::uint64_t v = 0;
      if (wire != 0) {
        if (!reader.skip(wire)) return fail("bad Function field");
        continue;
      }
      if (!reader.varint(v)) return fail("bad Function varint");
      if (field == 1) fn.id = v;
      if (field == 2 && !string_at(v, fn.name)) return false;
      if (field == 3 && !string_at(v, fn.system_name)) return false;
      if (field == 4 && !string_at(v, fn.filename)) return false;
      if (field == 5) fn.start_line = static_cast<std::int64_t>(v);
      if (field == 4 && !string_at(v, fn.filename)) return false;
    }
    return true;
  }

  // Two passes: the string table may sit anywhere in the message, so sub-messages
  // are collected first and resolved once the whole table is known.
  bool profile(std::string_view bytes) {
    std::vector<std::pair<std::uint32_t, std::string_view>> messages;
    std::vector<std::uint64_t> comment_indices;
    bool period_type_present = false;
    std::string_view period_type_bytes;
    std::uint64_t default_sample_type = 0;
    ProtoReader reader(bytes);
    std::uint32_t field = 0, wire = 0;
    spanprof::Profile& p = out.profile;
    while (!reader.at_end()) {
      if (!reader.key(field, wire)) return fail("bad Profile key");
      std::string_view nested;
      std::uint64_t v = 0;
      if (field == 13) {
        if (!reader.repeated_varint(wire, comment_indices)) return fail("bad Profile.comment");
      } else if (wire == 2 && (field <= 6 || field == 11)) {
        if (!reader.bytes(nested)) return fail("bad length-delimited field " + std::to_string(field));
        if (field == 6) {
          out.string_table.emplace_back(nested);
        } else if (field == 11) {
          period_type_present = true;
          period_type_bytes = nested;
        } else {
          messages.emplace_back(field, nested);
        }
      } else if (wire == 0) {
        if (!reader.varint(v)) return fail("bad Profile varint");
        if (field == 9) p.time_nanos = static_cast<std::int64_t>(v);
        if (field == 10) p.duration_nanos = static_cast<std::int64_t>(v);
        if (field == 12) p.period = static_cast<std::int64_t>(v);
        if (field == 14) default_sample_type = v;
      } else if (!reader.skip(wire)) {
        return fail("bad Profile field " + std::to_string(field));
      }
    }
    if (out.string_table.empty() || !out.string_table[0].empty()) {
      return fail("string_table must start with the empty string");
    }
    for (const auto& [message_field, message_bytes] : messages) {
      bool ok = true;
      switch (message_field) {
        case 1: ok = value_type(message_bytes, p.sample_types.emplace_back()); break;
        case 2: ok = sample(message_bytes, p.samples.emplace_back()); break;
        case 3: ok = mapping(message_bytes, p.mappings.emplace_back()); break;
        case 4: ok = location(message_bytes, p.locations.emplace_back()); break;
        case 5: ok = function(message_bytes, p.functions.emplace_back()); break;
        default: break;
      }
      if (!ok) return false;
    }
    if (period_type_present && !value_type(period_type_bytes, p.period_type)) return false;
    for (const std::uint64_t index : comment_indices) {
      if (!string_at(index, p.comments.emplace_back())) return false;
    }
    return string_at(default_sample_type, p.default_sample_type);
  }
};

}  // namespace detail

// Accepts a .pb.gz body or raw profile.proto bytes.
inline bool decode_pprof(std::string_view file_bytes, DecodedPprof& out, std::string& error) {
  out = DecodedPprof{};
  if (file_bytes.size() >= 2 && static_cast<std::uint8_t>(file_bytes[0]) == 0x1f &&
      static_cast<std::uint8_t>(file_bytes[1]) == 0x8b) {
    if (const spanprof::Status inflated = spanprof::detail::gzip_decompress(file_bytes, out.raw); !inflated) {
      error = inflated.message();
      return false;
    }
  } else {
    out.raw.assign(file_bytes.data(), file_bytes.size());
  }
  detail::Decoder decoder{out, error};
  return decoder.profile(out.raw);
}

// A sample's string labels by key (pprof allows repeats; tests use one per key).
inline std::map<std::string, std::string> labels_of(const spanprof::Sample& sample) {
  std::map<std::string, std::string> labels;
  for (const spanprof::Label& label : sample.labels) {
    if (!label.is_num) labels[label.key] = label.str;
  }
  return labels;
}

// The function name of the sample's innermost frame (an inlined one, when the
// location has them), or "" when unsymbolized.
inline std::string leaf_function(const spanprof::Profile& profile, const spanprof::Sample& sample) {
  if (sample.location_ids.empty()) return {};
  for (const spanprof::Location& location : profile.locations) {
    if (location.id != sample.location_ids.front()) continue;
    const std::uint64_t innermost = location.inlined.empty() ? location.function_id : location.inlined.front().function_id;
    for (const spanprof::Function& function : profile.functions) {
      if (function.id == innermost && innermost != 0) return function.name;
    }
    return {};
  }
  return {};
}

// Every function name of a location, innermost first, one per line: the inlined
// functions and the one they were inlined into.
inline std::string location_functions(const spanprof::Profile& profile, const spanprof::Location& location) {
  std::string names;
  const auto add = [&](std::uint64_t id) {
    for (const spanprof::Function& function : profile.functions)
      if (function.id == id && id != 0) names += function.name + "\n";
  };
  for (const spanprof::Line& line : location.inlined) add(line.function_id);
  add(location.function_id);
  return names;
}

// Runs `cmd` through the shell with stderr folded into stdout; true on exit status 0.
inline bool run_command(const std::string& cmd, std::string& output) {
  auto result = spanprof_test::capture_command(cmd);
  output = std::move(result.output);
  return result.exit_code == 0;
}

// Writes `bytes` to a new file in /tmp named for this process, ending in `suffix`,
// for a command to read (the caller removes it); its path.
inline std::string write_temp_file(const std::string& bytes, const char* suffix) {
  static std::atomic<int> counter{0};
  const std::string path =
      "/tmp/spanprof-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + suffix;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace pprof_test
