// Profile -> OTLP profiles: the body an OTLP/HTTP exporter POSTs to
// /v1development/profiles as application/x-protobuf (the uploader gzips it).
//
// Schema: open-telemetry/opentelemetry-proto v1.11.0, read at commit
// ac2c4b5d1f3a6079de62f9afec860158ecc8af09 (v1.11.0-16, whose profiles,
// collector/profiles, common and resource protos are identical to v1.11.0's).
// The profiles signal is Alpha and its shapes changed between releases (sample
// types, attribute tables, stacks), so the field constants below are for exactly
// that version; re-read the protos before bumping it.
//
// How a pprof-shaped Profile maps onto that schema:
//  - one OTLP Profile per pprof sample type, since an OTLP Profile has exactly
//    one sample_type; all of them share the request's ProfilesDictionary. The
//    pprof default sample type goes first because viewers show profiles[0].
//  - a pprof sample becomes one Sample per Profile, with values = {its value for
//    that type}, its stack interned in stack_table, its labels as
//    KeyValueAndUnit entries in attribute_table, and link_index naming the span.
//  - link_table = {zero link, one link per span}: the trace <-> profile join
//    that OTLP receivers use instead of pprof's trace_id/span_id labels (which
//    stay as attributes for Pyroscope-style matching). A sample's link is its
//    span's record (Profile::spans), so a profile merging many spans (batched
//    delivery) links each sample to its span; a sample without one takes the
//    record the request is encoded for.
//  - samples with the same stack, attributes and link are merged (values summed),
//    as the schema asks.
//  - mappings, locations and functions are copied only when a sample reaches
//    them (dictionaries SHOULD NOT hold orphans); pprof's 1-based ids become
//    table indices, entry 0 being the zero value the schema requires.
#ifndef SPANPROF_PROFILE_OTLP_ENCODER_HPP_
#define SPANPROF_PROFILE_OTLP_ENCODER_HPP_

#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/profile/profile_builder.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/span/span_context.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

inline constexpr std::string_view otlp_profiles_http_path = "/v1development/profiles";
inline constexpr std::string_view otlp_profiles_content_type = "application/x-protobuf";

// Resource attributes (service.name, deployment.environment.name, ...), sent as
// string values. Keys must be unique, as the Resource message requires.
struct OtlpResource {
  std::vector<std::pair<std::string, std::string>> attributes;
};

