// Internal. A deflate stream (RFC 1951) in one block of fixed Huffman codes, its
// matches found greedily through one hash of three bytes.
//
// Why not zlib: a span's profile is a few kilobytes, and zlib at its fastest
// level builds and weighs dynamic Huffman trees for every block, a fixed cost of
// some 10-20 µs whatever the size; the fixed codes need no tree, and one pass
// over a 2 KB profile costs a quarter of that. It gives up what the trees buy (a
// span's pprof: ~10 % more bytes than zlib's level 1), which matters for the big
// batched windows, still left to zlib.
#ifndef SPANPROF_DETAIL_PROFILE_DEFLATE_FIXED_HPP_
#define SPANPROF_DETAIL_PROFILE_DEFLATE_FIXED_HPP_

#include <spanprof/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Inputs this long and longer are compressed by zlib: its trees pay for themselves.
inline constexpr std::size_t deflate_fixed_max_input = std::size_t{32} << 10;

inline constexpr std::uint16_t deflate_length_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                                        31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
inline constexpr std::uint8_t deflate_length_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                                        2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
inline constexpr std::uint16_t deflate_distance_base[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                                          33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                                          1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
inline constexpr std::uint8_t deflate_distance_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                                          6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

// The fixed codes (RFC 1951 3.2.6), bit-reversed once: a Huffman code goes out
// from its most significant bit, the stream's other fields from their least.
struct FixedDeflateCodes {
  std::uint16_t literal_length[288];
  std::uint8_t literal_length_bits[288];
  std::uint8_t distance_symbol[30];
  std::uint8_t length_code[256];    // by length - 3
  std::uint8_t distance_code[512];  // by distance - 1 up to 256, then by (distance - 1) / 128, from 256 on

  FixedDeflateCodes() noexcept {
    for (unsigned symbol = 0; symbol < 288; ++symbol) {
      unsigned code, bits;
      if (symbol < 144) code = 0x30 + symbol, bits = 8;
      else if (symbol < 256) code = 0x190 + (symbol - 144), bits = 9;
      else if (symbol < 280) code = symbol - 256, bits = 7;
      else code = 0xC0 + (symbol - 280), bits = 8;
      literal_length[symbol] = static_cast<std::uint16_t>(reversed(code, bits));
      literal_length_bits[symbol] = static_cast<std::uint8_t>(bits);
    }
    for (unsigned d = 0; d < 30; ++d) distance_symbol[d] = static_cast<std::uint8_t>(reversed(d, 5));
    for (unsigned length = 3, l = 0; length <= 258; ++length) {
      while (l < 28 && deflate_length_base[l + 1] <= length) ++l;
      length_code[length - 3] = static_cast<std::uint8_t>(l);
    }
    for (unsigned distance = 1, d = 0; distance <= 32768; ++distance) {
      while (d < 29 && deflate_distance_base[d + 1] <= distance) ++d;
      if (distance <= 256) distance_code[distance - 1] = static_cast<std::uint8_t>(d);
      else distance_code[256 + ((distance - 1) >> 7)] = static_cast<std::uint8_t>(d);
    }
  }

  static unsigned reversed(unsigned code, unsigned length) noexcept {
    unsigned r = 0;
    for (unsigned i = 0; i < length; ++i) r = (r << 1) | ((code >> i) & 1u);
    return r;
  }
};

inline const FixedDeflateCodes& fixed_deflate_codes() noexcept {
  static const FixedDeflateCodes codes;
  return codes;
}

// Writes into room reserved up front: a symbol is at most 9 + 5 + 5 + 13 bits,
// and a literal (the worst case, 9 bits a byte) never needs more than 9/8 of the input.
class FixedDeflateWriter {
 public:
  explicit FixedDeflateWriter(unsigned char* out) noexcept : out_(out) {}

  void bits(std::uint32_t value, unsigned count) noexcept {
    buffer_ |= static_cast<std::uint64_t>(value) << filled_;
    filled_ += count;
    if (filled_ >= 32) {
      const auto word = static_cast<std::uint32_t>(buffer_);
      out_[0] = static_cast<unsigned char>(word);
      out_[1] = static_cast<unsigned char>(word >> 8);
      out_[2] = static_cast<unsigned char>(word >> 16);
      out_[3] = static_cast<unsigned char>(word >> 24);
      out_ += 4;
      buffer_ >>= 32;
      filled_ -= 32;
    }
  }

  void symbol(const FixedDeflateCodes& codes, unsigned symbol) noexcept {
    bits(codes.literal_length[symbol], codes.literal_length_bits[symbol]);
  }

  // Flushes the last bits, padded to a byte; returns the end of what was written.
  unsigned char* finish() noexcept {
    while (filled_ > 0) {
      *out_++ = static_cast<unsigned char>(buffer_);
      buffer_ >>= 8;
      filled_ = filled_ > 8 ? filled_ - 8 : 0;
    }
    return out_;
  }

 private:
  unsigned char* out_;
  std::uint64_t buffer_ = 0;
  unsigned filled_ = 0;
};

inline void deflate_fixed_match(const FixedDeflateCodes& codes, FixedDeflateWriter& writer, std::size_t length,
                                std::size_t distance) noexcept {
  const unsigned l = codes.length_code[length - 3];
  writer.symbol(codes, 257 + l);
  writer.bits(static_cast<std::uint32_t>(length - deflate_length_base[l]), deflate_length_extra[l]);
  const unsigned d = distance <= 256 ? codes.distance_code[distance - 1] : codes.distance_code[256 + ((distance - 1) >> 7)];
  writer.bits(codes.distance_symbol[d], 5);
  writer.bits(static_cast<std::uint32_t>(distance - deflate_distance_base[d]), deflate_distance_extra[d]);
}

// Appends the deflate stream of `in` (shorter than deflate_fixed_max_input) to `out`.
inline void deflate_fixed(std::string_view in, std::string& out) {
  constexpr std::size_t min_match = 3, max_match = 258, window = 32768;
  // Every earlier position is within deflate's window, and position + 1 fits the
  // hash table's 16 bits: no distance check can be wrong, no entry can wrap.
  static_assert(deflate_fixed_max_input <= window && deflate_fixed_max_input < 65536,
                "deflate_fixed's inputs must fit its window and its 16-bit positions");
  const FixedDeflateCodes& codes = fixed_deflate_codes();
  const auto* bytes = reinterpret_cast<const unsigned char*>(in.data());
  const std::size_t n = in.size();
  const std::size_t start = out.size();
  out.resize(start + n + n / 8 + 16);
  FixedDeflateWriter writer(reinterpret_cast<unsigned char*>(&out[start]));
  writer.bits(1, 1);  // BFINAL: the only block
  writer.bits(1, 2);  // BTYPE 01: fixed Huffman codes
  // One position per hash of three bytes, the latest; a table of about as many
  // slots as bytes (a power of two, 256 to 8 Ki), so a small input clears a small table.
  unsigned hash_bits = 8;
  while (hash_bits < 13 && (std::size_t{1} << hash_bits) < n) ++hash_bits;
  // Position + 1 (inputs are under 32 KiB); 0: none. On the heap: encode_pprof_gzip
  // is public, and a caller's stack may be a small fiber's.
  const std::unique_ptr<std::uint16_t[]> head(new std::uint16_t[std::size_t{1} << hash_bits]());
  const auto hash_at = [&](std::size_t i) noexcept {
    const std::uint32_t v = std::uint32_t{bytes[i]} | std::uint32_t{bytes[i + 1]} << 8 | std::uint32_t{bytes[i + 2]} << 16;
    return (v * 2654435761u) >> (32 - hash_bits);
  };
  std::size_t i = 0;
  while (i + min_match <= n) {
    const std::uint32_t h = hash_at(i);
    const std::size_t candidate = head[h];
    head[h] = static_cast<std::uint16_t>(i + 1);
    std::size_t length = 0;
    if (candidate != 0 && i - (candidate - 1) <= window) {
      const unsigned char* from = bytes + (candidate - 1);
      const unsigned char* at = bytes + i;
      const std::size_t limit = n - i < max_match ? n - i : max_match;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      // Eight bytes a step, the first that differs found by its lowest set bit.
      while (length + 8 <= limit) {
        std::uint64_t a, b;
        std::memcpy(&a, from + length, 8);
        std::memcpy(&b, at + length, 8);
        if (a != b) {
          length += static_cast<std::size_t>(__builtin_ctzll(a ^ b)) / 8;
          break;
        }
        length += 8;
      }
#endif
      while (length < limit && from[length] == at[length]) ++length;
    }
    if (length < min_match) {
      writer.symbol(codes, bytes[i]);
      ++i;
      continue;
    }
    deflate_fixed_match(codes, writer, length, i - (candidate - 1));
    // The positions inside a short match join the table too (as zlib's fastest
    // level does): later repeats of them are found. A long match's are skipped.
    const std::size_t end = i + length;
    if (length <= 16)
      for (++i; i < end && i + min_match <= n; ++i) head[hash_at(i)] = static_cast<std::uint16_t>(i + 1);
    i = end;
  }
  for (; i < n; ++i) writer.symbol(codes, bytes[i]);
  writer.symbol(codes, 256);  // end of block
  out.resize(static_cast<std::size_t>(writer.finish() - reinterpret_cast<unsigned char*>(&out[0])));
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_PROFILE_DEFLATE_FIXED_HPP_
