// gzip in memory, via zlib. pprof files are gzip-compressed profile.proto bytes,
// and OTLP/HTTP bodies may be too. Decompression is bounded because its input can
// come from a file or a peer we do not trust: a few hundred KiB can inflate to GiB.
#ifndef SPANPROF_DETAIL_PROFILE_GZIP_HPP_
#define SPANPROF_DETAIL_PROFILE_GZIP_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/profile/deflate_fixed.hpp>

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

inline constexpr std::size_t default_gzip_max_output = std::size_t{256} << 20;  // 256 MiB

inline void set_zlib_error(std::string& error, std::string_view what, int code, const char* zlib_message) noexcept {
  SPANPROF_TRY {
    error.assign(what.data(), what.size());
    error += " (zlib ";
    error += std::to_string(code);
    if (zlib_message != nullptr) {
      error += ": ";
      error += zlib_message;
    }
    error += ')';
  } SPANPROF_CATCH_ALL {
    error.clear();
  }
}

// zlib counts in uInt; feed larger buffers in slices so 4 GiB+ inputs still work.
inline constexpr std::size_t zlib_max_slice = std::size_t{1} << 30;

// Inputs shorter than this are stored in the gzip member, not compressed: a
// one-sample span profile (2.5 KB) is stored in a fifth of the time even the fixed
// codes take (deflate_fixed.hpp), and weighs at most 1.2 KB more (still one 4 KiB
// disk block, three TCP segments). It gunzips the same everywhere.
inline constexpr std::size_t gzip_store_below = 4096;

inline constexpr char gzip_header[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 0, 3};  // deflate, no flags, OS 3 (Unix) as zlib writes it

// CRC-32 and ISIZE (the size modulo 2^32), little-endian.
inline void append_gzip_trailer(std::string_view in, std::string& out) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::size_t done = 0; done < in.size();) {
    const std::size_t slice = std::min(in.size() - done, zlib_max_slice);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(in.data() + done), static_cast<uInt>(slice));
    done += slice;
  }
  const auto size = static_cast<std::uint32_t>(in.size());
  const auto checksum = static_cast<std::uint32_t>(crc);
  const char trailer[8] = {static_cast<char>(checksum & 0xFF),       static_cast<char>((checksum >> 8) & 0xFF),
                           static_cast<char>((checksum >> 16) & 0xFF), static_cast<char>(checksum >> 24),
                           static_cast<char>(size & 0xFF),           static_cast<char>((size >> 8) & 0xFF),
                           static_cast<char>((size >> 16) & 0xFF),   static_cast<char>(size >> 24)};
  out.append(trailer, sizeof trailer);
}

// A gzip member of stored deflate blocks (RFC 1951 3.2.4, RFC 1952), for what
// does not compress: the bytes, five more per 64 KiB.
inline void gzip_store(std::string_view in, std::string& out) {
  constexpr std::size_t max_block = 65535;
  const std::size_t blocks = in.empty() ? 1 : (in.size() + max_block - 1) / max_block;
  out.reserve(out.size() + 10 + 5 * blocks + in.size() + 8);
  out.append(gzip_header, sizeof gzip_header);
  std::size_t at = 0;
  do {
    const std::size_t size = std::min(in.size() - at, max_block);
    const bool last = at + size == in.size();
    const auto length = static_cast<std::uint16_t>(size);
    const auto complement = static_cast<std::uint16_t>(~length);
    const char block[5] = {static_cast<char>(last ? 1 : 0), static_cast<char>(length & 0xFF),
                           static_cast<char>(length >> 8), static_cast<char>(complement & 0xFF),
                           static_cast<char>(complement >> 8)};
    out.append(block, sizeof block);
    out.append(in.data() + at, size);
    at += size;
  } while (at < in.size());
  append_gzip_trailer(in, out);
}