namespace detail {

// Field numbers of opentelemetry-proto v1.11.0, named so a schema bump is a
// reviewable diff rather than a hunt for integers.
namespace otlp_field {
// collector.profiles.v1development.ExportProfilesServiceRequest
namespace request { inline constexpr std::uint32_t resource_profiles = 1, dictionary = 2; }
namespace resource_profiles { inline constexpr std::uint32_t resource = 1, scope_profiles = 2, schema_url = 3; }
namespace resource { inline constexpr std::uint32_t attributes = 1, dropped_attributes_count = 2; }  // resource.v1
namespace key_value { inline constexpr std::uint32_t key = 1, value = 2, key_strindex = 3; }  // common.v1
namespace any_value {  // common.v1.AnyValue, a oneof
inline constexpr std::uint32_t string_value = 1, bool_value = 2, int_value = 3, double_value = 4, bytes_value = 7,
                               string_value_strindex = 8;
}
namespace scope_profiles { inline constexpr std::uint32_t scope = 1, profiles = 2, schema_url = 3; }
namespace scope { inline constexpr std::uint32_t name = 1, version = 2, attributes = 3; }  // InstrumentationScope
namespace profile {
inline constexpr std::uint32_t sample_type = 1, samples = 2, time_unix_nano = 3, duration_nano = 4, period_type = 5,
                               period = 6, profile_id = 7, dropped_attributes_count = 8, original_payload_format = 9,
                               original_payload = 10, attribute_indices = 11;
}
namespace value_type { inline constexpr std::uint32_t type_strindex = 1, unit_strindex = 2; }
namespace sample {
inline constexpr std::uint32_t stack_index = 1, attribute_indices = 2, link_index = 3, values = 4,
                               timestamps_unix_nano = 5;
}
namespace dictionary {
inline constexpr std::uint32_t mapping_table = 1, location_table = 2, function_table = 3, link_table = 4,
                               string_table = 5, attribute_table = 6, stack_table = 7;
}
namespace mapping {
inline constexpr std::uint32_t memory_start = 1, memory_limit = 2, file_offset = 3, filename_strindex = 4,
                               attribute_indices = 5;
}
namespace location { inline constexpr std::uint32_t mapping_index = 1, address = 2, lines = 3, attribute_indices = 4; }
namespace line { inline constexpr std::uint32_t function_index = 1, line = 2, column = 3; }
namespace function {
inline constexpr std::uint32_t name_strindex = 1, system_name_strindex = 2, filename_strindex = 3, start_line = 4;
}
namespace link { inline constexpr std::uint32_t trace_id = 1, span_id = 2; }
namespace key_value_and_unit { inline constexpr std::uint32_t key_strindex = 1, value = 2, unit_strindex = 3; }
namespace stack { inline constexpr std::uint32_t location_indices = 1; }
}  // namespace otlp_field

// Semantic-convention keys: the GNU build id and OpenTelemetry's own file id have no
// Mapping field of their own, and profile.frame.type tells receivers how to
// symbolize (every spanprof frame is native).
inline constexpr std::string_view otlp_build_id_key = "process.executable.build_id.gnu";
inline constexpr std::string_view otlp_htl_hash_key = "process.executable.build_id.htlhash";
inline constexpr std::string_view otlp_frame_type_key = "profile.frame.type";

// Interns everything one request refers to, then writes it. Every index is
// assigned before anything is written, because the dictionary (which follows
// resource_profiles on the wire) must hold every string any message refers to.
// Input that does not hold together (dangling ids, wrong value counts) is not an
// exception (spanprof also builds with -fno-exceptions): the first problem is
// kept in invalid_input() and nothing is written.
class OtlpRequestBuilder {
 public:
  OtlpRequestBuilder(const Profile& profile, const SpanRecord& record) : profile_(profile), record_(record) {
    index_ids(profile.mappings, mappings_by_id_, "mapping");
    index_ids(profile.functions, functions_by_id_, "function");
    index_ids(profile.locations, locations_by_id_, "location");
    stack_rows_.push_back(&stacks_.emplace(std::vector<std::int64_t>{}, 0).first->first);

    for (const ValueType& type : profile.sample_types) sample_types_.push_back(value_type(type));
    period_type_ = value_type(profile.period_type);
    for (std::size_t i = 0; i < profile.sample_types.size(); ++i) {
      if (profile.sample_types[i].type == profile.default_sample_type) default_type_ = i;
    }
    // The span's facts again at Profile level, for receivers that group by
    // Profile; they reuse the samples' attribute entries, so cost a few bytes.
    // A window's record names no span: its samples say which span they are.
    const bool one_span = record.span.span_id.valid() || !record.span_name.empty();
    if (one_span && !profile.sample_types.empty()) {
      if (!record.span_name.empty())
        profile_attributes_.push_back(string_attribute(span_name_label, record.span_name));
      profile_attributes_.push_back(string_attribute(profile_reason_label, to_string(record.reason)));
      if (record.time.measured()) {
        const TimeSplit& t = record.time;
        profile_attributes_.push_back(int_attribute("spanprof.time.running", t.running_ns, "ns"));
        profile_attributes_.push_back(int_attribute("spanprof.time.waiting_for_cpu", t.waiting_ns, "ns"));
        profile_attributes_.push_back(int_attribute("spanprof.time.blocked", t.blocked_ns, "ns"));
        profile_attributes_.push_back(int_attribute("spanprof.context_switches.voluntary", t.voluntary_switches, ""));
        profile_attributes_.push_back(
            int_attribute("spanprof.context_switches.involuntary", t.involuntary_switches, ""));
      }
    }
    span_hex_.reserve(2 * profile.spans.size());  // attribute rows view these strings: no reallocation
    span_attributes_.resize(profile.spans.size());
    for (std::size_t i = 0; i < profile.samples.size(); ++i) add_sample(i);

    // Indices are int32 on the wire.
    if (std::max({strings_.entries().size(), attribute_rows_.size(), stack_rows_.size(), location_rows_.size(),
                  function_rows_.size(), mapping_rows_.size()}) > std::size_t{INT32_MAX}) {
      invalid("a dictionary table outgrows its int32 indices");
    }
  }

