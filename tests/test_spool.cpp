// The on-disk spool and the pprof decoder it relies on to rebuild profiles.
//
// Spool tests run against a real directory: order, separation, the bound, restart,
// corruption, leftovers and write failures. Where a failure can only be provoked
// with privileges (a full disk needs a tiny tmpfs) or only without them (chmod
// does not stop root), the test says which case it proved and warns when it had
// to skip one.
//
// Decoder tests check exact round trips, then throw random, truncated and mutated
// bytes at it: under ASan/UBSan "never crashes" means no invalid access and no
// undefined behaviour, not merely no segfault.
#include "support/catch.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/detail/profile/gzip.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>
#include <spanprof/detail/delivery/spool.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/delivery/uploader.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

namespace fs = std::filesystem;
using spanprof::Profile;
using spanprof::detail::Spool;
using spanprof::detail::SpoolItem;

namespace {

// ---- fixtures -------------------------------------------------------------------

using spanprof_test::contains;
using spanprof_test::string_label;

using spanprof_test::TempDir;


std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::size_t count_with_suffix(const std::string& dir, const std::string& suffix) {
  std::size_t count = 0;
  for (const std::string& name : names_in(dir)) {
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ++count;
    }
  }
  return count;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}



spanprof::Label number_label(std::string key, std::int64_t value, std::string unit) {
  spanprof::Label label;
  label.key = std::move(key);
  label.num = value;
  label.num_unit = std::move(unit);
  label.is_num = true;
  return label;
}