// A span's profile: one block of fixed codes (deflate_fixed.hpp), or stored if
// that came out bigger (random bytes).
inline void gzip_fixed(std::string_view in, std::string& out) {
  out.reserve(10 + in.size() + in.size() / 8 + 16);
  out.append(gzip_header, sizeof gzip_header);
  deflate_fixed(in, out);
  if (out.size() - sizeof gzip_header > in.size() + 5) {
    out.clear();
    gzip_store(in, out);
    return;
  }
  append_gzip_trailer(in, out);
}

inline Status gzip_compress(std::string_view in, std::string& out) noexcept {
  out.clear();
  std::string error;
  if (in.size() < deflate_fixed_max_input) {
    SPANPROF_TRY {
      if (in.size() < gzip_store_below) gzip_store(in, out);
      else gzip_fixed(in, out);
      return Status::ok();
    } SPANPROF_CATCH_ALL {
      out.clear();
      set_error_message(error, "gzip: out of memory while compressing");
      return Status(ErrorCode::encoding_failed, error);
    }
  }
  z_stream stream{};
  // A batched window (smaller inputs took gzip_fixed above). +16: a gzip header
  // and CRC-32 trailer. The fastest level, as Go's runtime/pprof writes its
  // profiles: a few times less CPU than the default level for a few more bytes.
  const int window_bits = 15, mem_level = 8;
  int rc = deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, window_bits + 16, mem_level, Z_DEFAULT_STRATEGY);
  if (rc != Z_OK) {
    set_zlib_error(error, "gzip: deflateInit2 failed", rc, stream.msg);
    return Status(ErrorCode::encoding_failed, error);
  }
  bool ok = false;
  SPANPROF_TRY {
    // Small bodies (the common case) compress in one pass; big ones grow in steps
    // rather than reserving their whole worst case up front.
    const std::size_t bound = deflateBound(&stream, static_cast<uLong>(std::min(in.size(), zlib_max_slice)));
    std::size_t chunk = std::clamp<std::size_t>(bound, 4096, std::size_t{16} << 20);
    const auto* next_in = reinterpret_cast<const Bytef*>(in.data());
    std::size_t remaining = in.size();
    for (;;) {
      const std::size_t slice = std::min(remaining, zlib_max_slice);
      stream.next_in = const_cast<Bytef*>(next_in);
      stream.avail_in = static_cast<uInt>(slice);
      const int flush = (slice == remaining) ? Z_FINISH : Z_NO_FLUSH;
      do {
        const std::size_t used = out.size();
        out.resize(used + chunk);
        stream.next_out = reinterpret_cast<Bytef*>(&out[used]);
        stream.avail_out = static_cast<uInt>(chunk);
        rc = deflate(&stream, flush);
        out.resize(used + (chunk - stream.avail_out));
        if (rc == Z_STREAM_ERROR) break;
      } while (stream.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
      if (rc == Z_STREAM_ERROR) {
        set_zlib_error(error, "gzip: deflate failed", rc, stream.msg);
        break;
      }
      next_in += slice;
      remaining -= slice;
      if (flush == Z_FINISH) {
        ok = (rc == Z_STREAM_END);
        if (!ok) set_zlib_error(error, "gzip: deflate did not finish", rc, stream.msg);
        break;
      }
    }
  } SPANPROF_CATCH_ALL {
    set_error_message(error, "gzip: out of memory while compressing");
    ok = false;
  }
  deflateEnd(&stream);
  if (!ok) out.clear();
  return ok ? Status::ok() : Status(ErrorCode::encoding_failed, error);
}

