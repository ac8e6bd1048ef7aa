// Reader for the text gperftools' GetHeapProfile() returns (heap-profiler.h, classic
// heap mode), so a heap dump can be turned into pprof like a CPU profile:
//
//   heap profile:    3:   262144 [    10:  1048576] @ heapprofile
//        1:   131072 [     4:   524288] @ 0x00000000004005f0 0x0000000000400620
//   MAPPED_LIBRARIES:
//   ...text of /proc/self/maps...
//
// Counts read "in-use objects: bytes [allocated objects: bytes]": totals in the header,
// one stack's in each bucket, whose pcs are return addresses, innermost first. Sampled
// dumps are named "heap_v2/<bytes per sample>". Writers pad differently, so any run of
// blanks separates tokens. The text may be truncated or not a heap profile at all, so
// every token is checked and each rejection names what was wrong and its 1-based line.
#ifndef SPANPROF_DETAIL_CAPTURE_GPERFTOOLS_HEAP_PROFILE_HPP_
#define SPANPROF_DETAIL_CAPTURE_GPERFTOOLS_HEAP_PROFILE_HPP_

#include <spanprof/base/status.hpp>
#include <spanprof/config.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/profile/profile.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct LegacyHeapProfile {
  std::int64_t sample_period = 0;  // N from "heap_v2/N"; 0 when the header names none
  // values = {alloc_objects, alloc_bytes, inuse_objects, inuse_bytes}, pprof's order;
  // frames as written. Buckets with all four counts zero are dropped.
  std::vector<RawSample> samples;
  std::string maps_text;
};

// gperftools keeps a few dozen frames per bucket; far beyond that is not its output.
inline constexpr std::size_t legacy_heap_max_pcs = 4096;

class LegacyHeapProfileParser {
 public:
  LegacyHeapProfileParser(std::string_view text, LegacyHeapProfile& out, std::string& error) noexcept
      : text_(text), out_(out), error_(error) {}

  bool parse() {
    out_ = LegacyHeapProfile{};
    if (!next_line()) return fail("missing header: the input has no 'heap profile:' line");
    if (!parse_header()) return false;
    while (next_line()) {
      if (line_.substr(i_, 17) == "MAPPED_LIBRARIES:") {
        out_.maps_text.assign(text_.data() + pos_, text_.size() - pos_);
        return true;
      }
      if (!parse_bucket()) return false;
    }
    // A dump cut off before its maps still holds every bucket it got to: keep them.
    return true;
  }

 private:
  bool parse_header() {
    where_ = "bad header: ";
    constexpr std::string_view prefix = "heap profile:";
    if (line_.substr(i_, prefix.size()) != prefix) return fail("expected 'heap profile:', found " + rest());
    i_ += prefix.size();
    std::int64_t counts[4];
    if (!parse_counts(counts)) return false;
    const std::string_view name = token();
    if (name.empty()) return fail("no profile name after '@'");
    const std::string_view extra = token();
    if (!extra.empty()) return fail("unexpected " + quote(extra) + " after the profile name");
    constexpr std::string_view v2 = "heap_v2/";
    if (name.substr(0, v2.size()) != v2) return true;
    std::int64_t& period = out_.sample_period;
    if (to_number(name.substr(v2.size()), period) == std::errc{} && period >= 0) return true;
    return fail("sampling period in " + quote(name) + " is not a byte count");
  }

  bool parse_bucket() {
    where_ = "bucket: ";
    std::int64_t counts[4];
    if (!parse_counts(counts)) return false;
    RawSample sample;
    for (std::string_view tok = token(); !tok.empty(); tok = token()) {
      if (tok.size() < 2 || tok[0] != '0' || (tok[1] != 'x' && tok[1] != 'X')) {
        return fail(sample.frames.empty() ? "expected a 0x-prefixed pc, found " + quote(tok)
                                          : "unexpected " + quote(tok) + " after the pcs");
      }
      if (sample.frames.size() == legacy_heap_max_pcs) return fail("more than 4096 pcs");
      std::uint64_t pc = 0;
      const std::errc ec = to_number(tok.substr(2), pc, 16);
      if (ec == std::errc::result_out_of_range) return fail("pc " + quote(tok) + " overflows 64 bits");
      if (ec != std::errc{}) return fail("pc " + quote(tok) + " is not valid hex");
      if (pc > UINTPTR_MAX) return fail("pc " + quote(tok) + " does not fit an address on this machine");
      sample.frames.push_back(static_cast<std::uintptr_t>(pc));
    }
    if (sample.frames.empty()) return fail("no pcs after '@'");
    // Nothing in use and nothing allocated: the bucket adds nothing to either view.
    if ((counts[0] | counts[1] | counts[2] | counts[3]) == 0) return true;
    sample.values = {counts[2], counts[3], counts[0], counts[1]};
    out_.samples.push_back(std::move(sample));
    return true;
  }