  // Empty when the profile holds together; otherwise its first problem.
  const std::string& invalid_input() const noexcept { return invalid_; }

  void write(ProtobufWriter& out, const OtlpResource& resource) const {
    namespace f = otlp_field;
    out.message_field(f::request::resource_profiles, [&](ProtobufWriter& rp) {
      if (!resource.attributes.empty()) {
        rp.message_field(f::resource_profiles::resource, [&](ProtobufWriter& body) {
          // Not a structured binding: C++17 lambdas cannot capture one (clang refuses).
          for (const auto& attribute : resource.attributes) {
            body.message_field(f::resource::attributes, [&](ProtobufWriter& kv) {
              kv.bytes_field(f::key_value::key, attribute.first);
              kv.message_field(f::key_value::value, [&](ProtobufWriter& any) {
                any.bytes_field(f::any_value::string_value, attribute.second);
              });
            });
          }
        });
      }
      rp.message_field(f::resource_profiles::scope_profiles, [&](ProtobufWriter& sp) {
        sp.message_field(f::scope_profiles::scope, [](ProtobufWriter& scope) {
          scope.bytes_field(f::scope::name, "spanprof");
          scope.bytes_field(f::scope::version, SPANPROF_VERSION_STRING);
        });
        // The pprof default sample type first (viewers show profiles[0]), then the rest in pprof order.
        for (std::size_t n = 0; n < sample_types_.size(); ++n) {
          const std::size_t type = n == 0 ? default_type_ : (n <= default_type_ ? n - 1 : n);
          sp.message_field(f::scope_profiles::profiles, [&](ProtobufWriter& body) { write_profile(body, type); });
        }
      });
    });
    out.message_field(f::request::dictionary, [&](ProtobufWriter& body) { write_dictionary(body); });
  }

 private:
  template <typename T>
  struct ById { const T* item; std::int64_t index; };  // index: 0 until a sample reaches it
  using TypeRow = std::pair<std::int64_t, std::int64_t>;  // type, unit
  struct MappingRow { std::uint64_t start, limit, offset; std::int64_t filename; std::vector<std::int64_t> attributes; };
  struct FunctionRow { std::int64_t name, system_name, filename, start_line; };
  struct LineRow { std::int64_t function, line; };
  // Its lines innermost first (the inlined functions, then the one they were inlined into).
  struct LocationRow { std::int64_t mapping; std::uint64_t address; std::vector<LineRow> lines; std::int64_t frame_type; };
  struct AttributeRow { std::int64_t key; bool is_int; std::string_view str; std::int64_t num, unit; };
  struct SampleRow {
    std::int64_t stack, link;
    std::vector<std::int64_t> attributes;
    std::vector<std::int64_t> values;
  };

  void invalid(std::string problem) {
    if (invalid_.empty()) invalid_ = std::move(problem);
  }

  template <typename T>
  void index_ids(const std::vector<T>& items, std::unordered_map<std::uint64_t, ById<T>>& by_id, const char* what) {
    for (const T& item : items) {
      if (item.id == 0) invalid(std::string(what) + " with id 0 (ids start at 1)");
      else if (!by_id.emplace(item.id, ById<T>{&item, 0}).second)
        invalid(std::string("two ") + what + "s share id " + std::to_string(item.id));
    }
  }