// Accepts gzip (and, via windowBits +32 auto-detection, zlib) streams, including
// concatenated gzip members as gunzip does. Fails — leaving `out` empty — on
// corrupt or truncated input, trailing garbage, or more than `max_out` bytes.
inline Status gzip_decompress(std::string_view in, std::string& out,
                              std::size_t max_out = default_gzip_max_output) noexcept {
  out.clear();
  std::string error;
  if (in.empty()) {
    set_error_message(error, "gzip: empty input");
    return Status(ErrorCode::encoding_failed, error);
  }
  z_stream stream{};
  int rc = inflateInit2(&stream, 15 + 32);
  if (rc != Z_OK) {
    set_zlib_error(error, "gzip: inflateInit2 failed", rc, stream.msg);
    return Status(ErrorCode::encoding_failed, error);
  }
  bool ok = false;
  SPANPROF_TRY {
    // Input not yet handed to zlib. Slices are consecutive, so stream.next_in +
    // stream.avail_in == next_in always holds.
    const auto* next_in = reinterpret_cast<const Bytef*>(in.data());
    std::size_t remaining_in = in.size();
    // One byte of room beyond the limit: producing it proves the limit was exceeded
    // without ever holding more than max_out + 1 bytes.
    const std::size_t capacity_limit = (max_out == SIZE_MAX) ? SIZE_MAX : max_out + 1;
    std::size_t produced = 0;
    std::size_t growth = std::max<std::size_t>(std::min<std::size_t>(in.size(), SIZE_MAX / 8) * 4, 64 * 1024);
    for (;;) {
      if (stream.avail_in == 0 && remaining_in > 0) {
        const std::size_t slice = std::min(remaining_in, zlib_max_slice);
        stream.next_in = const_cast<Bytef*>(next_in);
        stream.avail_in = static_cast<uInt>(slice);
        next_in += slice;
        remaining_in -= slice;
      }
      if (produced == out.size()) {
        const std::size_t room = std::min({growth, capacity_limit - out.size(), zlib_max_slice});
        out.resize(out.size() + room);
        growth = std::min(growth * 2, std::size_t{64} << 20);
      }
      const std::size_t room = std::min(out.size() - produced, zlib_max_slice);
      stream.next_out = reinterpret_cast<Bytef*>(&out[produced]);
      stream.avail_out = static_cast<uInt>(room);
      rc = inflate(&stream, Z_NO_FLUSH);
      produced += room - stream.avail_out;
      if (produced > max_out) {
        set_error_message(error, "gzip: decompressed size exceeds the limit");
        break;
      }
      if (rc == Z_OK) continue;
      if (rc == Z_STREAM_END) {
        const std::size_t unread = stream.avail_in + remaining_in;
        if (unread == 0) {
          ok = true;
          break;
        }
        // Another gzip member may follow; anything else is garbage.
        const Bytef* rest = stream.next_in;
        if (unread < 2 || rest[0] != 0x1f || rest[1] != 0x8b) {
          set_error_message(error, "gzip: trailing garbage after the compressed stream");
          break;
        }
        rc = inflateReset(&stream);
        if (rc != Z_OK) {
          set_zlib_error(error, "gzip: inflateReset failed", rc, stream.msg);
          break;
        }
        next_in = rest;
        remaining_in = unread;
        stream.avail_in = 0;
        continue;
      }
      if (rc == Z_BUF_ERROR) {
        // No progress was possible. A full output buffer just grows next round;
        // running out of input before the stream's end means it was cut short.
        if (stream.avail_out == 0) continue;
        if (stream.avail_in == 0 && remaining_in == 0) {
          set_error_message(error, "gzip: truncated input");
        } else {
          set_zlib_error(error, "gzip: inflate made no progress", rc, stream.msg);
        }
        break;
      }
      if (rc == Z_MEM_ERROR) {
        set_error_message(error, "gzip: out of memory while decompressing");
      } else {
        set_zlib_error(error, "gzip: corrupt input", rc, stream.msg);
      }
      break;
    }
    if (ok) out.resize(produced);
  } SPANPROF_CATCH_ALL {
    set_error_message(error, "gzip: out of memory while decompressing");
    ok = false;
  }
  inflateEnd(&stream);
  if (!ok) out.clear();
  return ok ? Status::ok() : Status(ErrorCode::encoding_failed, error);
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_PROFILE_GZIP_HPP_
