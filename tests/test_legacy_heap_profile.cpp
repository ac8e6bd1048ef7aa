// The gperftools text heap profile reader: what it keeps from a well-formed dump,
// which spellings it tolerates, and that every malformed, truncated or random input
// ends in a precise error rather than a crash or a half-filled result.
#include "support/catch.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/detail/capture/gperftools_heap_profile.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using spanprof::detail::LegacyHeapProfile;
using spanprof::detail::parse_legacy_heap_profile;

namespace {

using Values = std::vector<std::int64_t>;
using Frames = std::vector<std::uintptr_t>;

const std::string heap_maps =
    "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/fake-service\n"
    "7f0000000000-7f0000200000 r-xp 00028000 08:02 135522  /lib/x86_64-linux-gnu/libc.so.6\n";

const std::string heap_header = "heap profile:    3:   262144 [    10:  1048576] @ heapprofile\n";
const std::string heap_buckets =
    "     1:   131072 [     4:   524288] @ 0x00000000004005f0 0x0000000000400620 0x00007f0000001234\n"
    "     2:   131072 [     6:   524288] @ 0x4006f0\n";
const std::string heap_text = heap_header + heap_buckets + "MAPPED_LIBRARIES:\n" + heap_maps;

// What any accepted profile must look like, whatever the input was.
void check_well_formed(const LegacyHeapProfile& parsed) {
  for (const auto& sample : parsed.samples) {
    REQUIRE(sample.values.size() == 4);
    CHECK((sample.values[0] | sample.values[1] | sample.values[2] | sample.values[3]) > 0);
    CHECK_FALSE(sample.frames.empty());
    CHECK(sample.frames.size() <= spanprof::detail::legacy_heap_max_pcs);
  }
  CHECK(parsed.sample_period >= 0);
}

LegacyHeapProfile heap_parse(const std::string& text) {
  LegacyHeapProfile parsed;
  std::string error;
  const bool ok = spanprof_test::ok_or(parse_legacy_heap_profile(text, parsed), error);
  INFO(text);
  INFO(error);
  CHECK(ok);
  check_well_formed(parsed);
  return parsed;
}

// Rejects text, leaves nothing behind, and returns the error.
std::string heap_error(const std::string& text) {
  LegacyHeapProfile parsed;
  parsed.sample_period = 7;
  parsed.samples.push_back({{1, 2, 3, 4}, {0x1000}, spanprof::ThreadState::unknown, {}});
  parsed.maps_text = "stale";
  std::string error;
  const bool ok = spanprof_test::ok_or(parse_legacy_heap_profile(text, parsed), error);
  INFO(text);
  CHECK_FALSE(ok);
  CHECK(parsed.sample_period == 0);
  CHECK(parsed.samples.empty());
  CHECK(parsed.maps_text.empty());
  CHECK(error.rfind("legacy heap profile: line ", 0) == 0);
  return error;
}

void mentions(const std::string& error, const std::string& what) {
  INFO(error);
  INFO("expected to mention: " << what);
  CHECK(error.find(what) != std::string::npos);
}

std::string bucket_with_pcs(std::size_t n) {
  std::string line = "1: 16 [1: 16] @";
  for (std::size_t i = 0; i < n; ++i) line += " 0x" + std::to_string(400000 + i);
  return line + "\n";
}

}  // namespace