  // "a: b [c: d] @", leaving i_ just past the '@'.
  bool parse_counts(std::int64_t (&counts)[4]) {
    return count(0, counts[0]) && expect(':') && count(1, counts[1]) && expect('[') && count(2, counts[2]) &&
           expect(':') && count(3, counts[3]) && expect(']') && expect('@');
  }

  bool count(int k, std::int64_t& value) {
    static const char* const names[4] = {"in-use objects", "in-use bytes", "allocated objects", "allocated bytes"};
    const std::string_view text = token(true);
    if (text.empty()) return fail(std::string(names[k]) + " missing, found " + rest());
    const std::errc ec = to_number(text, value);
    const std::string what = std::string(names[k]) + " " + quote(text);
    if (ec == std::errc::result_out_of_range) return fail(what + " overflows int64");
    if (ec != std::errc{}) return fail(what + " is not a decimal number");
    return value >= 0 || fail(what + " is negative");
  }

  bool expect(char c) {
    skip_blanks();
    if (i_ == line_.size() || line_[i_] != c) return fail(std::string("expected '") + c + "', found " + rest());
    ++i_;
    return true;
  }

  // All of text, or invalid_argument: from_chars alone would stop at "12abc"'s 'a'.
  // It takes no '+', no blanks, no locale, and '-' only into a signed value.
  template <typename T>
  static std::errc to_number(std::string_view text, T& value, int base = 10) noexcept {
    const char* const last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(text.data(), last, value, base);
    return ec == std::errc{} && end != last ? std::errc::invalid_argument : ec;
  }

  static bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r'; }
  static bool is_punct(char c) noexcept { return c == ':' || c == '[' || c == ']' || c == '@'; }

  // Moves to the next line that is not blank, with i_ at its first token.
  bool next_line() noexcept {
    while (pos_ < text_.size()) {
      std::size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      line_ = text_.substr(pos_, end - pos_);
      pos_ = end == text_.size() ? end : end + 1;
      ++line_no_;
      i_ = 0;
      skip_blanks();
      if (i_ < line_.size()) return true;
    }
    return false;
  }

  void skip_blanks() noexcept {
    while (i_ < line_.size() && is_blank(line_[i_])) ++i_;
  }

  // Counts may touch their ':' '[' ']' '@'; pcs and names end only at blanks.
  std::string_view token(bool in_counts = false) noexcept {
    skip_blanks();
    const std::size_t start = i_;
    while (i_ < line_.size() && !is_blank(line_[i_]) && !(in_counts && is_punct(line_[i_]))) ++i_;
    return line_.substr(start, i_ - start);
  }

  std::string rest() const { return i_ < line_.size() ? quote(line_.substr(i_)) : "end of line"; }

  // Input is untrusted and errors end up in logs: show a short, printable excerpt.
  static std::string quote(std::string_view text) { return "'" + printable_excerpt(text, 32) + "'"; }

  bool fail(const std::string& message) {
    const std::size_t line = line_no_ == 0 ? 1 : line_no_;  // empty input fails "on" line 1
    error_ = "legacy heap profile: line " + std::to_string(line) + ": " + where_ + message;
    out_ = LegacyHeapProfile{};
    return false;
  }

  std::string_view text_;
  LegacyHeapProfile& out_;
  std::string& error_;
  std::string_view line_;
  std::size_t pos_ = 0;      // start of the next line in text_
  std::size_t i_ = 0;        // read position in line_
  std::size_t line_no_ = 0;  // 1-based number of line_
  const char* where_ = "";   // the kind of line being read, for errors
};

// Throws nothing but std::bad_alloc; any other input yields a failure
// (profiler_failed) that names the line and what is wrong with it.
inline Status parse_legacy_heap_profile(std::string_view text, LegacyHeapProfile& out) {
  std::string error;
  if (LegacyHeapProfileParser(text, out, error).parse()) return Status::ok();
  return Status(ErrorCode::profiler_failed, error);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_GPERFTOOLS_HEAP_PROFILE_HPP_