// Every field of the model set, none to its default, so a field the decoder
// dropped cannot pass unnoticed.
Profile make_profile() {
  Profile p;
  p.sample_types = {{"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"delta", "bytes"}};
  p.period_type = {"space", "bytes"};
  p.period = 524288;
  p.time_nanos = 1'700'000'000'123'456'789;
  p.duration_nanos = 2'500'000'000;
  p.comments = {"spanprof spool test", "second comment", ""};
  p.default_sample_type = "alloc_space";

  spanprof::Mapping exe;
  exe.id = 1;
  exe.memory_start = 0x400000;
  exe.memory_limit = 0x500000;
  exe.file_offset = 0x1000;
  exe.filename = "/usr/bin/fake-service";
  exe.build_id = "0123456789abcdef0123456789abcdef01234567";
  exe.has_functions = true;
  spanprof::Mapping libc;
  libc.id = 7;
  libc.memory_start = 0x7f0000000000;
  libc.memory_limit = 0x7f0000200000;
  libc.file_offset = 0x28000;
  libc.filename = "/lib/x86_64-linux-gnu/libc.so.6";
  libc.build_id = "fedcba9876543210";
  p.mappings = {exe, libc};

  p.functions = {{1, "hot_function()", "_Z12hot_functionv", "/src/hot.cc"},
                 {5, "cold_function()", "_Z13cold_functionv", "/src/cold.cc"}};
  p.locations = {{1, 1, 0x401234, 1}, {2, 1, 0x402345, 5}, {3, 7, 0x7f0000012345, 0}, {9, 0, 0xdead, 0}};

  spanprof::Sample hot;
  hot.location_ids = {1, 2};
  hot.values = {30, 30 * 4096, -4096};
  hot.labels = {string_label("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
                string_label("span_id", "00f067aa0ba902b7"), string_label("span_name", "POST /checkout"),
                number_label("bytes", 4096, "bytes"), number_label("thread_id", -42, "")};
  spanprof::Sample cold;
  cold.location_ids = {2};
  cold.values = {5, 5 * 4096, 0};
  cold.labels = {string_label("span_name", "POST /checkout"), string_label("empty_value", "")};
  spanprof::Sample unsymbolized;
  unsymbolized.location_ids = {3, 9, 2};
  unsymbolized.values = {1, 1 << 20, 1};
  spanprof::Sample no_stack;
  no_stack.values = {0, 0, 0};
  p.samples = {hot, cold, unsymbolized, no_stack};
  return p;
}

std::string gzip_of(const Profile& profile) {
  std::string body;
  REQUIRE(spanprof::encode_pprof_gzip(profile, body));
  return body;
}

// A record and the bytes an uploader would send for it.
struct Encoded {
  spanprof::EncodedProfile profile;
  std::string payload;
};

Encoded make_encoded(const std::string& payload, const std::string& span_name = "POST /checkout") {
  Encoded e;
  spanprof::SpanRecord& r = e.profile.record;
  r.kind = spanprof::ProfileKind::heap;
  r.span.trace_id = spanprof::TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  r.span.span_id = spanprof::SpanId::from_hex("00f067aa0ba902b7");
  r.span.flags.value = 0x01;
  r.span_name = span_name;
  r.start_unix_ns = 1'700'000'000'000'000'001;
  r.duration_ns = 250'000'042;
  r.period_ns = 10'000'003;
  r.heap_interval_bytes = 524'289;
  r.engine = "sampling:perf_event";
  r.reason = spanprof::ProfileReason::slow;
  r.time = spanprof::TimeSplit{41'000'001, 80'000'002, 129'000'039, 3, 17};
  e.profile.sample_count = 12345;
  e.payload = payload;
  return e;
}

// A profile whose bytes are not pprof: for tests of the spool alone.
Encoded small_encoded(const std::string& span_name, std::size_t payload = 100) {
  return make_encoded(std::string(payload, 'x'), span_name);
}

std::uint64_t stored_size(std::string_view uploader, const Encoded& e) {
  return Spool::stored_size(uploader, e.profile, e.payload);
}

spanprof::Status store(Spool& spool, std::string_view uploader, const Encoded& e) {
  return spool.store(uploader, e.profile, e.payload);
}

spanprof::Status load(Spool& spool, const SpoolItem& item, Encoded& out) {
  return spool.load(item, out.profile, out.payload);
}

void check_same_encoded(const Encoded& got, const Encoded& want) {
  const spanprof::SpanRecord& g = got.profile.record;
  const spanprof::SpanRecord& w = want.profile.record;
  CHECK(g.kind == w.kind);
  CHECK(g.span.trace_id == w.span.trace_id);
  CHECK(g.span.span_id == w.span.span_id);
  CHECK(g.span.flags.value == w.span.flags.value);
  CHECK(g.span_name == w.span_name);
  CHECK(g.start_unix_ns == w.start_unix_ns);
  CHECK(g.duration_ns == w.duration_ns);
  CHECK(g.period_ns == w.period_ns);
  CHECK(g.heap_interval_bytes == w.heap_interval_bytes);
  CHECK(g.time.running_ns == w.time.running_ns);
  CHECK(g.time.waiting_ns == w.time.waiting_ns);
  CHECK(g.time.blocked_ns == w.time.blocked_ns);
  CHECK(g.time.voluntary_switches == w.time.voluntary_switches);
  CHECK(g.time.involuntary_switches == w.time.involuntary_switches);
  CHECK(got.profile.sample_count == want.profile.sample_count);
  CHECK(got.profile.span_count == want.profile.span_count);
  CHECK(g.engine == w.engine);
  CHECK(g.reason == w.reason);
  CHECK(got.payload == want.payload);
}

std::vector<std::string> span_names(Spool& spool, const std::string& uploader) {
  std::vector<std::string> names;
  for (const SpoolItem& item : spool.pending(uploader)) {
    Encoded out;
    if (const spanprof::Status loaded = load(spool, item, out)) {
      names.push_back(out.profile.record.span_name);
    } else {
      names.push_back("<" + loaded.message() + ">");
    }
  }
  return names;
}

std::string only_spool_file(const std::string& dir) {
  std::vector<std::string> found;
  for (const std::string& name : names_in(dir)) {
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".spool") == 0) found.push_back(name);
  }
  REQUIRE(found.size() == 1);
  return dir + "/" + found[0];
}

}  // namespace

// ---- spool: the normal path ----------------------------------------------------------