TEST_CASE("legacy heap profile keeps counts in pprof order, frames and maps", "[legacy_heap]") {
  const LegacyHeapProfile parsed = heap_parse(heap_text);
  CHECK(parsed.sample_period == 0);
  REQUIRE(parsed.samples.size() == 2);
  // Written in-use first; kept as {alloc_objects, alloc_bytes, inuse_objects, inuse_bytes}.
  CHECK(parsed.samples[0].values == Values{4, 524288, 1, 131072});
  CHECK(parsed.samples[0].frames == Frames{0x4005f0, 0x400620, 0x7f0000001234});
  CHECK(parsed.samples[1].values == Values{6, 524288, 2, 131072});
  CHECK(parsed.samples[1].frames == Frames{0x4006f0});
  CHECK(parsed.maps_text == heap_maps);

  // tcmalloc's sampled dumps carry the sampling period in the name.
  const LegacyHeapProfile v2 =
      heap_parse("heap profile: 3: 262144 [ 10: 1048576] @ heap_v2/524288\n" + heap_buckets);
  CHECK(v2.sample_period == 524288);
  CHECK(v2.samples.size() == 2);
  CHECK(v2.maps_text.empty());
  CHECK(heap_parse("heap profile: 0: 0 [0: 0] @ heap_v2/0\n").sample_period == 0);
  CHECK(heap_parse("heap profile: 0: 0 [0: 0] @ heap_v2/9223372036854775807\n").sample_period ==
        INT64_MAX);
  // Any other name is accepted and has no period.
  CHECK(heap_parse("heap profile: 0: 0 [0: 0] @ heap/524288\n").sample_period == 0);
  CHECK(heap_parse("heap profile: 0: 0 [0: 0] @ growthz\n").sample_period == 0);

  // An idle heap: header only, or header and empty maps.
  CHECK(heap_parse("heap profile: 0: 0 [0: 0] @ heapprofile\n").samples.empty());
  const LegacyHeapProfile idle = heap_parse("heap profile: 0: 0 [0: 0] @ heapprofile\nMAPPED_LIBRARIES:\n");
  CHECK(idle.samples.empty());
  CHECK(idle.maps_text.empty());

  // Everything after the MAPPED_LIBRARIES line is kept verbatim, even what would not parse.
  const std::string odd_maps = "not a bucket: x [y] @ z\n\n  \nheap profile:";
  CHECK(heap_parse(heap_header + "MAPPED_LIBRARIES:\n" + odd_maps).maps_text == odd_maps);
}

TEST_CASE("legacy heap profile tolerates the spellings writers use", "[legacy_heap]") {
  const Values first{4, 524288, 1, 131072};
  const Frames first_frames{0x4005f0, 0x400620};
  const std::vector<std::string> spellings = {
      "heap profile: 3: 262144 [10: 1048576] @ heapprofile\n1: 131072 [4: 524288] @ 0x4005f0 0x400620\n",
      "heap profile:3:262144[10:1048576]@heapprofile\n1:131072[4:524288]@0x4005f0 0x400620\n",
      "heap profile:\t3 :\t262144 [ 10 : 1048576 ] @\theapprofile\t\n"
      "\t1\t:131072\t[4:524288]\t@\t0x4005f0\t\t0x400620\t\n",
      "heap profile: 3: 262144 [10: 1048576] @ heapprofile\r\n1: 131072 [4: 524288] @ 0x4005f0 0x400620\r\n",
      "\n\n   \n\t\nheap profile: 3: 262144 [10: 1048576] @ heapprofile\n"
      "\n \n1: 131072 [4: 524288] @ 0x4005f0 0x400620\n\n",
      "   heap profile: 3: 262144 [10: 1048576] @ heapprofile   \n   1: 131072 [4: 524288] @ 0x4005F0 0X400620   ",
      "heap profile: 3: 262144 [10: 1048576] @ heapprofile\n"
      "0001: 000131072 [0004: 0524288] @ 0x00000000000000000000004005f0 0x0400620",
  };
  for (const auto& text : spellings) {
    const LegacyHeapProfile parsed = heap_parse(text);
    INFO(text);
    REQUIRE(parsed.samples.size() == 1);
    CHECK(parsed.samples[0].values == first);
    CHECK(parsed.samples[0].frames == first_frames);
    CHECK(parsed.maps_text.empty());
  }

  // The maps marker may be indented or end in CR; the maps start on the next line.
  CHECK(heap_parse(heap_header + heap_buckets + "  MAPPED_LIBRARIES:\r\n" + heap_maps).maps_text == heap_maps);
  CHECK(heap_parse(heap_header + heap_buckets + "MAPPED_LIBRARIES:").maps_text.empty());

  // Buckets with nothing in them are dropped, but only after they were checked.
  const LegacyHeapProfile zeros = heap_parse(heap_header + "0: 0 [0: 0] @ 0x1000\n" + heap_buckets);
  CHECK(zeros.samples.size() == 2);
  mentions(heap_error(heap_header + "0: 0 [0: 0] @ 0x10zz\n"), "line 2: bucket: pc '0x10zz' is not valid hex");
  // One nonzero count is enough to keep a bucket: a freed allocation has nothing in use.
  const LegacyHeapProfile freed = heap_parse(heap_header + "0: 0 [1: 64] @ 0x1000\n");
  REQUIRE(freed.samples.size() == 1);
  CHECK(freed.samples[0].values == Values{1, 64, 0, 0});

  // The extremes that still fit.
  const LegacyHeapProfile extremes =
      heap_parse(heap_header + "9223372036854775807: 0 [0: 9223372036854775807] @ 0x0 0xffffffffffffffff\n");
  REQUIRE(extremes.samples.size() == 1);
  CHECK(extremes.samples[0].values == Values{0, INT64_MAX, INT64_MAX, 0});
  if (sizeof(std::uintptr_t) == 8) {
    CHECK(extremes.samples[0].frames == Frames{0, static_cast<std::uintptr_t>(UINT64_MAX)});
  }

  // Exactly the cap on pcs is accepted.
  const LegacyHeapProfile deep = heap_parse(heap_header + bucket_with_pcs(4096));
  REQUIRE(deep.samples.size() == 1);
  CHECK(deep.samples[0].frames.size() == 4096);
  CHECK(deep.samples[0].frames.front() == 0x400000);  // bucket_with_pcs writes decimals as hex digits
  CHECK(deep.samples[0].frames.back() == 0x404095);
}

