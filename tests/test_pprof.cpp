// pprof encoding, gzip, and the gperftools legacy CPU profile reader. The encoder
// is checked three ways: an independent decoder, byte-level properties, and
// `go tool pprof` itself, which is the reader that matters.
#include "support/catch.hpp"
#include "support/test_helpers.hpp"
#include "support/pprof_reader.hpp"

#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/detail/capture/gperftools_cpu_profile.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>
#include <spanprof/profile/pprof_encoder.hpp>

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using spanprof::Profile;

namespace {

using spanprof_test::ten_ms;
using spanprof_test::string_label;
const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
const std::string span_id = "00f067aa0ba902b7";
const std::string span_name = "GET /checkout";


std::vector<spanprof::Label> span_labels() {
  return {string_label("trace_id", trace_id), string_label("span_id", span_id),
          string_label("span_name", span_name)};
}

// hot_function has 30 of 36 samples, cold_function 5 as leaf, one leaf is an
// unsymbolized address in libc.
Profile make_test_profile() {
  Profile p;
  p.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
  p.period_type = {"cpu", "nanoseconds"};
  p.period = ten_ms;
  p.time_nanos = 1'700'000'000'123'456'789;
  p.duration_nanos = 2'500'000'000;
  p.comments = {"spanprof test profile"};
  p.default_sample_type = "cpu";

  spanprof::Mapping exe;
  exe.id = 1;
  exe.memory_start = 0x400000;
  exe.memory_limit = 0x500000;
  exe.file_offset = 0;
  exe.filename = "/usr/bin/fake-service";
  exe.build_id = "0123456789abcdef0123456789abcdef01234567";
  exe.has_functions = true;
  spanprof::Mapping libc;
  libc.id = 2;
  libc.memory_start = 0x7f0000000000;
  libc.memory_limit = 0x7f0000200000;
  libc.file_offset = 0x28000;
  libc.filename = "/lib/x86_64-linux-gnu/libc.so.6";
  libc.build_id = "fedcba9876543210";
  p.mappings = {exe, libc};

  p.functions = {{1, "hot_function", "_Z12hot_functionv", "/src/hot.cc"},
                 {2, "cold_function", "_Z13cold_functionv", "/src/cold.cc"}};
  p.locations = {{1, 1, 0x401234, 1}, {2, 1, 0x402345, 2}, {3, 2, 0x7f0000012345, 0}};

  spanprof::Sample hot;
  hot.location_ids = {1, 2};
  hot.values = {30, 30 * ten_ms};
  hot.labels = span_labels();
  spanprof::Label thread;
  thread.key = "thread_id";
  thread.num = 4242;
  thread.is_num = true;
  hot.labels.push_back(thread);

  spanprof::Sample cold;
  cold.location_ids = {2};
  cold.values = {5, 5 * ten_ms};
  cold.labels = span_labels();

  spanprof::Sample unsymbolized;
  unsymbolized.location_ids = {3, 2};
  unsymbolized.values = {1, ten_ms};
  unsymbolized.labels = span_labels();

  p.samples = {hot, cold, unsymbolized};
  return p;
}

std::string temp_dir() {
  char pattern[] = "/tmp/spanprof-pprof-XXXXXX";
  const char* dir = ::mkdtemp(pattern);
  REQUIRE(dir != nullptr);
  return dir;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(file.good());
}

std::size_t count_occurrences(const std::string& haystack, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) {
    ++count;
  }
  return count;
}

bool go_on_path() {
  std::string ignored;
  return pprof_test::run_command("command -v go", ignored);
}

// The first row under the "flat  flat%" header of `pprof -top`.
std::string first_top_row(const std::string& top_output) {
  std::istringstream lines(top_output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("flat%") != std::string::npos) {
      std::getline(lines, line);
      return line;
    }
  }
  return {};
}

}  // namespace

// ---- protobuf writer ----------------------------------------------------------