TEST_CASE("spool round-trips every field and the payload", "[spool]") {
  TempDir dir;
  Spool spool(dir.sub("spool"), 1 << 20);
  std::string error;
  REQUIRE(spool.open());

  const Profile original = make_profile();
  const Encoded in = make_encoded(gzip_of(original));
  REQUIRE(store(spool, "otlp", in));
  CHECK(spool.counters().stored == 1);
  CHECK(spool.bytes() == Spool::stored_size("otlp", in.profile, in.payload));

  const auto items = spool.pending("otlp");
  REQUIRE(items.size() == 1);
  const SpoolItem& item = items[0];
  CHECK(item.uploader == "otlp");
  CHECK(item.sequence == 1);
  CHECK(item.size_bytes == spool.bytes());
  CHECK(item.stored_unix_ns > 0);
  // <20-digit sequence>-<20-digit unix ns>-<uploader>.spool, private to the owner.
  CHECK(item.file_name.size() == 20 + 1 + 20 + 1 + 4 + 6);
  CHECK(item.file_name.compare(0, 21, "00000000000000000001-") == 0);
  CHECK(item.file_name.compare(42, std::string::npos, "otlp.spool") == 0);
  struct stat st {};
  REQUIRE(::stat((dir.sub("spool") + "/" + item.file_name).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(static_cast<std::uint64_t>(st.st_size) == item.size_bytes);

  // The record and the payload apart: what an uploader sends again.
  Encoded out;
  const spanprof::Status loaded = load(spool, item, out);
  INFO(loaded.message());
  REQUIRE(loaded);
  check_same_encoded(out, in);

  // A payload other than the profile's pprof (an OTLP request, a Pyroscope push).
  REQUIRE(spool.store("other", in.profile, "the wire bytes"));
  const auto other = spool.pending("other");
  REQUIRE(other.size() == 1);
  REQUIRE(load(spool, other[0], out));
  CHECK(out.payload == "the wire bytes");
  CHECK(spool.remove(other[0]));

  // Loading does not consume; remove() does.
  CHECK(spool.pending("otlp").size() == 1);
  CHECK(spool.remove(item));
  CHECK(spool.pending("otlp").empty());
  CHECK(spool.bytes() == 0);
  CHECK(count_with_suffix(dir.sub("spool"), ".spool") == 0);
  CHECK(!spanprof_test::ok_or(load(spool, item, out), error));
  CHECK(contains(error, "not pending"));
}

TEST_CASE("spool returns each uploader's items oldest first, and only its own", "[spool]") {
  TempDir dir;
  Spool spool(dir.path(), 1 << 20);
  std::string error;
  REQUIRE(spool.open());

  // Names a naive sanitizer (replace odd bytes with '_') would merge, an empty
  // name, and two long names that differ only past the part kept in file names.
  const std::string long_a = std::string(300, 'a') + "/1";
  const std::string long_b = std::string(300, 'a') + "/2";
  const std::vector<std::string> uploaders = {"otlp/http", "otlp_http", "otlp%2fhttp", "", long_a, long_b, "../../etc"};
  for (int round = 0; round < 3; ++round) {
    for (const std::string& uploader : uploaders) {
      REQUIRE(store(spool, uploader, small_encoded(uploader + "#" + std::to_string(round))));
    }
  }
  CHECK(spool.counters().stored == 3 * uploaders.size());
  for (const std::string& uploader : uploaders) {
    INFO("uploader '" << uploader << "'");
    CHECK(span_names(spool, uploader) == std::vector<std::string>{uploader + "#0", uploader + "#1", uploader + "#2"});
    const auto items = spool.pending(uploader);
    REQUIRE(items.size() == 3);
    CHECK(items[0].sequence < items[1].sequence);
    CHECK(items[1].sequence < items[2].sequence);
    for (const SpoolItem& item : items) CHECK(item.file_name.find('/') == std::string::npos);
  }
  CHECK(spool.pending("otlp").empty());
  // Nothing escaped the directory, every name fits comfortably in NAME_MAX.
  CHECK(count_with_suffix(dir.path(), ".spool") == 3 * uploaders.size());
  for (const std::string& name : names_in(dir.path())) CHECK(name.size() < 160);

  // An item handed to the wrong uploader's load is refused without harm.
  SpoolItem foreign = spool.pending("otlp/http").front();
  foreign.uploader = "otlp_http";
  Encoded out;
  CHECK(!spanprof_test::ok_or(load(spool, foreign, out), error));
  CHECK(contains(error, "does not belong"));
  CHECK(spool.counters().corrupt_removed == 0);
  CHECK(spool.pending("otlp/http").size() == 3);
}

TEST_CASE("spool stays within max_bytes by evicting the oldest files", "[spool]") {
  TempDir dir;
  const std::uint64_t one = stored_size("u", small_encoded("p0"));
  REQUIRE(one == stored_size("v", small_encoded("p9")));
  Spool spool(dir.path(), 3 * one + one / 2);  // room for three and a half
  REQUIRE(spool.open());

  for (int i = 0; i < 5; ++i) REQUIRE(store(spool, "u", small_encoded("p" + std::to_string(i))));
  CHECK(spool.counters().stored == 5);
  CHECK(spool.counters().evicted == 2);
  CHECK(spool.bytes() == 3 * one);
  CHECK(span_names(spool, "u") == std::vector<std::string>{"p2", "p3", "p4"});
  CHECK(count_with_suffix(dir.path(), ".spool") == 3);

  // Oldest across uploaders: v's profile pushes out u's oldest, not a v one.
  REQUIRE(store(spool, "v", small_encoded("p9")));
  CHECK(spool.counters().evicted == 3);
  CHECK(span_names(spool, "u") == std::vector<std::string>{"p3", "p4"});
  CHECK(span_names(spool, "v") == std::vector<std::string>{"p9"});
  CHECK(spool.bytes() == 3 * one);
  CHECK(spool.bytes() <= spool.max_bytes());
}

TEST_CASE("spool refuses a profile larger than its bound instead of evicting everything", "[spool]") {
  TempDir dir;
  const Encoded small = small_encoded("small");
  const std::uint64_t one = stored_size("u", small);
  Spool spool(dir.path(), 2 * one);
  std::string error;
  REQUIRE(spool.open());
  REQUIRE(store(spool, "u", small));

  const Encoded big = small_encoded("big", static_cast<std::size_t>(2 * one));
  CHECK(!spanprof_test::ok_or(store(spool, "u", big), error));
  CHECK(contains(error, "exceeds the spool's bound"));
  CHECK(spool.counters().stored == 1);
  CHECK(spool.counters().evicted == 0);
  CHECK(span_names(spool, "u") == std::vector<std::string>{"small"});
  CHECK(names_in(dir.path()).size() == 2);  // the small profile and the lock file; no temp file

  // Exactly the bound is allowed.
  const Encoded exact = small_encoded("exact", static_cast<std::size_t>(2 * one - (one - 100)));
  REQUIRE(stored_size("u", exact) == 2 * one);
  REQUIRE(store(spool, "u", exact));
  CHECK(spool.counters().evicted == 1);
  CHECK(span_names(spool, "u") == std::vector<std::string>{"exact"});
}

TEST_CASE("a spool opened again resumes where the last one stopped", "[spool]") {
  TempDir dir;
  std::string error;
  std::vector<std::uint64_t> first_sequences;
  {
    Spool spool(dir.path(), 1 << 20);
    REQUIRE(spool.open());
    REQUIRE(store(spool, "a", small_encoded("a1")));
    REQUIRE(store(spool, "b", small_encoded("b1")));
    REQUIRE(store(spool, "a", small_encoded("a2")));
    for (const auto& item : spool.pending("a")) first_sequences.push_back(item.sequence);

    // A second spool on the same directory (here or in another process) would
    // interleave sequence numbers: the lock turns it away.
    Spool intruder(dir.path(), 1 << 20);
    CHECK(!spanprof_test::ok_or(intruder.open(), error));
    CHECK(contains(error, "in use"));
  }  // "process exits"

  Spool restarted(dir.path(), 1 << 20);
  REQUIRE(restarted.open());
  CHECK(restarted.size() == 3);
  CHECK(restarted.bytes() == 3 * stored_size("a", small_encoded("a1")));
  CHECK(span_names(restarted, "a") == std::vector<std::string>{"a1", "a2"});
  CHECK(span_names(restarted, "b") == std::vector<std::string>{"b1"});
  std::vector<std::uint64_t> sequences;
  for (const auto& item : restarted.pending("a")) sequences.push_back(item.sequence);
  CHECK(sequences == first_sequences);

  REQUIRE(store(restarted, "a", small_encoded("a3")));
  const auto items = restarted.pending("a");
  REQUIRE(items.size() == 3);
  CHECK(items.back().sequence == 4);
  CHECK(span_names(restarted, "a") == std::vector<std::string>{"a1", "a2", "a3"});
}

TEST_CASE("a spool reopened with a smaller bound trims oldest first", "[spool]") {
  TempDir dir;
  const std::uint64_t one = stored_size("u", small_encoded("p0"));  // p1 and p2 are this size too
  {
    Spool spool(dir.path(), 1 << 20);
    REQUIRE(spool.open());
    REQUIRE(store(spool, "u", small_encoded("p0")));
    REQUIRE(store(spool, "u", small_encoded("huge", 10 * one)));
    REQUIRE(store(spool, "u", small_encoded("p1")));
    REQUIRE(store(spool, "u", small_encoded("p2")));
  }
  Spool smaller(dir.path(), 2 * one);
  REQUIRE(smaller.open());
  // "huge" alone exceeds the bound and goes; then p0, the oldest, makes room.
  CHECK(smaller.counters().evicted == 2);
  CHECK(span_names(smaller, "u") == std::vector<std::string>{"p1", "p2"});
  CHECK(smaller.bytes() == 2 * one);
  CHECK(count_with_suffix(dir.path(), ".spool") == 2);
}

TEST_CASE("open deletes leftover temporary files and leaves foreign files alone", "[spool]") {
  TempDir dir;
  const std::string temp = ".00000000000000000007-00000000000000000001-u.spool.tmp";
  write_bytes(dir.sub(temp), "half a profile");
  write_bytes(dir.sub(".00000000000000000008-00000000000000000001-u.spool.tmp"), "");
  const std::vector<std::string> foreign = {
      "notes.txt",
      ".hidden",
      ".notes.tmp",
      "00000000000000000001-x.spool",                           // too short to be ours
      "0000000000000000000a-00000000000000000001-u.spool",      // not a number
      "00000000000000000002-00000000000000000001-u.spool.bak",  // wrong suffix
      "00000000000000000003-00000000000000000001-a b.spool",    // a byte we always escape
      "18446744073709551615-00000000000000000001-u.spool",      // would wrap the sequence
  };
  for (const std::string& name : foreign) write_bytes(dir.sub(name), "not ours");
  // Matching names that are not regular files are not ours either.
  const std::string directory_name = "00000000000000000009-00000000000000000001-u.spool";
  REQUIRE(::mkdir(dir.sub(directory_name).c_str(), 0700) == 0);
  const std::string symlink_name = "00000000000000000010-00000000000000000001-u.spool";
  REQUIRE(::symlink("/etc/passwd", dir.sub(symlink_name).c_str()) == 0);

  Spool spool(dir.path(), 1 << 20);
  REQUIRE(spool.open());
  CHECK(spool.counters().temp_removed == 2);
  CHECK(!fs::exists(dir.sub(temp)));
  for (const std::string& name : foreign) CHECK(fs::exists(dir.sub(name)));
  CHECK(fs::is_directory(dir.sub(directory_name)));
  CHECK(fs::is_symlink(dir.sub(symlink_name)));
  CHECK(spool.pending("u").empty());
  CHECK(spool.size() == 0);
  CHECK(spool.bytes() == 0);

  // The sequence ignores foreign names: the first store is number 1.
  REQUIRE(store(spool, "u", small_encoded("first")));
  CHECK(spool.pending("u").front().sequence == 1);
}

// ---- spool: corruption -------------------------------------------------------------

TEST_CASE("every flipped byte and every truncation of a spool file is caught and the file removed", "[spool]") {
  TempDir dir;
  Spool spool(dir.path(), 1 << 20);
  std::string error;
  REQUIRE(spool.open());
  const Encoded in = small_encoded("victim", 16);
  const std::uint64_t size = stored_size("u", in);

  std::uint64_t expected_corrupt = 0;
  for (std::uint64_t pos = 0; pos < size; ++pos) {
    REQUIRE(store(spool, "u", in));
    const std::string path = only_spool_file(dir.path());
    std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() == size);
    bytes[static_cast<std::size_t>(pos)] ^= 0x20;
    write_bytes(path, bytes);
    Encoded out;
    INFO("flipped byte " << pos);
    CHECK(!spanprof_test::ok_or(load(spool, spool.pending("u").front(), out), error));
    CHECK(contains(error, "removed corrupt"));
    CHECK(!fs::exists(path));
    CHECK(spool.pending("u").empty());
    ++expected_corrupt;
  }
  for (std::uint64_t length = 0; length < size; ++length) {
    REQUIRE(store(spool, "u", in));
    const std::string path = only_spool_file(dir.path());
    fs::resize_file(path, length);
    Encoded out;
    INFO("truncated to " << length);
    CHECK(!spanprof_test::ok_or(load(spool, spool.pending("u").front(), out), error));
    CHECK(!fs::exists(path));
    ++expected_corrupt;
  }
  CHECK(spool.counters().corrupt_removed == expected_corrupt);
  CHECK(spool.bytes() == 0);
  CHECK(count_with_suffix(dir.path(), ".spool") == 0);
}

TEST_CASE("spool removes garbage, wrong-version and misplaced files on load", "[spool]") {
  TempDir dir;
  std::string error;
  std::string valid_bytes;
  {
    Spool spool(dir.path(), 1 << 20);
    REQUIRE(spool.open());
    REQUIRE(store(spool, "u", make_encoded(gzip_of(make_profile()))));
    valid_bytes = read_bytes(only_spool_file(dir.path()));
    REQUIRE(spool.remove(spool.pending("u").front()));
  }
  // A newer format version, CRC recomputed so only the version is wrong.
  std::string newer = valid_bytes;
  newer[8] = 3;
  const uLong crc = ::crc32(0L, reinterpret_cast<const Bytef*>(newer.data()), static_cast<uInt>(newer.size() - 4));
  for (std::size_t i = 0; i < 4; ++i) newer[newer.size() - 4 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);

  write_bytes(dir.sub("00000000000000000011-00000000000000000001-u.spool"), "garbage");
  write_bytes(dir.sub("00000000000000000012-00000000000000000001-u.spool"), std::string(4096, '\0'));
  write_bytes(dir.sub("00000000000000000013-00000000000000000001-u.spool"), newer);
  // Valid for uploader "u", but renamed as if it were "w"'s.
  write_bytes(dir.sub("00000000000000000014-00000000000000000001-w.spool"), valid_bytes);
  write_bytes(dir.sub("00000000000000000015-00000000000000000001-u.spool"), valid_bytes);

  Spool spool(dir.path(), 1 << 20);
  REQUIRE(spool.open());
  auto items = spool.pending("u");
  REQUIRE(items.size() == 4);
  Encoded out;
  CHECK(!spanprof_test::ok_or(load(spool, items[0], out), error));
  CHECK(contains(error, "truncated"));
  CHECK(!spanprof_test::ok_or(load(spool, items[1], out), error));
  CHECK(contains(error, "bad magic"));
  CHECK(!spanprof_test::ok_or(load(spool, items[2], out), error));
  CHECK(contains(error, "unsupported version 3"));
  const auto w_items = spool.pending("w");
  REQUIRE(w_items.size() == 1);
  CHECK(!spanprof_test::ok_or(load(spool, w_items[0], out), error));
  CHECK(contains(error, "another uploader"));
  CHECK(load(spool, items[3], out));
  CHECK(spool.counters().corrupt_removed == 4);
  CHECK(spool.pending("u").size() == 1);
  CHECK(spool.pending("w").empty());
  CHECK(count_with_suffix(dir.path(), ".spool") == 1);
  // Sequences resumed after the planted files too.
  REQUIRE(store(spool, "u", small_encoded("next")));
  CHECK(spool.pending("u").back().sequence == 16);
}

TEST_CASE("spool loads survive files replaced behind their back", "[spool]") {
  TempDir dir;
  Spool spool(dir.path(), 1 << 20);
  std::string error;
  REQUIRE(spool.open());
  REQUIRE(store(spool, "u", small_encoded("a")));
  REQUIRE(store(spool, "u", small_encoded("b")));
  REQUIRE(store(spool, "u", small_encoded("c")));
  const auto items = spool.pending("u");
  REQUIRE(items.size() == 3);
  const std::string a = dir.sub(items[0].file_name);
  const std::string b = dir.sub(items[1].file_name);
  const std::string c = dir.sub(items[2].file_name);

  // Deleted by someone else: reported, forgotten, not counted as corrupt.
  fs::remove(a);
  Encoded out;
  CHECK(!spanprof_test::ok_or(load(spool, items[0], out), error));
  CHECK(contains(error, "No such file"));
  // A symlink and a FIFO under spool names: never followed, never blocked on.
  fs::remove(b);
  REQUIRE(::symlink("/etc/passwd", b.c_str()) == 0);
  CHECK(!spanprof_test::ok_or(load(spool, items[1], out), error));
  CHECK(!fs::is_symlink(b));
  fs::remove(c);
  REQUIRE(::mkfifo(c.c_str(), 0600) == 0);
  CHECK(!spanprof_test::ok_or(load(spool, items[2], out), error));
  CHECK(contains(error, "not a regular file"));
  CHECK(!fs::exists(c));
  CHECK(spool.counters().corrupt_removed == 2);
  CHECK(spool.size() == 0);
  CHECK(spool.bytes() == 0);
}

// ---- spool: write failures -------------------------------------------------------------

TEST_CASE("spool reports directories it cannot use", "[spool]") {
  TempDir dir;
  std::string error;

  // Works for any user, root included: a path below a regular file.
  write_bytes(dir.sub("file"), "x");
  Spool below_file(dir.sub("file") + "/spool", 1 << 20);
  CHECK(!spanprof_test::ok_or(below_file.open(), error));
  CHECK(contains(error, "Not a directory"));
  CHECK(!below_file.is_open());
  CHECK(!spanprof_test::ok_or(store(below_file, "u", small_encoded("p")), error));
  CHECK(contains(error, "not open"));

  // Also for root: the directory removed while the spool is open.
  {
    Spool vanishing(dir.sub("vanishing"), 1 << 20);
    REQUIRE(vanishing.open());
    fs::remove_all(dir.sub("vanishing"));
    CHECK(!spanprof_test::ok_or(store(vanishing, "u", small_encoded("p")), error));
    CHECK(contains(error, "cannot create"));
    CHECK(vanishing.counters().stored == 0);
    CHECK(vanishing.bytes() == 0);
  }

  // Permissions stop only an unprivileged user; root passes chmod 0500 (it has
  // CAP_DAC_OVERRIDE), so there this part proves nothing and says so.
  Spool readonly(dir.sub("readonly"), 1 << 20);
  REQUIRE(readonly.open());
  REQUIRE(store(readonly, "u", small_encoded("before")));
  REQUIRE(::chmod(dir.sub("readonly").c_str(), 0500) == 0);
  if (::geteuid() != 0) {
    CHECK(!spanprof_test::ok_or(store(readonly, "u", small_encoded("after")), error));
    CHECK(contains(error, "Permission denied"));
    CHECK(names_in(dir.sub("readonly")).size() == 2);  // the lock and "before"; no temp file
    CHECK(span_names(readonly, "u") == std::vector<std::string>{"before"});
    Spool unopenable(dir.sub("readonly/sub"), 1 << 20);
    CHECK(!spanprof_test::ok_or(unopenable.open(), error));
    CHECK(contains(error, "Permission denied"));
  } else {
    WARN("running as root: chmod 0500 does not stop writes, EACCES is not exercised here");
  }
  ::chmod(dir.sub("readonly").c_str(), 0700);
}

TEST_CASE("a write that fails midway leaves nothing behind", "[spool]") {
  // RLIMIT_FSIZE makes write() fail with EFBIG once the file reaches the limit,
  // for root too: the same path a full disk takes (a short write, then an
  // error), without needing one. SIGXFSZ would kill the process, so it is
  // ignored for the duration.
  TempDir dir;
  Spool spool(dir.path(), 1 << 20);
  std::string error;
  REQUIRE(spool.open());
  REQUIRE(store(spool, "u", small_encoded("before")));

  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGXFSZ, &ignore, &previous) == 0);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  const bool stored = spanprof_test::ok_or(store(spool, "u", small_encoded("too big", 64 * 1024)), error);
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &previous, nullptr);

  CHECK(!stored);
  CHECK(contains(error, "cannot write"));
  CHECK(contains(error, "File too large"));
  CHECK(count_with_suffix(dir.path(), ".tmp") == 0);
  CHECK(count_with_suffix(dir.path(), ".spool") == 1);
  CHECK(spool.counters().stored == 1);
  CHECK(spool.bytes() == stored_size("u", small_encoded("before")));
  CHECK(span_names(spool, "u") == std::vector<std::string>{"before"});
  // And the spool still works afterwards.
  REQUIRE(store(spool, "u", small_encoded("after")));
  CHECK(span_names(spool, "u") == std::vector<std::string>{"before", "after"});
}