TEST_CASE("legacy heap profile rejects malformed input with the line", "[legacy_heap]") {
  // Header.
  mentions(heap_error(""), "line 1: missing header");
  mentions(heap_error("\n \n\t\n"), "line 3: missing header");
  mentions(heap_error("hello\n"), "line 1: bad header: expected 'heap profile:', found 'hello'");
  mentions(heap_error("\n\nMAPPED_LIBRARIES:\n"), "line 3: bad header: expected 'heap profile:'");
  mentions(heap_error(heap_buckets), "line 1: bad header");
  mentions(heap_error("heap profile: 3: 262144 [10: 1048576]\n"),
           "line 1: bad header: expected '@', found end of line");
  mentions(heap_error("heap profile: 3: 262144 [10: 1048576] @\n"), "line 1: bad header: no profile name");
  mentions(heap_error("heap profile: 3: 262144 [10: 1048576] @ heapprofile extra\n"),
           "line 1: bad header: unexpected 'extra' after the profile name");
  mentions(heap_error("heap profile: 3 262144 [10: 1048576] @ heapprofile\n"), "line 1: bad header: expected ':'");
  mentions(heap_error("heap profile: 3: 262144 10: 1048576] @ heapprofile\n"), "line 1: bad header: expected '['");
  mentions(heap_error("heap profile: 3: 262144 [10: 1048576 @ heapprofile\n"), "line 1: bad header: expected ']'");
  mentions(heap_error("heap profile: x: 262144 [10: 1048576] @ heapprofile\n"),
           "line 1: bad header: in-use objects 'x' is not a decimal number");
  mentions(heap_error("heap profile: 3: -262144 [10: 1048576] @ heapprofile\n"),
           "line 1: bad header: in-use bytes '-262144' is negative");
  mentions(heap_error("heap profile: 3: 262144 [9223372036854775808: 1048576] @ heapprofile\n"),
           "line 1: bad header: allocated objects '9223372036854775808' overflows int64");
  mentions(heap_error("heap profile: 3: 262144 [10: 1e6] @ heapprofile\n"),
           "line 1: bad header: allocated bytes '1e6' is not a decimal number");
  mentions(heap_error("heap profile: : 262144 [10: 1048576] @ heapprofile\n"),
           "line 1: bad header: in-use objects missing, found ': 262144");
  for (const char* name : {"heap_v2/", "heap_v2/abc", "heap_v2/-1", "heap_v2/+5", "heap_v2/9223372036854775808"}) {
    mentions(heap_error(std::string("heap profile: 0: 0 [0: 0] @ ") + name + "\n"),
             std::string("line 1: bad header: sampling period in '") + name + "' is not a byte count");
  }

  // Buckets: the line number counts blank lines too.
  const std::string head = heap_header + "\n";  // lines 1-2; the bucket under test is line 3
  mentions(heap_error(head + "1: 2 [3: 4] @\n"), "line 3: bucket: no pcs after '@'");
  mentions(heap_error(head + "1: 2 [3: 4] @   \t\r\n"), "line 3: bucket: no pcs");
  mentions(heap_error(head + "1: 2 [3: 4]\n"), "line 3: bucket: expected '@'");
  mentions(heap_error(head + "1 2 [3: 4] @ 0x1\n"), "line 3: bucket: expected ':', found '2 [3: 4] @ 0x1'");
  mentions(heap_error(head + "1: 2 [3: 4 @ 0x1\n"), "line 3: bucket: expected ']'");
  mentions(heap_error(head + "1: 2 [3 4] @ 0x1\n"), "line 3: bucket: expected ':'");
  mentions(heap_error(head + "one: 2 [3: 4] @ 0x1\n"),
           "line 3: bucket: in-use objects 'one' is not a decimal number");
  mentions(heap_error(head + "1: 2x [3: 4] @ 0x1\n"), "line 3: bucket: in-use bytes '2x' is not a decimal number");
  mentions(heap_error(head + "1: +2 [3: 4] @ 0x1\n"), "line 3: bucket: in-use bytes '+2' is not a decimal number");
  mentions(heap_error(head + "1: 2 [-3: 4] @ 0x1\n"), "line 3: bucket: allocated objects '-3' is negative");
  mentions(heap_error(head + "1: 2 [3: 0x4] @ 0x1\n"),
           "line 3: bucket: allocated bytes '0x4' is not a decimal number");
  mentions(heap_error(head + "1: 2 [3: 99999999999999999999999] @ 0x1\n"),
           "line 3: bucket: allocated bytes '99999999999999999999999' overflows int64");
  mentions(heap_error(head + "1: 2 [3: 4] @ 4005f0\n"),
           "line 3: bucket: expected a 0x-prefixed pc, found '4005f0'");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x\n"), "line 3: bucket: pc '0x' is not valid hex");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x40g5f0\n"), "line 3: bucket: pc '0x40g5f0' is not valid hex");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x-1\n"), "line 3: bucket: pc '0x-1' is not valid hex");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x1,0x2\n"), "line 3: bucket: pc '0x1,0x2' is not valid hex");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x10000000000000000\n"),
           "line 3: bucket: pc '0x10000000000000000' overflows 64 bits");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x1 0x2 junk\n"), "line 3: bucket: unexpected 'junk' after the pcs");
  mentions(heap_error(head + "1: 2 [3: 4] @ 0x1 ]\n"), "line 3: bucket: unexpected ']' after the pcs");
  mentions(heap_error(head + bucket_with_pcs(4097)), "line 3: bucket: more than 4096 pcs");
  mentions(heap_error(head + bucket_with_pcs(100000)), "line 3: bucket: more than 4096 pcs");
  // A second header is not a bucket, nor is a marker without its colon; one bad line
  // after good ones fails the whole parse.
  mentions(heap_error(heap_header + heap_buckets + heap_header), "line 4: bucket: in-use objects 'heap' is not");
  mentions(heap_error(heap_header + heap_buckets + "MAPPED_LIBRARIES\n"), "line 4: bucket: in-use objects");

  // Hostile bytes are shown shortened and printable.
  const std::string error = heap_error(head + "1: 2 [3: 4] @ 0x1 \x01\x7f\xff" + std::string(100, 'A') + "\n");
  mentions(error, "unexpected '???" + std::string(29, 'A') + "...' after the pcs");
  CHECK(error.size() < 150);
}