TEST_CASE("protobuf writer produces canonical wire bytes", "[pprof][protobuf]") {
  using spanprof::detail::ProtobufWriter;
  std::string out;
  ProtobufWriter writer(out);

  writer.uint64_field(1, 300);
  CHECK(out == std::string("\x08\xac\x02", 3));

  out.clear();
  writer.int64_field(2, -1);  // two's complement: ten bytes
  CHECK(out.size() == 11);

  out.clear();
  writer.sint64_field(1, -1);
  CHECK(out == std::string("\x08\x01", 2));

  out.clear();
  writer.packed_uint64_field(4, std::vector<std::uint64_t>{1, 150});
  CHECK(out == std::string("\x22\x03\x01\x96\x01", 5));
  out.clear();
  writer.packed_uint64_field(4, std::vector<std::uint64_t>{});
  CHECK(out.empty());

  // A nested body longer than 127 bytes needs a two-byte length, inserted in front.
  out.clear();
  writer.message_field(3, [](ProtobufWriter& body) { body.bytes_field(1, std::string(200, 'x')); });
  REQUIRE(out.size() == 1 + 2 + 1 + 2 + 200);
  CHECK(static_cast<std::uint8_t>(out[0]) == 0x1a);
  CHECK(static_cast<std::uint8_t>(out[1]) == ((203 & 0x7f) | 0x80));
  CHECK(static_cast<std::uint8_t>(out[2]) == (203 >> 7));

  out.clear();
  writer.fixed64_field(1, 0x0102030405060708ULL);
  CHECK(out == std::string("\x09\x08\x07\x06\x05\x04\x03\x02\x01", 9));
}

// ---- encoder round trip ---------------------------------------------------------

TEST_CASE("encode_pprof round-trips through an independent decoder", "[pprof]") {
  const Profile in = make_test_profile();
  std::string body, error;
  const spanprof::Status encoded = spanprof::encode_pprof_gzip(in, body);
  INFO(encoded.to_string());
  REQUIRE(encoded);

  pprof_test::DecodedPprof decoded;
  REQUIRE(pprof_test::decode_pprof(body, decoded, error));
  const Profile& out = decoded.profile;

  CHECK(decoded.string_table.at(0).empty());
  REQUIRE(out.sample_types.size() == 2);
  CHECK(out.sample_types[0].type == "samples");
  CHECK(out.sample_types[0].unit == "count");
  CHECK(out.sample_types[1].type == "cpu");
  CHECK(out.sample_types[1].unit == "nanoseconds");
  CHECK(out.period_type.type == "cpu");
  CHECK(out.period_type.unit == "nanoseconds");
  CHECK(out.period == ten_ms);
  CHECK(out.time_nanos == in.time_nanos);
  CHECK(out.duration_nanos == in.duration_nanos);
  CHECK(out.comments == in.comments);
  CHECK(out.default_sample_type == "cpu");

  REQUIRE(out.mappings.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(out.mappings[i].id == in.mappings[i].id);
    CHECK(out.mappings[i].memory_start == in.mappings[i].memory_start);
    CHECK(out.mappings[i].memory_limit == in.mappings[i].memory_limit);
    CHECK(out.mappings[i].file_offset == in.mappings[i].file_offset);
    CHECK(out.mappings[i].filename == in.mappings[i].filename);
    CHECK(out.mappings[i].build_id == in.mappings[i].build_id);
    CHECK(out.mappings[i].has_functions == in.mappings[i].has_functions);
  }

  REQUIRE(out.functions.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(out.functions[i].id == in.functions[i].id);
    CHECK(out.functions[i].name == in.functions[i].name);
    CHECK(out.functions[i].system_name == in.functions[i].system_name);
    CHECK(out.functions[i].filename == in.functions[i].filename);
  }

  REQUIRE(out.locations.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(out.locations[i].id == in.locations[i].id);
    CHECK(out.locations[i].mapping_id == in.locations[i].mapping_id);
    CHECK(out.locations[i].address == in.locations[i].address);
    CHECK(out.locations[i].function_id == in.locations[i].function_id);
  }

  REQUIRE(out.samples.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(out.samples[i].location_ids == in.samples[i].location_ids);
    CHECK(out.samples[i].values == in.samples[i].values);
    const auto labels = pprof_test::labels_of(out.samples[i]);
    CHECK(labels.at("trace_id") == trace_id);
    CHECK(labels.at("span_id") == span_id);
    CHECK(labels.at("span_name") == span_name);
  }
  REQUIRE(out.samples[0].labels.size() == 4);
  CHECK(out.samples[0].labels[3].key == "thread_id");
  CHECK(out.samples[0].labels[3].is_num);
  CHECK(out.samples[0].labels[3].num == 4242);

  CHECK(pprof_test::leaf_function(out, out.samples[0]) == "hot_function");
  CHECK(pprof_test::leaf_function(out, out.samples[1]) == "cold_function");
  CHECK(pprof_test::leaf_function(out, out.samples[2]).empty());
}

