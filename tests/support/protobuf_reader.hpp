// A strict, minimal protobuf reader, independent of the library's writer: tests
// read OTLP requests and Pyroscope pushes field by field with it.
#pragma once

#include "catch.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace proto_test {


struct WireField {
  std::uint32_t number = 0;
  std::uint32_t wire = 0;
  std::uint64_t scalar = 0;  // varint, fixed64 or fixed32 value
  std::string_view bytes;    // length-delimited payload
};

inline bool read_varint(std::string_view data, std::size_t& pos, std::uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && pos < data.size(); shift += 7) {
    const auto byte = static_cast<std::uint8_t>(data[pos++]);
    value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

inline bool read_little_endian(std::string_view data, std::size_t& pos, int size, std::uint64_t& value) {
  if (data.size() - pos < static_cast<std::size_t>(size)) return false;
  value = 0;
  for (int i = 0; i < size; ++i) value |= std::uint64_t{static_cast<std::uint8_t>(data[pos++])} << (8 * i);
  return true;
}

// Every byte must belong to a well-formed field, or parsing fails.
inline bool parse_fields(std::string_view data, std::vector<WireField>& out) {
  std::size_t pos = 0;
  while (pos < data.size()) {
    std::uint64_t key = 0, length = 0;
    if (!read_varint(data, pos, key)) return false;
    WireField field;
    field.number = static_cast<std::uint32_t>(key >> 3);
    field.wire = static_cast<std::uint32_t>(key & 7);
    if (field.number == 0) return false;
    bool ok = false;
    switch (field.wire) {
      case 0: ok = read_varint(data, pos, field.scalar); break;
      case 1: ok = read_little_endian(data, pos, 8, field.scalar); break;
      case 5: ok = read_little_endian(data, pos, 4, field.scalar); break;
      case 2:
        ok = read_varint(data, pos, length) && length <= data.size() - pos;
        if (ok) field.bytes = data.substr(pos, static_cast<std::size_t>(length));
        pos += ok ? static_cast<std::size_t>(length) : 0;
        break;
      default: break;
    }
    if (!ok) return false;
    out.push_back(field);
  }
  return true;
}

// One decoded message; accessors check the wire type the schema gives the field.
class Msg {
 public:
  explicit Msg(std::string_view bytes) : raw_(bytes) { REQUIRE(parse_fields(bytes, fields_)); }

  std::string_view raw() const { return raw_; }
  std::size_t count(std::uint32_t n) const { return all(n).size(); }

  std::vector<std::string_view> bytes_all(std::uint32_t n) const {
    std::vector<std::string_view> out;
    for (const WireField* f : all(n)) {
      REQUIRE(f->wire == 2);
      out.push_back(f->bytes);
    }
    return out;
  }
  std::string bytes(std::uint32_t n) const {
    const auto values = bytes_all(n);
    REQUIRE(values.size() <= 1);
    return values.empty() ? std::string() : std::string(values[0]);
  }
  std::vector<Msg> messages(std::uint32_t n) const {
    std::vector<Msg> out;
    for (const std::string_view b : bytes_all(n)) out.emplace_back(b);
    return out;
  }
  Msg message(std::uint32_t n) const {
    const auto values = messages(n);
    REQUIRE(values.size() == 1);
    return values[0];
  }
  std::uint64_t scalar(std::uint32_t n, std::uint32_t wire = 0) const {  // proto3: absent means 0
    const auto fields = all(n);
    REQUIRE(fields.size() <= 1);
    if (fields.empty()) return 0;
    REQUIRE(fields[0]->wire == wire);
    return fields[0]->scalar;
  }
  // Repeated varints, packed or not, as proto3 parsers must accept both.
  std::vector<std::uint64_t> varints(std::uint32_t n) const {
    std::vector<std::uint64_t> out;
    for (const WireField* f : all(n)) {
      if (f->wire == 0) {
        out.push_back(f->scalar);
        continue;
      }
      REQUIRE(f->wire == 2);
      std::size_t pos = 0;
      std::uint64_t value = 0;
      while (pos < f->bytes.size()) {
        REQUIRE(read_varint(f->bytes, pos, value));
        out.push_back(value);
      }
    }
    return out;
  }

 private:
  std::vector<const WireField*> all(std::uint32_t n) const {
    std::vector<const WireField*> out;
    for (const WireField& f : fields_)
      if (f.number == n) out.push_back(&f);
    return out;
  }
  std::string_view raw_;
  std::vector<WireField> fields_;
};

}  // namespace proto_test
