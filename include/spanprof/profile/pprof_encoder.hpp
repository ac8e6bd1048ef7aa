// Profile -> pprof. Writes google/pprof's proto/profile.proto (proto3) so the
// output opens in `go tool pprof`, Grafana Pyroscope, Parca and friends.
#ifndef SPANPROF_PROFILE_PPROF_ENCODER_HPP_
#define SPANPROF_PROFILE_PPROF_ENCODER_HPP_

#include <spanprof/detail/base/index_table.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>
#include <spanprof/profile/profile.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// Field numbers from profile.proto. Keeping them named makes a mismatch with the
// schema visible in review instead of hiding behind a bare integer.
namespace pprof_field {
namespace profile {
inline constexpr std::uint32_t sample_type = 1, sample = 2, mapping = 3, location = 4, function = 5,
                               string_table = 6, drop_frames = 7, keep_frames = 8, time_nanos = 9,
                               duration_nanos = 10, period_type = 11, period = 12, comment = 13,
                               default_sample_type = 14;
}
namespace value_type {
inline constexpr std::uint32_t type = 1, unit = 2;
}
namespace sample {
inline constexpr std::uint32_t location_id = 1, value = 2, label = 3;
}
namespace label {
inline constexpr std::uint32_t key = 1, str = 2, num = 3, num_unit = 4;
}
namespace mapping {
inline constexpr std::uint32_t id = 1, memory_start = 2, memory_limit = 3, file_offset = 4, filename = 5,
                               build_id = 6, has_functions = 7, has_filenames = 8, has_line_numbers = 9,
                               has_inline_frames = 10;
}
namespace location {
inline constexpr std::uint32_t id = 1, mapping_id = 2, address = 3, line = 4, is_folded = 5;
}
namespace line {
inline constexpr std::uint32_t function_id = 1, line = 2, column = 3;
}
namespace function {
inline constexpr std::uint32_t id = 1, name = 2, system_name = 3, filename = 4, start_line = 5;
}
}  // namespace pprof_field

// pprof refers to every string by its index in one table whose entry 0 must be "".
// Profiles repeat the same label keys, span ids and file names on every sample, so
// deduplication is most of the size win. Entries view the Profile's own strings,
// which outlive the encoding.
class PprofStringTable {
 public:
  PprofStringTable() { intern(std::string_view{}); }

  std::int64_t intern(std::string_view text) {
    const std::size_t hash = std::hash<std::string_view>{}(text);
    std::size_t at = index_.find(hash, [&](std::size_t position) { return entries_[position] == text; });
    if (at == IndexTable::none) {
      at = entries_.size();
      entries_.push_back(text);
      index_.insert(hash, at);
    }
    return static_cast<std::int64_t>(at);
  }

  const std::vector<std::string_view>& entries() const noexcept { return entries_; }

 private:
  std::vector<std::string_view> entries_;
  IndexTable index_;
};

inline void write_pprof_value_type(ProtobufWriter& writer, std::uint32_t field, const ValueType& value_type,
                                   PprofStringTable& strings) {
  namespace f = pprof_field::value_type;
  writer.message_field(field, [&](ProtobufWriter& body) {
    body.int64_field_if_nonzero(f::type, strings.intern(value_type.type));
    body.int64_field_if_nonzero(f::unit, strings.intern(value_type.unit));
  });
}

inline void write_pprof_label(ProtobufWriter& writer, const Label& label, PprofStringTable& strings) {
  namespace f = pprof_field::label;
  writer.message_field(pprof_field::sample::label, [&](ProtobufWriter& body) {
    body.int64_field_if_nonzero(f::key, strings.intern(label.key));
    if (!label.str.empty() || !label.is_num) {
      body.int64_field_if_nonzero(f::str, strings.intern(label.str));
    } else {
      body.int64_field_if_nonzero(f::num, label.num);
      body.int64_field_if_nonzero(f::num_unit, strings.intern(label.num_unit));
    }
  });
}