TEST_CASE("encode_pprof omits proto3 defaults and handles an empty profile", "[pprof]") {
  std::string bytes = "stale";
  REQUIRE(spanprof::encode_pprof(Profile{}, bytes));
  // Only the mandatory empty string-table entry: field 6, length 0.
  CHECK(bytes == std::string("\x32\x00", 2));

  pprof_test::DecodedPprof decoded;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(bytes, decoded, error));
  CHECK(decoded.string_table.size() == 1);
  CHECK(decoded.profile.samples.empty());

  // Negative values survive (two's complement varints), e.g. heap deltas.
  Profile negative;
  negative.sample_types = {{"delta", "bytes"}};
  spanprof::Sample sample;
  sample.values = {-4096};
  negative.samples = {sample};
  REQUIRE(spanprof::encode_pprof(negative, bytes));
  REQUIRE(pprof_test::decode_pprof(bytes, decoded, error));
  REQUIRE(decoded.profile.samples.size() == 1);
  CHECK(decoded.profile.samples[0].values == std::vector<std::int64_t>{-4096});
}

TEST_CASE("the string table stores each distinct string once", "[pprof]") {
  const std::string repeated = "a_span_name_long_enough_to_notice_if_it_were_duplicated";
  Profile p;
  p.sample_types = {{"samples", "count"}};
  p.functions = {{1, "f", "f", ""}};
  p.locations = {{1, 0, 0x1000, 1}};
  for (int i = 0; i < 100; ++i) {
    spanprof::Sample s;
    s.location_ids = {1};
    s.values = {1};
    s.labels = {string_label("span_name", repeated)};
    p.samples.push_back(s);
  }
  std::string raw;
  REQUIRE(spanprof::encode_pprof(p, raw));
  CHECK(count_occurrences(raw, repeated) == 1);
  CHECK(count_occurrences(raw, "span_name") == 2);  // the key, and the value's prefix
  // 100 samples with their labels cost a few bytes each, not the string's length.
  CHECK(raw.size() < 100 * 16 + 2 * repeated.size());

  pprof_test::DecodedPprof decoded;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(raw, decoded, error));
  // "", samples, count, f, span_name, the value.
  CHECK(decoded.string_table.size() == 6);
  std::size_t copies = 0;
  for (const auto& entry : decoded.string_table) copies += entry == repeated ? 1 : 0;
  CHECK(copies == 1);
  for (const auto& sample : decoded.profile.samples) CHECK(pprof_test::labels_of(sample).at("span_name") == repeated);
}

TEST_CASE("encode_pprof_gzip produces a gzip body", "[pprof][gzip]") {
  std::string body;
  REQUIRE(spanprof::encode_pprof_gzip(make_test_profile(), body));
  REQUIRE(body.size() > 18);
  CHECK(static_cast<std::uint8_t>(body[0]) == 0x1f);
  CHECK(static_cast<std::uint8_t>(body[1]) == 0x8b);
  std::string raw;
  REQUIRE(spanprof::detail::gzip_decompress(body, raw));
  std::string expected;
  REQUIRE(spanprof::encode_pprof(make_test_profile(), expected));
  CHECK(raw == expected);
}

// ---- go tool pprof --------------------------------------------------------------