  // Looks a pprof id up and gives its dictionary index, copying the entry into
  // the table on first use so entries no sample reaches never get there.
  template <typename T, typename Row, typename MakeRow>
  std::int64_t reach(std::unordered_map<std::uint64_t, ById<T>>& by_id, std::vector<Row>& rows, std::uint64_t id,
                     const char* what, const char* referrer, std::uint64_t referrer_id, MakeRow make_row) {
    const auto it = by_id.find(id);
    if (it == by_id.end()) {
      invalid(std::string(referrer) + std::to_string(referrer_id) + " references " + what + " id " +
              std::to_string(id) + ", which the profile does not define");
      return 0;
    }
    if (it->second.index == 0) {
      const Row row = make_row(*it->second.item);  // may reach other tables first
      it->second.index = static_cast<std::int64_t>(rows.size());
      rows.push_back(row);
    }
    return it->second.index;
  }

  TypeRow value_type(const ValueType& type) { return {strings_.intern(type.type), strings_.intern(type.unit)}; }

  std::int64_t attribute(const AttributeRow& row) {
    const auto key = std::make_tuple(row.key, row.is_int, row.str, row.num, row.unit);
    const auto [it, inserted] = attribute_index_.emplace(key, static_cast<std::int64_t>(attribute_rows_.size()));
    if (inserted) attribute_rows_.push_back(row);
    return it->second;
  }

  std::int64_t string_attribute(std::string_view key, std::string_view value) {
    return attribute(AttributeRow{strings_.intern(key), false, value, 0, 0});
  }
  std::int64_t int_attribute(std::string_view key, std::int64_t value, std::string_view unit) {
    return attribute(AttributeRow{strings_.intern(key), true, {}, value, unit.empty() ? 0 : strings_.intern(unit)});
  }

  std::int64_t location(std::uint64_t id, std::size_t sample) {
    return reach(locations_by_id_, location_rows_, id, "location", "sample index ", sample, [&](const Location& loc) {
      // Every spanprof frame is machine code; the attribute is shared by all locations.
      if (frame_type_ == 0) frame_type_ = string_attribute(otlp_frame_type_key, "native");
      LocationRow row{0, loc.address, {}, frame_type_};
      if (loc.mapping_id != 0) {
        row.mapping = reach(mappings_by_id_, mapping_rows_, loc.mapping_id, "mapping", "location id ", loc.id,
                            [&](const Mapping& m) {
                              MappingRow mapping{m.memory_start, m.memory_limit, m.file_offset, strings_.intern(m.filename), {}};
                              if (!m.build_id.empty()) mapping.attributes.push_back(string_attribute(otlp_build_id_key, m.build_id));
                              if (!m.htl_hash.empty()) mapping.attributes.push_back(string_attribute(otlp_htl_hash_key, m.htl_hash));
                              return mapping;
                            });
      }
      if (loc.function_id != 0) {
        const auto function = [&](std::uint64_t function_id) {
          return reach(functions_by_id_, function_rows_, function_id, "function", "location id ", loc.id,
                       [&](const Function& fn) {
            return FunctionRow{strings_.intern(fn.name), strings_.intern(fn.system_name), strings_.intern(fn.filename),
                               fn.start_line};
          });
        };
        for (const Line& inlined : loc.inlined) row.lines.push_back({function(inlined.function_id), inlined.line});
        row.lines.push_back({function(loc.function_id), loc.line});
      }
      return row;
    });
  }