// Each span's labels as string-table indices, interned once per span rather than
// once per sample (a window merges thousands of samples of hundreds of spans).
class PprofSpanLabels {
 public:
  PprofSpanLabels(const std::vector<SpanRecord>& spans, PprofStringTable& strings) {
    hex_.reserve(2 * spans.size());  // the table views these strings: no reallocation
    labels_.resize(spans.size());
    for (std::size_t i = 0; i < spans.size(); ++i) {
      for_each_span_label(spans[i], [&](const char* key, std::string_view value) {
        if (key == trace_id_label || key == span_id_label) value = hex_.emplace_back(value);
        labels_[i].push_back({strings.intern(key), strings.intern(value)});
      });
    }
  }

  void write(ProtobufWriter& sample, std::uint32_t span) const {
    if (span == 0 || span > labels_.size()) return;
    for (const auto& label : labels_[span - 1]) {  // not a structured binding: C++17 lambdas cannot capture one
      sample.message_field(pprof_field::sample::label, [&](ProtobufWriter& body) {
        body.int64_field_if_nonzero(pprof_field::label::key, label.first);
        body.int64_field_if_nonzero(pprof_field::label::str, label.second);
      });
    }
  }

 private:
  std::vector<std::string> hex_;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> labels_;
};

inline void write_pprof_sample(ProtobufWriter& writer, const Sample& sample, const PprofSpanLabels& span_labels,
                               PprofStringTable& strings) {
  namespace f = pprof_field::sample;
  writer.message_field(pprof_field::profile::sample, [&](ProtobufWriter& body) {
    body.packed_uint64_field(f::location_id, sample.location_ids);
    body.packed_int64_field(f::value, sample.values);
    for (const Label& label : sample.labels) write_pprof_label(body, label, strings);
    span_labels.write(body, sample.span);
  });
}

inline void write_pprof_mapping(ProtobufWriter& writer, const Mapping& mapping, PprofStringTable& strings) {
  namespace f = pprof_field::mapping;
  writer.message_field(pprof_field::profile::mapping, [&](ProtobufWriter& body) {
    body.uint64_field_if_nonzero(f::id, mapping.id);
    body.uint64_field_if_nonzero(f::memory_start, mapping.memory_start);
    body.uint64_field_if_nonzero(f::memory_limit, mapping.memory_limit);
    body.uint64_field_if_nonzero(f::file_offset, mapping.file_offset);
    body.int64_field_if_nonzero(f::filename, strings.intern(mapping.filename));
    body.int64_field_if_nonzero(f::build_id, strings.intern(mapping.build_id));
    body.bool_field_if_true(f::has_functions, mapping.has_functions);
    body.bool_field_if_true(f::has_filenames, mapping.has_filenames);
    body.bool_field_if_true(f::has_line_numbers, mapping.has_line_numbers);
    body.bool_field_if_true(f::has_inline_frames, mapping.has_inline_frames);
  });
}

inline void write_pprof_location(ProtobufWriter& writer, const Location& location) {
  namespace f = pprof_field::location;
  writer.message_field(pprof_field::profile::location, [&](ProtobufWriter& body) {
    body.uint64_field_if_nonzero(f::id, location.id);
    body.uint64_field_if_nonzero(f::mapping_id, location.mapping_id);
    body.uint64_field_if_nonzero(f::address, location.address);
    // An unsymbolized location has no Line at all; pprof then shows its address.
    // Inlined functions first, innermost first; the function they were inlined
    // into last.
    if (location.function_id != 0) {
      for (const Line& inlined : location.inlined) {
        body.message_field(f::line, [&](ProtobufWriter& line) {
          line.uint64_field(pprof_field::line::function_id, inlined.function_id);
          line.int64_field_if_nonzero(pprof_field::line::line, inlined.line);
        });
      }
      body.message_field(f::line, [&](ProtobufWriter& line) {
        line.uint64_field(pprof_field::line::function_id, location.function_id);
        line.int64_field_if_nonzero(pprof_field::line::line, location.line);
      });
    }
  });
}