TEST_CASE("go tool pprof reads the encoded profile", "[pprof][go]") {
  if (!go_on_path()) {
    WARN("go is not on PATH; skipping the go tool pprof check");
    return;
  }
  std::string body;
  REQUIRE(spanprof::encode_pprof_gzip(make_test_profile(), body));
  const std::string dir = temp_dir();
  const std::string file = dir + "/cpu.pb.gz";
  write_file(file, body);
  // A private HOME/GOCACHE: the test must not depend on, or write to, the user's.
  const std::string env = "HOME=" + dir + " GOCACHE=" + dir + "/gocache PPROF_TMPDIR=" + dir +
                          " GOFLAGS= GOTOOLCHAIN=local GOPROXY=off ";

  std::string top;
  const bool top_ok = pprof_test::run_command(env + "go tool pprof -top -symbolize=none " + file, top);
  INFO(top);
  REQUIRE(top_ok);
  CHECK(first_top_row(top).find("hot_function") != std::string::npos);
  CHECK(top.find("cold_function") != std::string::npos);
  CHECK(top.find("Type: cpu") != std::string::npos);
  CHECK(top.find("360ms") != std::string::npos);  // 36 samples of 10ms
  // Without a Line, pprof names a frame after its mapping's file.
  CHECK(top.find("[libc.so.6]") != std::string::npos);

  std::string tags;
  const bool tags_ok = pprof_test::run_command(env + "go tool pprof -tags " + file, tags);
  INFO(tags);
  REQUIRE(tags_ok);
  CHECK(tags.find("span_id") != std::string::npos);
  CHECK(tags.find(span_id) != std::string::npos);
  CHECK(tags.find("trace_id") != std::string::npos);
  CHECK(tags.find(trace_id) != std::string::npos);
  CHECK(tags.find("span_name") != std::string::npos);
  CHECK(tags.find(span_name) != std::string::npos);
  CHECK(tags.find("thread_id") != std::string::npos);
  CHECK(tags.find("4242") != std::string::npos);

  // The per-sample view: labels stay attached to the right stacks.
  std::string raw;
  const bool raw_ok = pprof_test::run_command(env + "go tool pprof -raw " + file, raw);
  INFO(raw);
  REQUIRE(raw_ok);
  CHECK(raw.find("fake-service") != std::string::npos);
  CHECK(raw.find("0123456789abcdef0123456789abcdef01234567") != std::string::npos);
  CHECK(count_occurrences(raw, "span_id:[" + span_id + "]") == 3);
  CHECK(count_occurrences(raw, "thread_id:[4242]") == 1);

  std::string cleanup;
  pprof_test::run_command("rm -rf " + dir, cleanup);
}

// ---- gzip -------------------------------------------------------------------------

namespace {

// Compresses `total` zero bytes without ever holding them all in memory.
std::string gzip_of_zeros(std::size_t total) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<unsigned char> zeros(std::size_t{1} << 20, 0);
  std::string out;
  std::vector<unsigned char> chunk(64 * 1024);
  std::size_t left = total;
  int rc = Z_OK;
  do {
    const std::size_t n = std::min(left, zeros.size());
    left -= n;
    stream.next_in = zeros.data();
    stream.avail_in = static_cast<uInt>(n);
    const int flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    do {
      stream.next_out = chunk.data();
      stream.avail_out = static_cast<uInt>(chunk.size());
      rc = deflate(&stream, flush);
      out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size() - stream.avail_out);
    } while (stream.avail_out == 0);
  } while (left > 0);
  deflateEnd(&stream);
  REQUIRE(rc == Z_STREAM_END);
  return out;
}

}  // namespace

namespace {

// What zlib makes of `input` at the same level with its full 32 KiB window.
std::size_t gzip_size_with_full_window(const std::string& input) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&stream, static_cast<uLong>(input.size())), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input.data()));
  stream.avail_in = static_cast<uInt>(input.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  const std::size_t size = out.size() - stream.avail_out;
  deflateEnd(&stream);
  return size;
}

}  // namespace