  void add_sample(std::size_t i) {
    const Sample& sample = profile_.samples[i];
    if (sample.values.size() != profile_.sample_types.size()) {
      invalid("sample index " + std::to_string(i) + " has " + std::to_string(sample.values.size()) + " values for " +
              std::to_string(profile_.sample_types.size()) + " sample types");
      return;
    }
    std::vector<std::int64_t> locations;
    locations.reserve(sample.location_ids.size());
    for (const std::uint64_t id : sample.location_ids) locations.push_back(location(id, i));
    const auto [it, inserted] = stacks_.emplace(std::move(locations), static_cast<std::int64_t>(stack_rows_.size()));
    if (inserted) stack_rows_.push_back(&it->first);

    SampleRow row{it->second, link_for(sample), {}, {}};

    // attribute_indices MUST keep keys unique; pprof allows repeats, so the first wins.
    // The attribute rows view the labels' strings: visit the profile's own labels,
    // never a copy, so the views outlive this call.
    std::vector<std::int64_t> keys;
    auto add_attribute = [&](std::string_view name, const AttributeRow& value) {
      const std::int64_t key = strings_.intern(name);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
      keys.push_back(key);
      AttributeRow keyed = value;
      keyed.key = key;
      row.attributes.push_back(attribute(keyed));
    };
    for (const Label& label : sample.labels) {
      // pprof's rule: a label with a string is a string label, whatever is_num says.
      add_attribute(label.key, label.is_num && label.str.empty()
                                   ? AttributeRow{0, true, {}, label.num, strings_.intern(label.num_unit)}
                                   : AttributeRow{0, false, label.str, 0, 0});
    }
    for (const auto& [key, value] : span_attributes(sample.span)) add_attribute(key, AttributeRow{0, false, value, 0, 0});
    const auto [merged, first] =
        sample_index_.emplace(std::make_tuple(row.stack, row.link, row.attributes), samples_.size());
    if (first) {
      row.values = sample.values;
      samples_.push_back(std::move(row));
    } else {
      std::vector<std::int64_t>& values = samples_[merged->second].values;
      for (std::size_t v = 0; v < values.size(); ++v) values[v] += sample.values[v];
    }
  }

  // The labels of span `span` (1-based, 0: none) as attribute values; the hex
  // ids are made once per span and kept, since attribute rows view them.
  const std::vector<std::pair<const char*, std::string_view>>& span_attributes(std::uint32_t span) {
    static const std::vector<std::pair<const char*, std::string_view>> none;
    if (span == 0 || span > profile_.spans.size()) return none;
    auto& attributes = span_attributes_[span - 1];
    if (attributes.empty()) {
      for_each_span_label(profile_.spans[span - 1], [&](const char* key, std::string_view value) {
        if (key == trace_id_label || key == span_id_label) value = span_hex_.emplace_back(value);
        attributes.emplace_back(key, value);
      });
    }
    return attributes;
  }

  // The link_table index of the span a sample belongs to: its record's ids, else
  // the request's record; 0 ("no link") for a span without ids.
  std::int64_t link_for(const Sample& sample) {
    const SpanRecord* record = span_of(profile_, sample);
    const SpanContext& span = record ? record->span : record_.span;
    if (!span.trace_id.valid() && !span.span_id.valid()) return 0;
    const auto key = std::make_pair(span.trace_id.bytes(), span.span_id.bytes());
    const auto [it, inserted] = link_index_.emplace(key, static_cast<std::int64_t>(links_.size()));
    if (inserted) links_.push_back(span);
    return it->second;
  }

  static void write_value_type(ProtobufWriter& out, std::uint32_t field, TypeRow type) {
    out.message_field(field, [&](ProtobufWriter& body) {
      body.int64_field_if_nonzero(otlp_field::value_type::type_strindex, type.first);
      body.int64_field_if_nonzero(otlp_field::value_type::unit_strindex, type.second);
    });
  }

  void write_profile(ProtobufWriter& out, std::size_t type) const {
    namespace f = otlp_field::profile;
    namespace s = otlp_field::sample;
    write_value_type(out, f::sample_type, sample_types_[type]);
    for (const SampleRow& row : samples_) {
      out.message_field(f::samples, [&](ProtobufWriter& body) {
        body.int64_field_if_nonzero(s::stack_index, row.stack);
        body.packed_int64_field(s::attribute_indices, row.attributes);
        body.int64_field_if_nonzero(s::link_index, row.link);
        // Written even when zero: a Sample needs at least one value or timestamp.
        const std::int64_t value[1] = {row.values[type]};
        body.packed_int64_field(s::values, value);
      });
    }
    // The span's clock wins; Profile's is the fallback for callers without one.
    const std::int64_t start = record_.start_unix_ns > 0 ? record_.start_unix_ns : profile_.time_nanos;
    const std::int64_t duration = record_.duration_ns > 0 ? record_.duration_ns : profile_.duration_nanos;
    if (start > 0) out.fixed64_field(f::time_unix_nano, static_cast<std::uint64_t>(start));
    if (duration > 0) out.uint64_field(f::duration_nano, static_cast<std::uint64_t>(duration));
    if (period_type_ != TypeRow{}) write_value_type(out, f::period_type, period_type_);
    out.int64_field_if_nonzero(f::period, profile_.period);
    out.packed_int64_field(f::attribute_indices, profile_attributes_);
  }