TEST_CASE("legacy heap profile survives truncation at every byte", "[legacy_heap]") {
  const std::size_t name_start = heap_text.find("heapprofile");
  const std::size_t first_bucket = heap_header.size();
  const std::size_t second_bucket = first_bucket + heap_buckets.find('\n') + 1;
  const std::size_t marker = heap_header.size() + heap_buckets.size();
  const std::size_t maps_start = marker + std::string("MAPPED_LIBRARIES:\n").size();

  LegacyHeapProfile parsed;
  std::string error;
  std::size_t accepted = 0;
  for (std::size_t n = 0; n <= heap_text.size(); ++n) {
    const std::string_view prefix = std::string_view(heap_text).substr(0, n);
    INFO("prefix of " << n << " bytes");
    error.clear();
    const bool ok = spanprof_test::ok_or(parse_legacy_heap_profile(prefix, parsed), error);
    if (!ok) {
      CHECK(error.rfind("legacy heap profile: line ", 0) == 0);
      CHECK(parsed.samples.empty());
      // Once the whole "MAPPED_LIBRARIES:" is in, nothing after it can fail.
      CHECK(n < maps_start - 1);
      continue;
    }
    ++accepted;
    check_well_formed(parsed);
    // A header cut inside its name still names a profile; before that, nothing parses.
    CHECK(n > name_start);
    CHECK(parsed.samples.size() <= 2);
    if (n == first_bucket) CHECK(parsed.samples.empty());
    if (n == second_bucket) CHECK(parsed.samples.size() == 1);
    if (n >= marker) {
      REQUIRE(parsed.samples.size() == 2);
      CHECK(parsed.samples[1].frames == Frames{0x4006f0});
      CHECK(parsed.maps_text == (n > maps_start ? heap_text.substr(maps_start, n - maps_start) : ""));
    }
  }
  // Line ends and every byte of the maps are among the accepted prefixes.
  CHECK(accepted > heap_text.size() - maps_start);
}