inline void write_pprof_function(ProtobufWriter& writer, const Function& function, PprofStringTable& strings) {
  namespace f = pprof_field::function;
  writer.message_field(pprof_field::profile::function, [&](ProtobufWriter& body) {
    body.uint64_field_if_nonzero(f::id, function.id);
    body.int64_field_if_nonzero(f::name, strings.intern(function.name));
    body.int64_field_if_nonzero(f::system_name, strings.intern(function.system_name));
    body.int64_field_if_nonzero(f::filename, strings.intern(function.filename));
    body.int64_field_if_nonzero(f::start_line, function.start_line);
  });
}

// Throws std::bad_alloc: the public calls below turn it into a Status.
inline void write_pprof(const Profile& profile, std::string& out) {
  namespace f = detail::pprof_field::profile;
  detail::ProtobufWriter writer(out);
  detail::PprofStringTable strings;

  for (const ValueType& type : profile.sample_types) {
    detail::write_pprof_value_type(writer, f::sample_type, type, strings);
  }
  const detail::PprofSpanLabels span_labels(profile.spans, strings);
  for (const Sample& sample : profile.samples) detail::write_pprof_sample(writer, sample, span_labels, strings);
  for (const Mapping& mapping : profile.mappings) detail::write_pprof_mapping(writer, mapping, strings);
  for (const Location& location : profile.locations) detail::write_pprof_location(writer, location);
  for (const Function& function : profile.functions) detail::write_pprof_function(writer, function, strings);

  // Fields after the string table refer to it too; intern their strings first so
  // the table is complete when it is written.
  const std::int64_t period_type_index = strings.intern(profile.period_type.type);
  const std::int64_t period_unit_index = strings.intern(profile.period_type.unit);
  std::vector<std::int64_t> comment_indices;
  comment_indices.reserve(profile.comments.size());
  for (const std::string& comment : profile.comments) comment_indices.push_back(strings.intern(comment));
  const std::int64_t default_sample_type_index = strings.intern(profile.default_sample_type);

  // Every entry is written, the empty one at index 0 included: a repeated string
  // keeps its position even when it is the default value.
  for (const std::string_view entry : strings.entries()) writer.bytes_field(f::string_table, entry);

  writer.int64_field_if_nonzero(f::time_nanos, profile.time_nanos);
  writer.int64_field_if_nonzero(f::duration_nanos, profile.duration_nanos);
  if (period_type_index != 0 || period_unit_index != 0) {
    writer.message_field(f::period_type, [&](detail::ProtobufWriter& body) {
      body.int64_field_if_nonzero(detail::pprof_field::value_type::type, period_type_index);
      body.int64_field_if_nonzero(detail::pprof_field::value_type::unit, period_unit_index);
    });
  }
  writer.int64_field_if_nonzero(f::period, profile.period);
  writer.packed_int64_field(f::comment, comment_indices);
  writer.int64_field_if_nonzero(f::default_sample_type, default_sample_type_index);
}

}  // namespace detail

// The uncompressed profile.proto bytes. On failure (encoding_failed) `out` is empty.
inline Status encode_pprof(const Profile& profile, std::string& out) noexcept {
  out.clear();
  SPANPROF_TRY {
    detail::write_pprof(profile, out);
    return Status::ok();
  } SPANPROF_CATCH_STD(e) {
    out.clear();
    return detail::status_from_exception(ErrorCode::encoding_failed, "pprof: encoding failed: ", e.what());
  } SPANPROF_CATCH_ALL {
    out.clear();
    return Status(ErrorCode::encoding_failed, "pprof: encoding failed");
  }
  return Status(ErrorCode::internal, "unreachable");  // -fno-exceptions: the try is an if (true)
}

// The body of a .pb.gz file, as `go tool pprof` reads it. On failure
// (encoding_failed) `out` is empty.
inline Status encode_pprof_gzip(const Profile& profile, std::string& out) noexcept {
  std::string raw;
  if (Status encoded = encode_pprof(profile, raw); !encoded) {
    out.clear();
    return encoded;
  }
  return detail::gzip_compress(raw, out);
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_PPROF_ENCODER_HPP_