  void write_dictionary(ProtobufWriter& out) const {
    namespace f = otlp_field::dictionary;
    namespace o = otlp_field;
    // Every table's row 0 is all defaults, so it encodes as an empty message:
    // present, as the schema requires, at two bytes.
    for (const MappingRow& m : mapping_rows_) {
      out.message_field(f::mapping_table, [&](ProtobufWriter& body) {
        body.uint64_field_if_nonzero(o::mapping::memory_start, m.start);
        body.uint64_field_if_nonzero(o::mapping::memory_limit, m.limit);
        body.uint64_field_if_nonzero(o::mapping::file_offset, m.offset);
        body.int64_field_if_nonzero(o::mapping::filename_strindex, m.filename);
        if (!m.attributes.empty()) body.packed_int64_field(o::mapping::attribute_indices, m.attributes);
      });
    }
    for (const LocationRow& l : location_rows_) {
      out.message_field(f::location_table, [&](ProtobufWriter& body) {
        body.int64_field_if_nonzero(o::location::mapping_index, l.mapping);
        body.uint64_field_if_nonzero(o::location::address, l.address);
        // No Line for an unsymbolized frame: receivers then fall back to the address.
        for (const LineRow& row : l.lines) {
          body.message_field(o::location::lines, [&](ProtobufWriter& line) {
            line.int64_field(o::line::function_index, row.function);
            line.int64_field_if_nonzero(o::line::line, row.line);
          });
        }
        const std::int64_t attributes[1] = {l.frame_type};
        if (l.frame_type != 0) body.packed_int64_field(o::location::attribute_indices, attributes);
      });
    }
    for (const FunctionRow& fn : function_rows_) {
      out.message_field(f::function_table, [&](ProtobufWriter& body) {
        body.int64_field_if_nonzero(o::function::name_strindex, fn.name);
        body.int64_field_if_nonzero(o::function::system_name_strindex, fn.system_name);
        body.int64_field_if_nonzero(o::function::filename_strindex, fn.filename);
        body.int64_field_if_nonzero(o::function::start_line, fn.start_line);
      });
    }
    // link_table[0] is the exception: full-length zero ids, which the schema
    // recommends for codecs that insist on 16- and 8-byte arrays.
    for (const SpanContext& link : links_) {
      out.message_field(f::link_table, [&](ProtobufWriter& body) {
        const auto& trace = link.trace_id.bytes();
        const auto& span = link.span_id.bytes();
        body.bytes_field(o::link::trace_id, {reinterpret_cast<const char*>(trace.data()), trace.size()});
        body.bytes_field(o::link::span_id, {reinterpret_cast<const char*>(span.data()), span.size()});
      });
    }
    for (const std::string_view entry : strings_.entries()) out.bytes_field(f::string_table, entry);
    for (std::size_t i = 0; i < attribute_rows_.size(); ++i) {
      out.message_field(f::attribute_table, [&](ProtobufWriter& body) {
        if (i == 0) return;  // KeyValueAndUnit{}: not even an empty AnyValue
        const AttributeRow& a = attribute_rows_[i];
        body.int64_field_if_nonzero(o::key_value_and_unit::key_strindex, a.key);
        // string_value rather than string_value_strindex: every receiver reads it,
        // and this table already holds each distinct value once.
        body.message_field(o::key_value_and_unit::value, [&](ProtobufWriter& any) {
          if (a.is_int) {
            any.int64_field(o::any_value::int_value, a.num);
          } else {
            any.bytes_field(o::any_value::string_value, a.str);
          }
        });
        body.int64_field_if_nonzero(o::key_value_and_unit::unit_strindex, a.unit);
      });
    }
    for (const std::vector<std::int64_t>* stack : stack_rows_) {
      out.message_field(f::stack_table,
                        [&](ProtobufWriter& body) { body.packed_int64_field(o::stack::location_indices, *stack); });
    }
  }