TEST_CASE("legacy heap profile survives random bytes and mutations", "[legacy_heap]") {
  std::mt19937_64 rng(20240611);
  LegacyHeapProfile parsed;
  std::string error;

  // Raw noise almost never starts with the header; it must fail cleanly.
  for (int i = 0; i < 3000; ++i) {
    std::string noise(rng() % 600, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    if (noise.rfind("heap profile:", 0) == 0) continue;
    error.clear();
    CHECK_FALSE(spanprof_test::ok_or(parse_legacy_heap_profile(noise, parsed), error));
    CHECK(error.rfind("legacy heap profile: line ", 0) == 0);
    CHECK(parsed.samples.empty());
  }

  // Noise made of the format's own characters, after a good header, reaches every
  // branch of the bucket reader; and single-byte changes anywhere in a good profile.
  const std::string alphabet = " \t\r\n:[]@0x19afAFgz-+";
  int parsed_ok = 0;
  int rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    if (i % 2 == 0) {
      text = heap_header;
      const std::size_t length = rng() % 200;
      for (std::size_t k = 0; k < length; ++k) text += alphabet[rng() % alphabet.size()];
    } else {
      text = heap_text;
      text[rng() % (heap_header.size() + heap_buckets.size())] = alphabet[rng() % alphabet.size()];
      if (rng() % 4 == 0) text[rng() % text.size()] = static_cast<char>(rng());
    }
    error.clear();
    if (spanprof_test::ok_or(parse_legacy_heap_profile(text, parsed), error)) {
      ++parsed_ok;
      check_well_formed(parsed);
    } else {
      ++rejected;
      CHECK(error.rfind("legacy heap profile: line ", 0) == 0);
      CHECK(parsed.samples.empty());
      CHECK(parsed.maps_text.empty());
    }
  }
  // Both outcomes occur, so the loop tested something.
  CHECK(parsed_ok > 100);
  CHECK(rejected > 100);
}

TEST_CASE("legacy heap profile reads a large dump in one pass", "[legacy_heap]") {
  std::string text = heap_header;
  const int buckets = 50000;
  for (int i = 0; i < buckets; ++i) {
    text += "1: 32 [2: 64] @ 0x" + std::to_string(100000 + i) + " 0x400620 0x7f0000001234\n";
  }
  text += "MAPPED_LIBRARIES:\n" + heap_maps;
  const LegacyHeapProfile parsed = heap_parse(text);
  REQUIRE(parsed.samples.size() == static_cast<std::size_t>(buckets));
  CHECK(parsed.samples.front().frames.front() == 0x100000);
  CHECK(parsed.samples.back().frames.front() == 0x149999);
  CHECK(parsed.samples.back().values == Values{2, 64, 1, 32});
  CHECK(parsed.maps_text == heap_maps);
}