// A span's profile from 4 to 32 KiB is one deflate block of fixed codes written
// by spanprof (no zlib trees: their fixed cost was most of such a profile's
// encoding), below it stored; zlib's own inflate must read every match length,
// every distance to the edge of the window, and the stored fallback.
TEST_CASE("gzip of a span's profile is one block of fixed codes that zlib inflates; what does not compress is stored",
          "[gzip]") {
  std::mt19937_64 rng(11);
  std::vector<std::string> vocabulary;
  for (int i = 0; i < 40; ++i) {
    std::string name = "ns::detail::";
    for (std::size_t c = 0, length = 6 + rng() % 20; c < length; ++c) name.push_back(static_cast<char>('a' + rng() % 26));
    vocabulary.push_back(name);
  }
  const auto round_trips = [](const std::string& input) {
    std::string compressed, output;
    REQUIRE(spanprof::detail::gzip_compress(input, compressed));
    REQUIRE(spanprof::detail::gzip_decompress(compressed, output));
    CHECK(output == input);
    return compressed.size();
  };
  for (const std::size_t size : {0u, 1u, 2u, 3u, 4u, 200u, 258u, 259u, 262u, 500u, 4095u, 4096u, 16000u, 32767u,
                                 32768u, 32769u, 32800u, 40000u, 65535u, 65536u, 100000u}) {
    INFO("size " << size);
    // Names from a small vocabulary, as a pprof's functions, files and repeated
    // location bytes are; the first 64 bytes repeated at the very end.
    std::string text;
    while (text.size() < size) text += vocabulary[rng() % vocabulary.size()] + char(rng() % 4);
    text.resize(size);
    if (size > 128) text.replace(size - 64, 64, text, 0, 64);
    const std::size_t packed = round_trips(text);
    if (size >= 4096) {
      CHECK(packed < size / 2);
      // Fixed codes below 64 KiB give up what zlib's trees buy: a bounded share.
      CHECK(packed <= gzip_size_with_full_window(text) * 13 / 10 + 32);
    }
    // Random bytes do not compress: at most stored, 23 bytes more (5 per 64 KiB
    // block above).
    std::string noise;
    for (std::size_t i = 0; i < size; ++i) noise.push_back(static_cast<char>(rng()));
    const std::size_t stored = round_trips(noise);
    if (size < spanprof::detail::deflate_fixed_max_input) CHECK(stored == size + 5 + 18);
  }
  // Below the stored size, the fixed codes directly: the longest match (258) at
  // distance 1, every length on the way, a repeat at each distance class.
  const auto deflated_round_trips = [](const std::string& input) {
    std::string compressed, output;
    compressed.append(spanprof::detail::gzip_header, sizeof spanprof::detail::gzip_header);
    spanprof::detail::deflate_fixed(input, compressed);
    spanprof::detail::append_gzip_trailer(input, compressed);
    REQUIRE(spanprof::detail::gzip_decompress(compressed, output));
    CHECK(output == input);
    return compressed.size();
  };
  CHECK(deflated_round_trips("") == 20);
  for (std::size_t run = 1; run <= 600; run += (run < 300 ? 1 : 37)) CHECK(deflated_round_trips(std::string(run, 'a')) <= 30);
  for (std::size_t size = 1; size < 300; size += 7) {
    std::string words;
    while (words.size() < size) words += vocabulary[rng() % 3];
    deflated_round_trips(words);
  }
  // A match at the window's reach (32768 back) and one just past it (a literal run).
  for (const std::size_t gap : {32768u - 20u, 32768u - 19u, 32768u}) {
    std::string far;
    for (std::size_t i = 0; i < gap + 20; ++i) far.push_back(static_cast<char>(rng()));
    far.replace(gap, 20, far, 0, 20);
    round_trips(far);
  }
  // Every length/distance pair class: a repeat of each length at each distance class.
  std::string mixed;
  for (std::size_t distance = 1; distance <= 30000; distance = distance * 3 + 1) {
    for (std::size_t length = 3; length <= 258; length = length * 2 + 1) {
      std::string chunk;
      for (std::size_t i = 0; i < distance; ++i) chunk.push_back(static_cast<char>(rng() % 251));
      mixed += chunk;
      mixed.append(chunk, 0, std::min(length, chunk.size()));
      if (mixed.size() > 60000) break;
    }
    if (mixed.size() > 60000) break;
  }
  round_trips(mixed);
}

