// A minimal protocol-buffers wire-format writer, shared by the pprof and OTLP
// encoders. It knows wire types, not schemas: callers pick field numbers and
// decide which zero values to omit (proto3 leaves them out; proto2 may not).
#ifndef SPANPROF_DETAIL_PROFILE_PROTOBUF_WRITER_HPP_
#define SPANPROF_DETAIL_PROFILE_PROTOBUF_WRITER_HPP_

#include <spanprof/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

enum class WireType : std::uint8_t {
  varint = 0,
  fixed64 = 1,
  length_delimited = 2,
  fixed32 = 5,
};

// The largest varint is 10 bytes (a 64-bit value, 7 bits per byte).
inline constexpr std::size_t max_varint_size = 10;

inline std::size_t encode_varint(std::uint64_t value, char* buffer) noexcept {
  std::size_t size = 0;
  while (value >= 0x80) {
    buffer[size++] = static_cast<char>(static_cast<std::uint8_t>(value) | 0x80);
    value >>= 7;
  }
  buffer[size++] = static_cast<char>(value);
  return size;
}

constexpr std::size_t varint_size(std::uint64_t value) noexcept {
  std::size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

constexpr std::uint64_t zigzag_encode(std::int64_t value) noexcept {
  return (static_cast<std::uint64_t>(value) << 1) ^ static_cast<std::uint64_t>(-(static_cast<std::uint64_t>(value) >> 63));
}

// Appends to a caller-owned string so a whole message tree shares one buffer.
// Methods may throw std::bad_alloc; noexcept wrappers live at the API boundary.
class ProtobufWriter {
 public:
  explicit ProtobufWriter(std::string& out) noexcept : out_(&out) {}

  std::string& buffer() noexcept { return *out_; }

  void varint(std::uint64_t value) {
    char bytes[max_varint_size];
    out_->append(bytes, encode_varint(value, bytes));
  }

  void tag(std::uint32_t field, WireType type) {
    varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(type));
  }

  // ---- scalar fields, always written (the caller decides about zero) ----------

  void uint64_field(std::uint32_t field, std::uint64_t value) {
    tag(field, WireType::varint);
    varint(value);
  }

  // int32/int64 use plain two's complement varints: a negative value costs 10 bytes.
  void int64_field(std::uint32_t field, std::int64_t value) {
    uint64_field(field, static_cast<std::uint64_t>(value));
  }

  void sint64_field(std::uint32_t field, std::int64_t value) { uint64_field(field, zigzag_encode(value)); }

  void bool_field(std::uint32_t field, bool value) { uint64_field(field, value ? 1 : 0); }

  void fixed64_field(std::uint32_t field, std::uint64_t value) {
    tag(field, WireType::fixed64);
    append_little_endian(value, 8);
  }

  void fixed32_field(std::uint32_t field, std::uint32_t value) {
    tag(field, WireType::fixed32);
    append_little_endian(value, 4);
  }

  void double_field(std::uint32_t field, double value) {
    std::uint64_t bits;
    static_assert(sizeof bits == sizeof value, "IEEE-754 double expected");
    std::memcpy(&bits, &value, sizeof bits);
    fixed64_field(field, bits);
  }

  // strings, bytes and pre-encoded messages
  void bytes_field(std::uint32_t field, std::string_view bytes) {
    tag(field, WireType::length_delimited);
    varint(bytes.size());
    out_->append(bytes.data(), bytes.size());
  }

  // ---- proto3 helpers: a zero/empty value is the default and is left out ------

  void uint64_field_if_nonzero(std::uint32_t field, std::uint64_t value) {
    if (value != 0) uint64_field(field, value);
  }
  void int64_field_if_nonzero(std::uint32_t field, std::int64_t value) {
    if (value != 0) int64_field(field, value);
  }
  void bool_field_if_true(std::uint32_t field, bool value) {
    if (value) bool_field(field, true);
  }
  void bytes_field_if_nonempty(std::uint32_t field, std::string_view bytes) {
    if (!bytes.empty()) bytes_field(field, bytes);
  }

  // ---- packed repeated fields (proto3's default for repeated scalars) --------

  template <typename Range>
  void packed_uint64_field(std::uint32_t field, const Range& values) {
    std::size_t payload = 0;
    for (const auto value : values) payload += varint_size(static_cast<std::uint64_t>(value));
    if (payload == 0) return;  // an empty packed field is simply absent
    tag(field, WireType::length_delimited);
    varint(payload);
    out_->reserve(out_->size() + payload);
    for (const auto value : values) varint(static_cast<std::uint64_t>(value));
  }

  // int64 elements share uint64's encoding; the alias keeps call sites honest.
  template <typename Range>
  void packed_int64_field(std::uint32_t field, const Range& values) {
    packed_uint64_field(field, values);
  }

  template <typename Range>
  void packed_fixed64_field(std::uint32_t field, const Range& values) {
    std::size_t count = 0;
    for (const auto& value : values) {
      (void)value;
      ++count;
    }
    if (count == 0) return;
    tag(field, WireType::length_delimited);
    varint(count * 8);
    for (const auto value : values) append_little_endian(static_cast<std::uint64_t>(value), 8);
  }

  template <typename Range>
  void packed_double_field(std::uint32_t field, const Range& values) {
    std::size_t count = 0;
    for (const auto& value : values) {
      (void)value;
      ++count;
    }
    if (count == 0) return;
    tag(field, WireType::length_delimited);
    varint(count * 8);
    for (const double value : values) {
      std::uint64_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      append_little_endian(bits, 8);
    }
  }

  // ---- nested messages, written in place -------------------------------------
  //
  // The length prefix is unknown until the body is done, so the body is written
  // first and the minimal varint is inserted in front of it afterwards. That moves
  // only the nested body, never the enclosing message, and keeps varints canonical
  // (some decoders reject padded lengths).

  struct NestedMark {
    std::size_t body_start;
  };

  NestedMark begin_nested(std::uint32_t field) {
    tag(field, WireType::length_delimited);
    return NestedMark{out_->size()};
  }

  void end_nested(NestedMark mark) {
    const std::size_t length = out_->size() - mark.body_start;
    char prefix[max_varint_size];
    const std::size_t prefix_size = encode_varint(length, prefix);
    out_->insert(mark.body_start, prefix, prefix_size);
  }

  // Writes field `field` as a message whose body `write_body(ProtobufWriter&)` fills.
  template <typename WriteBody>
  void message_field(std::uint32_t field, WriteBody&& write_body) {
    const NestedMark mark = begin_nested(field);
    write_body(*this);
    end_nested(mark);
  }

 private:
  void append_little_endian(std::uint64_t value, int bytes) {
    char buffer[8];
    for (int i = 0; i < bytes; ++i) buffer[i] = static_cast<char>(static_cast<std::uint8_t>(value >> (8 * i)));
    out_->append(buffer, static_cast<std::size_t>(bytes));
  }

  std::string* out_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_PROFILE_PROTOBUF_WRITER_HPP_