  const Profile& profile_;
  const SpanRecord& record_;
  std::vector<std::string> span_hex_;  // reserved in the constructor: rows view these
  std::vector<std::vector<std::pair<const char*, std::string_view>>> span_attributes_;
  PprofStringTable strings_;  // pprof's rules hold here too: each string once, entry 0 ""
  std::unordered_map<std::uint64_t, ById<Mapping>> mappings_by_id_;
  std::unordered_map<std::uint64_t, ById<Function>> functions_by_id_;
  std::unordered_map<std::uint64_t, ById<Location>> locations_by_id_;
  std::vector<MappingRow> mapping_rows_{MappingRow{}};
  std::vector<FunctionRow> function_rows_{FunctionRow{}};
  std::vector<LocationRow> location_rows_{LocationRow{}};
  std::vector<AttributeRow> attribute_rows_{AttributeRow{}};
  std::map<std::tuple<std::int64_t, bool, std::string_view, std::int64_t, std::int64_t>, std::int64_t>
      attribute_index_;
  std::map<std::vector<std::int64_t>, std::int64_t> stacks_;
  std::vector<const std::vector<std::int64_t>*> stack_rows_;  // keys of stacks_, by index
  std::vector<SampleRow> samples_;
  std::vector<TypeRow> sample_types_;
  TypeRow period_type_;
  std::size_t default_type_ = 0;
  std::vector<std::int64_t> profile_attributes_;
  std::int64_t frame_type_ = 0;
  std::vector<SpanContext> links_{SpanContext{}};  // [0]: the zero link
  std::map<std::pair<std::array<std::uint8_t, 16>, std::array<std::uint8_t, 8>>, std::int64_t> link_index_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::vector<std::int64_t>>, std::size_t> sample_index_;
  std::string invalid_;
};

}  // namespace detail

// Serializes an ExportProfilesServiceRequest for `profile`, described by `record`
// (one span's, or a window's; not compressed). On failure (encoding_failed) `out`
// is empty.
inline Status encode_otlp_profiles_request(const Profile& profile, const SpanRecord& record,
                                           const OtlpResource& resource, std::string& out) noexcept {
  out.clear();
  SPANPROF_TRY {
    std::string invalid;
    for (std::size_t i = 0; i < resource.attributes.size() && invalid.empty(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (resource.attributes[i].first == resource.attributes[j].first) {
          invalid = "resource attribute '" + resource.attributes[i].first + "' appears twice";
          break;
        }
      }
    }
    if (invalid.empty()) {
      const detail::OtlpRequestBuilder builder(profile, record);
      if (builder.invalid_input().empty()) {
        detail::ProtobufWriter writer(out);
        builder.write(writer, resource);
        return Status::ok();
      }
      invalid = builder.invalid_input();
    }
    return Status(ErrorCode::encoding_failed, "otlp: invalid input: " + invalid);
  }
  SPANPROF_CATCH_STD(e) {
    out.clear();
    return detail::status_from_exception(ErrorCode::encoding_failed, "otlp: encoding failed: ", e.what());
  }
  SPANPROF_CATCH_ALL {
    out.clear();
    return Status(ErrorCode::encoding_failed, "otlp: encoding failed");
  }
  return Status(ErrorCode::internal, "unreachable");  // -fno-exceptions: the try is an if (true)
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_PROFILE_OTLP_ENCODER_HPP_