// Stored members are written by hand (no deflateInit for a stream nobody searches):
// zlib's own inflate, and gzip's trailer checks, must accept every block layout.
TEST_CASE("gzip stored members span several blocks and gunzip with zlib", "[gzip]") {
  std::mt19937_64 rng(13);
  for (const std::size_t size : {0u, 1u, 65535u, 65536u, 131070u, 200000u}) {
    std::string input;
    for (std::size_t i = 0; i < size; ++i) input.push_back(static_cast<char>(rng()));
    std::string stored, output;
    spanprof::detail::gzip_store(input, stored);
    INFO("size " << size);
    const std::size_t blocks = size == 0 ? 1 : (size + 65534) / 65535;
    CHECK(stored.size() == 10 + 5 * blocks + size + 8);
    REQUIRE(spanprof::detail::gzip_decompress(stored, output));
    CHECK(output == input);
    if (size > 0) {
      stored[stored.size() - 8] = static_cast<char>(stored[stored.size() - 8] ^ 1);  // the CRC-32
      CHECK_FALSE(spanprof::detail::gzip_decompress(stored, output));
    }
  }
}

TEST_CASE("gzip round-trips and rejects damaged input", "[gzip]") {
  using spanprof::detail::gzip_compress;
  using spanprof::detail::gzip_decompress;
  std::mt19937_64 rng(7);
  std::string input;
  for (int i = 0; i < 200000; ++i) input.push_back(static_cast<char>(rng() % 16 + 'a'));

  std::string compressed;
  std::string error;
  REQUIRE(gzip_compress(input, compressed));
  CHECK(compressed.size() < input.size());
  std::string output;
  REQUIRE(gzip_decompress(compressed, output));
  CHECK(output == input);

  // An empty payload still makes a valid gzip member (one empty stored block: 23 bytes).
  REQUIRE(gzip_compress("", compressed));
  CHECK(compressed.size() == 23);
  REQUIRE(gzip_decompress(compressed, output));
  CHECK(output.empty());

  REQUIRE(gzip_compress(input, compressed));
  // Exactly at the limit is fine; one byte under is not.
  CHECK(gzip_decompress(compressed, output, input.size()));
  const spanprof::Status over = gzip_decompress(compressed, output, input.size() - 1);
  CHECK_FALSE(over);
  error = over.message();
  CHECK(output.empty());
  CHECK(error.find("exceeds") != std::string::npos);

  // Truncated at many points.
  for (std::size_t cut = 0; cut < compressed.size(); cut += 97) {
    const spanprof::Status cut_short = gzip_decompress(std::string_view(compressed).substr(0, cut), output);
    CHECK_FALSE(cut_short);
    CHECK_FALSE(cut_short.message().empty());
  }
  // Corrupted payload: the CRC or the deflate stream catches it.
  std::string corrupt = compressed;
  corrupt[corrupt.size() / 2] = static_cast<char>(corrupt[corrupt.size() / 2] ^ 0x55);
  CHECK_FALSE(gzip_decompress(corrupt, output));

  CHECK_FALSE(gzip_decompress("not gzip at all", output));
  CHECK_FALSE(gzip_decompress("", output));

  // Concatenated members decode like gunzip; trailing junk does not.
  std::string second;
  REQUIRE(gzip_compress("tail", second));
  REQUIRE(gzip_decompress(compressed + second, output));
  CHECK(output == input + "tail");
  const spanprof::Status junk = gzip_decompress(compressed + "junk", output);
  CHECK_FALSE(junk);
  CHECK(junk.message().find("trailing") != std::string::npos);
}

TEST_CASE("gzip_decompress stops a decompression bomb at max_out", "[gzip]") {
  const std::string bomb = gzip_of_zeros(std::size_t{300} << 20);
  INFO("bomb size " << bomb.size());
  CHECK(bomb.size() < (std::size_t{1} << 20));
  std::string output;
  const spanprof::Status refused = spanprof::detail::gzip_decompress(bomb, output, std::size_t{1} << 20);
  CHECK_FALSE(refused);
  CHECK(output.empty());
  CHECK(output.capacity() <= (std::size_t{2} << 20));
  CHECK(refused.message().find("exceeds") != std::string::npos);
  // The default limit (256 MiB) also refuses it.
  CHECK_FALSE(spanprof::detail::gzip_decompress(bomb, output));
}