TEST_CASE("a full disk is reported and leaves nothing behind", "[spool]") {
  // A real ENOSPC needs a small file system: a 64 KiB tmpfs mounted in a private
  // mount namespace of one thread (unshare there affects that thread only, and
  // the mount dies with it). Without CAP_SYS_ADMIN this is skipped with a warning.
  TempDir dir;
  const std::string mount_point = dir.sub("tiny");
  REQUIRE(::mkdir(mount_point.c_str(), 0700) == 0);
  struct Outcome {
    std::string skipped;
    bool first_stored = false, second_stored = true;
    std::string error;
    std::size_t temp_files = 0, spool_files = 0, pending = 0;
  } outcome;
  std::thread([&] {
    try {
      if (::unshare(CLONE_NEWNS) != 0) {
        outcome.skipped = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
        return;
      }
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0) {
        outcome.skipped = std::string("mount tmpfs: ") + std::strerror(errno);
        return;
      }
      {
        Spool spool(mount_point, 1 << 20);
        const spanprof::Status opened = spool.open();
        if (opened) {
          std::mt19937_64 random(7);
          auto incompressible = [&] {
            std::string bytes(40 * 1024, '\0');
            for (char& c : bytes) c = static_cast<char>(random());
            return bytes;
          };
          outcome.first_stored = store(spool, "u", make_encoded(incompressible(), "first")).is_ok();
          outcome.second_stored = spanprof_test::ok_or(store(spool, "u", make_encoded(incompressible(), "second")), outcome.error);
          outcome.temp_files = count_with_suffix(mount_point, ".tmp");
          outcome.spool_files = count_with_suffix(mount_point, ".spool");
          outcome.pending = spool.pending("u").size();
        } else {
          outcome.error = opened.message();
        }
      }
      ::umount2(mount_point.c_str(), MNT_DETACH);
    } catch (const std::exception& e) {
      ::umount2(mount_point.c_str(), MNT_DETACH);
      outcome.skipped = std::string("exception: ") + e.what();
    }
  }).join();

  if (!outcome.skipped.empty()) {
    WARN("ENOSPC not exercised (needs CAP_SYS_ADMIN): " << outcome.skipped);
    return;
  }
  INFO(outcome.error);
  CHECK(outcome.first_stored);
  CHECK(!outcome.second_stored);
  CHECK(contains(outcome.error, "No space left on device"));
  CHECK(outcome.temp_files == 0);
  CHECK(outcome.spool_files == 1);
  CHECK(outcome.pending == 1);
}