// ---- legacy CPU profile -----------------------------------------------------------

namespace {

using Words = std::vector<std::uint64_t>;

std::string words_to_bytes(const Words& words) {
  std::string bytes(words.size() * 8, '\0');
  if (!words.empty()) std::memcpy(&bytes[0], words.data(), bytes.size());
  return bytes;
}

const Words legacy_header = {0, 3, 0, 10000, 0};
const Words legacy_trailer = {0, 1, 0};
const std::string legacy_maps =
    "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/fake-service\n"
    "7f0000000000-7f0000200000 r-xp 00028000 08:02 135522  /lib/x86_64-linux-gnu/libc.so.6\n";

std::string legacy_file(const Words& records, bool with_trailer = true, const std::string& maps = legacy_maps) {
  Words words = legacy_header;
  words.insert(words.end(), records.begin(), records.end());
  if (with_trailer) words.insert(words.end(), legacy_trailer.begin(), legacy_trailer.end());
  return words_to_bytes(words) + maps;
}

const Words three_records = {
    7, 3, 0x401234, 0x402345, 0x403456,  // most recent call first
    2, 1, 0x401234,                      //
    1, 2, 0x7f0000012345, 0x402345,      //
};

}  // namespace

TEST_CASE("legacy CPU profile parses samples, period and maps", "[legacy]") {
  spanprof::detail::LegacyCpuProfile parsed;
  std::string error;
  REQUIRE(spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(legacy_file(three_records), parsed), error));
  INFO(error);
  CHECK(parsed.period_us == 10000);
  REQUIRE(parsed.samples.size() == 3);
  CHECK(parsed.samples[0].values == std::vector<std::int64_t>{7, 7 * ten_ms});
  CHECK(parsed.samples[0].frames == std::vector<std::uintptr_t>{0x401234, 0x402345, 0x403456});
  CHECK(parsed.samples[1].values == std::vector<std::int64_t>{2, 2 * ten_ms});
  CHECK(parsed.samples[1].frames == std::vector<std::uintptr_t>{0x401234});
  CHECK(parsed.samples[2].values == std::vector<std::int64_t>{1, ten_ms});
  CHECK(parsed.samples[2].frames == std::vector<std::uintptr_t>{0x7f0000012345, 0x402345});
  CHECK(parsed.maps_text == legacy_maps);

  // No samples and no maps is still a well-formed (idle) profile.
  REQUIRE(spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(legacy_file({}, true, ""), parsed), error));
  CHECK(parsed.samples.empty());
  CHECK(parsed.maps_text.empty());
}

namespace {

std::string legacy_error(const std::string& bytes) {
  spanprof::detail::LegacyCpuProfile parsed;
  std::string error;
  const bool ok = spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(bytes, parsed), error);
  CHECK_FALSE(ok);
  CHECK(parsed.samples.empty());
  CHECK_FALSE(error.empty());
  return error;
}

Words byte_swap_all(Words words) {
  for (auto& w : words) w = __builtin_bswap64(w);
  return words;
}

}  // namespace

TEST_CASE("legacy CPU profile rejects malformed input precisely", "[legacy]") {
  CHECK(legacy_error("").find("too short") != std::string::npos);
  CHECK(legacy_error(std::string(7, '\0')).find("too short") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000})).find("too short") != std::string::npos);

  CHECK(legacy_error(words_to_bytes({1, 3, 0, 10000, 0, 0, 1, 0})).find("bad header") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 4, 0, 10000, 0, 0, 1, 0})).find("bad header") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 1, 10000, 0, 0, 1, 0})).find("version") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 0, 0, 0, 1, 0})).find("period is zero") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000, 9, 0, 1, 0})).find("padding") != std::string::npos);
  CHECK(legacy_error(words_to_bytes(byte_swap_all({0, 3, 0, 10000, 0, 0, 1, 0}))).find("byte order") !=
        std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000ULL << 32, 0, 0, 1, 0})).find("implausible sampling") !=
        std::string::npos);
  {
    // What a 32-bit build of gperftools writes: 0,3,0,period,0 as 32-bit words.
    const std::uint32_t words32[] = {0, 3, 0, 10000, 0, 0, 1, 0, 0, 0};
    std::string bytes(sizeof words32, '\0');
    std::memcpy(&bytes[0], words32, sizeof words32);
    CHECK(legacy_error(bytes).find("32-bit") != std::string::npos);
  }

  CHECK(legacy_error(legacy_file({1, 1ULL << 40, 0x1000})).find("claims") != std::string::npos);
  CHECK(legacy_error(legacy_file({1, 4097, 0x1000})).find("claims") != std::string::npos);
  CHECK(legacy_error(legacy_file({1, ~0ULL, 0x1000})).find("claims") != std::string::npos);
  // 4096 pcs are allowed, but these run past the end.
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000, 0, 1, 4096, 0x1000})).find("past the end") !=
        std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000, 0, 1, 3, 0x1000, 0x2000})).find("past the end") !=
        std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000, 0, 1})).find("truncated record header") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000, 0}) + "abc").find("truncated record header") !=
        std::string::npos);
  CHECK(legacy_error(legacy_file(three_records, false, "")).find("missing trailer") != std::string::npos);
  CHECK(legacy_error(words_to_bytes({0, 3, 0, 10000, 0})).find("missing trailer") != std::string::npos);
  CHECK(legacy_error(legacy_file({1, 0})).find("no pcs") != std::string::npos);
  CHECK(legacy_error(legacy_file({0, 2, 0x1000, 0x2000})).find("zero count") != std::string::npos);
  CHECK(legacy_error(legacy_file({~0ULL >> 1, 1, 0x1000})).find("implausible count") != std::string::npos);
}

TEST_CASE("legacy CPU profile survives truncation, bit flips and random bytes", "[legacy]") {
  spanprof::detail::LegacyCpuProfile parsed;
  std::string error;
  const std::string valid = legacy_file(three_records);
  const std::size_t data_end = (legacy_header.size() + three_records.size() + legacy_trailer.size()) * 8;

  // Every prefix: fails until the trailer is complete, then yields a maps prefix.
  for (std::size_t n = 0; n <= valid.size(); ++n) {
    const bool ok = spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(std::string_view(valid).substr(0, n), parsed), error);
    if (n < data_end) {
      CHECK_FALSE(ok);
    } else {
      REQUIRE(ok);
      CHECK(parsed.samples.size() == 3);
      CHECK(parsed.maps_text == valid.substr(data_end, n - data_end));
    }
  }

  std::mt19937_64 rng(12345);
  // Single bit flips anywhere: any verdict, but in bounds and self-consistent.
  for (std::size_t bit = 0; bit < data_end * 8; ++bit) {
    std::string flipped = valid;
    flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
    if (spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(flipped, parsed), error)) {
      for (const auto& sample : parsed.samples) {
        CHECK_FALSE(sample.frames.empty());
        CHECK(sample.frames.size() <= 4096);
      }
    } else {
      CHECK_FALSE(error.empty());
    }
  }

  // Pure noise never passes the header check.
  for (int i = 0; i < 2000; ++i) {
    std::string noise(rng() % 1024, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    error.clear();
    CHECK_FALSE(spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(noise, parsed), error));
    CHECK_FALSE(error.empty());
  }

  // A valid header followed by noise words with small values reaches the record parser.
  for (int i = 0; i < 2000; ++i) {
    Words words = legacy_header;
    const std::size_t n = rng() % 64;
    for (std::size_t w = 0; w < n; ++w) words.push_back(rng() % 4 == 0 ? rng() : rng() % 6);
    std::string bytes = words_to_bytes(words);
    bytes.append(rng() % 9, 'x');
    if (spanprof_test::ok_or(spanprof::detail::parse_legacy_cpu_profile(bytes, parsed), error)) {
      for (const auto& sample : parsed.samples) CHECK(sample.values.size() == 2);
    } else {
      CHECK_FALSE(error.empty());
    }
  }
}
