// spanprof-report (tools/report, docs/report.md): what it reads, what it skips, and
// the page as a user sees it, rendered by a real browser (Debian's chromium,
// headless): every span listed, and the function that made two slow spans slow
// named as their top difference against the typical span of their name.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/command.hpp"
#include "support/test_helpers.hpp"

#include "profile_reader.hpp"

#include <spanprof/detail/delivery/spool_format.hpp>
#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/detail/profile/protobuf_writer.hpp>
#include <spanprof/spanprof.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

// The handler's code, outside any anonymous namespace so its names read as a
// user's would: every request counts stock; two of them also recompute prices.
namespace inventory {
SPANPROF_TEST_HOT_FUNCTION(count_stock)
constexpr int recompute_prices_line = __LINE__ + 1;  // the line every instruction of the next one is on
SPANPROF_TEST_HOT_FUNCTION(recompute_prices_slowly)

// One request restocks the shelf, holding its lock 40 ms; another takes stock meanwhile.
std::atomic<int> stock_moves{0};
constexpr int take_stock_line = __LINE__ + 3;  // where take_stock waits
__attribute__((noinline)) void take_stock(std::mutex& shelf) {
  {
    std::lock_guard<std::mutex> held(shelf);
    stock_moves.fetch_add(1);
  }
  stock_moves.fetch_add(1);
}
constexpr int restock_all_line = __LINE__ + 7;  // where restock_all lets go
__attribute__((noinline)) void restock_all(std::mutex& shelf, std::atomic<bool>& holding,
                                          std::chrono::steady_clock::time_point& released) {
  std::unique_lock<std::mutex> held(shelf);
  holding = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  released = std::chrono::steady_clock::now();
  held.unlock();
  stock_moves.fetch_add(1);
}
// And one writes the ledger, a FILE another thread holds locked: stdio's own lock.
__attribute__((noinline)) int write_ledger(std::FILE* ledger) {
  const int written = std::fputs("restocked\n", ledger);
  stock_moves.fetch_add(1);  // not a tail call: this frame stays on the stack
  return written;
}
}  // namespace inventory

// The suite in its own namespace, not an anonymous one: the suites are compiled in
// unity batches, where two files' anonymous helpers of one name would clash.
namespace report_test {

using spanprof_test::capture_command;
using spanprof_test::contains;
using spanprof_test::TempDir;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string report_command(const std::string& args) { return std::string(SPANPROF_REPORT_TOOL) + " " + args; }

// A span's profile as spanprof writes it: `stacks` are function names outermost
// first, each sampled once at a 10 ms period.
spanprof::Profile profile_of(const std::vector<spanprof::SpanRecord>& spans,
                             const std::vector<std::pair<std::uint32_t, std::vector<std::string>>>& stacks) {
  spanprof::Profile profile;
  profile.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
  profile.period_type = {"cpu", "nanoseconds"};
  profile.period = 10'000'000;
  profile.time_nanos = spans.front().start_unix_ns;
  profile.duration_nanos = spans.front().duration_ns;
  profile.spans = spans;
  for (const auto& [span, frames] : stacks) {
    spanprof::Sample sample;
    sample.span = span;
    sample.values = {1, 10'000'000};
    for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame) {
      std::uint64_t function_id = 0;
      for (const auto& function : profile.functions)
        if (function.name == *frame) function_id = function.id;
      if (function_id == 0) {
        function_id = profile.functions.size() + 1;
        profile.functions.push_back({function_id, *frame, *frame, ""});
      }
      profile.locations.push_back({profile.locations.size() + 1, 0, 0x1000 + profile.locations.size(), function_id});
      sample.location_ids.push_back(profile.locations.back().id);
    }
    profile.samples.push_back(sample);
  }
  return profile;
}

spanprof::SpanRecord record(unsigned n, std::string name) {
  spanprof::SpanRecord span;
  span.span = spanprof_test::span_number(n);
  span.span_name = std::move(name);
  span.start_unix_ns = 1'700'000'000'000'000'000 + n * 1'000'000LL;
  span.duration_ns = 25'000'000;
  return span;
}

std::string pprof_gzip(const spanprof::Profile& profile) {
  std::string bytes;
  REQUIRE(spanprof::encode_pprof_gzip(profile, bytes));
  return bytes;
}

// The `<tr data-span="id" ...>...</tr>` row of the rendered table, or "".
std::string table_row(const std::string& dom, const std::string& span_id) {
  const std::size_t start = dom.find("<tr data-span=\"" + span_id + "\"");
  if (start == std::string::npos) return {};
  return dom.substr(start, dom.find("</tr>", start) - start);
}

// The first row of the rendered "top differences" list.
std::string first_top_difference(const std::string& dom) {
  const std::size_t table = dom.find("id=\"top-differences\"");
  if (table == std::string::npos) return {};
  const std::size_t body = dom.find("<tbody>", table);
  return body == std::string::npos ? std::string() : dom.substr(body, dom.find("</tr>", body) - body);
}

// Headless chromium's DOM of `url` after the page's script ran, with every
// connection sent to a closed port: a page that needed the network would fail.
struct Browser {
  std::string binary;
  std::string profile_dir;

  std::string dump_dom(const std::string& url) const {
    // In braces: capture_command() sends stderr to the output, and only the DOM should go there.
    const std::string command = "{ timeout 120 " + binary + " --headless --disable-gpu --no-first-run" +
                                (::geteuid() == 0 ? " --no-sandbox" : "") + " --user-data-dir=" + profile_dir +
                                " --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' --dump-dom '" + url +
                                "' 2>" + log() + "; }";
    return capture_command(command).output;
  }
  // Where chromium's own messages go: read when a page did not render.
  std::string log() const { return profile_dir + ".log"; }
};

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    const auto found = capture_command(std::string("command -v ") + name);
    if (found.exit_code == 0 && !found.output.empty()) return name;
  }
  return {};
}

// The page is the same in every build and each chromium start costs seconds: the
// browser test runs in the plain builds, hidden under the sanitizers.
#if defined(SPANPROF_TESTS_UNDER_TSAN) || defined(__SANITIZE_ADDRESS__)
#define SPANPROF_TEST_BROWSER "[.browser]"
#else
#define SPANPROF_TEST_BROWSER "[browser]"
#endif

TEST_CASE("the reader groups a batch's samples by span and keeps each span's labels") {
  auto slow = record(1, "GET /inventory");
  slow.reason = spanprof::ProfileReason::slow;
  const auto other = record(2, "POST /order");
  const std::string bytes = pprof_gzip(profile_of(
      {slow, other}, {{1, {"main", "handle", "count_stock"}}, {1, {"main", "handle", "count_stock"}}, {2, {"main", "order"}}}));

  spanprof_report::Collection collection;
  std::string why;
  REQUIRE(spanprof_report::read_profile_file(bytes, collection, why));
  REQUIRE(collection.spans.size() == 2);
  const auto& first = collection.spans[0];
  CHECK(first.span_id == slow.span.span_id.to_hex());
  CHECK(first.trace_id == slow.span.trace_id.to_hex());
  CHECK(first.name == "GET /inventory");
  CHECK(first.reason == "slow");
  const auto cpu = static_cast<std::size_t>(spanprof::ProfileKind::cpu);
  CHECK(first.samples[cpu] == 2);
  REQUIRE(first.values[cpu].size() == 1);  // both samples on one stack
  const auto [leaf, value] = *first.values[cpu].begin();
  CHECK(value == 20'000'000);
  CHECK(collection.functions[collection.nodes[leaf].second] == "count_stock");
  // A batch does not say when each of its spans ran.
  CHECK(first.start_unix_ns == 0);
  CHECK(collection.spans[1].name == "POST /order");

  // The same span's profile alone gives its start and duration.
  const std::string alone = pprof_gzip(profile_of({other}, {{1, {"main", "order"}}}));
  REQUIRE(spanprof_report::read_profile_file(alone, collection, why));
  CHECK(collection.spans.size() == 2);
  CHECK(collection.spans[1].start_unix_ns == other.start_unix_ns);
  CHECK(collection.spans[1].duration_ns == other.duration_ns);
  CHECK(collection.spans[1].samples[cpu] == 2);
}

// The process's continuous profile: samples in spans carry their span's labels,
// the rest none. The report shows the window as the whole process, its spans'
// parts, and what ran outside any span.
TEST_CASE("the reader shows a continuous window as the process, its spans and what ran outside them") {
  auto span = record(3, "GET /orders");
  span.reason = spanprof::ProfileReason::continuous;
  spanprof::Profile profile = profile_of(
      {span}, {{1, {"main", "serve", "handle_order"}}, {0, {"main", "refresh_cache"}}, {0, {"main", "refresh_cache"}}});
  profile.time_nanos = 1'700'000'010'000'000'000;
  profile.duration_nanos = 10'000'000'000;
  profile.comments = {"spanprof 0.2.0"};  // as spanprof writes every profile
  spanprof_report::Collection collection;
  std::string why;
  REQUIRE(spanprof_report::read_profile_file(pprof_gzip(profile), collection, why));
  const auto cpu = static_cast<std::size_t>(spanprof::ProfileKind::cpu);
  const auto find = [&](const std::string& name) -> const spanprof_report::SpanSamples* {
    for (const auto& s : collection.spans)
      if (s.name == name) return &s;
    return nullptr;
  };
  const auto* process = find("(the whole process)");
  const auto* outside = find("(outside any span)");
  const auto* request = find("GET /orders");
  REQUIRE(process != nullptr);
  REQUIRE(outside != nullptr);
  REQUIRE(request != nullptr);
  CHECK(process->samples[cpu] == 3);
  CHECK(outside->samples[cpu] == 2);
  CHECK(request->samples[cpu] == 1);
  CHECK(request->span_id == span.span.span_id.to_hex());
  CHECK(process->start_unix_ns == profile.time_nanos);
  CHECK(process->duration_ns == profile.duration_nanos);
  CHECK(request->start_unix_ns == 0);  // a window does not say when each span ran
}

TEST_CASE("the reader takes a spool file's pprof payload and its span's timing") {
  spanprof::EncodedProfile spooled;
  spooled.record = record(3, "GET /inventory");
  spooled.sample_count = 1;
  std::string payload = pprof_gzip(profile_of({spooled.record}, {{1, {"main", "count_stock"}}}));
  const std::string file = spanprof::detail::spool_format::encode("file", spooled, payload);

  spanprof_report::Collection collection;
  std::string why;
  REQUIRE(spanprof_report::read_profile_file(file, collection, why));
  REQUIRE(collection.spans.size() == 1);
  CHECK(collection.spans[0].start_unix_ns == spooled.record.start_unix_ns);
  CHECK(collection.spans[0].duration_ns == spooled.record.duration_ns);

  // A Pyroscope push request (PushRequest.series.samples.raw_profile) holds one.
  spooled.record = record(4, "GET /inventory");
  payload = pprof_gzip(profile_of({spooled.record}, {{1, {"main", "count_stock"}}}));
  std::string push;
  spanprof::detail::ProtobufWriter writer(push);
  writer.message_field(1, [&](spanprof::detail::ProtobufWriter& series) {
    series.message_field(2, [&](spanprof::detail::ProtobufWriter& sample) { sample.bytes_field(1, payload); });
  });
  REQUIRE(spanprof_report::read_profile_file(spanprof::detail::spool_format::encode("pyroscope", spooled, push),
                                             collection, why));
  CHECK(collection.spans.size() == 2);
  CHECK(collection.spans[1].span_id == spooled.record.span.span_id.to_hex());

  // An OTLP uploader's spool file holds no pprof: refused, and said so.
  const std::string otlp = spanprof::detail::spool_format::encode("otlp", spooled, "\x0a\x03otl");
  CHECK_FALSE(spanprof_report::read_profile_file(otlp, collection, why));
  CHECK(contains(why, "otlp"));
  CHECK(collection.spans.size() == 2);
}

TEST_CASE("spanprof-report skips malformed, truncated and foreign files with one line each") {
  TempDir dir("spanprof-report");
  const std::string good = pprof_gzip(profile_of({record(4, "GET /inventory")}, {{1, {"main", "count_stock"}}}));
  write_file(dir.sub("good.pb.gz"), good);
  spanprof::Profile foreign = profile_of({record(5, "x")}, {{0, {"main", "work"}}});  // no span labels
  foreign.spans.clear();
  const std::vector<std::string> bad = {"truncated.pb.gz", "notes.txt", "empty.pb.gz", "foreign.pb.gz", "text.gz",
                                        "plain-garbage.pb", "cut.spool", "loop"};
  write_file(dir.sub("truncated.pb.gz"), good.substr(0, good.size() / 2));
  write_file(dir.sub("notes.txt"), "these are not profiles\n");
  write_file(dir.sub("empty.pb.gz"), "");
  write_file(dir.sub("foreign.pb.gz"), pprof_gzip(foreign));
  std::string gzipped_text, error;
  REQUIRE(spanprof::detail::gzip_compress("hello, world", gzipped_text));
  write_file(dir.sub("text.gz"), gzipped_text);
  write_file(dir.sub("plain-garbage.pb"), spanprof_test::binary_body(3000));
  spanprof::EncodedProfile spooled;
  spooled.record = record(6, "GET /inventory");
  const std::string spool_file = spanprof::detail::spool_format::encode("file", spooled, good);
  write_file(dir.sub("cut.spool"), spool_file.substr(0, spool_file.size() - 9));
  write_file(dir.sub(".hidden.tmp"), "a writer's temporary file: passed over in silence");
  REQUIRE(::symlink(dir.path().c_str(), dir.sub("loop").c_str()) == 0);  // read, it would never end

  const auto run = capture_command(report_command(dir.path() + " -o " + dir.sub("report.html")));
  INFO(run.output);
  CHECK(run.exit_code == 0);
  for (const std::string& name : bad) {
    const std::string line = "skipped " + dir.sub(name) + ": ";
    CHECK(contains(run.output, line));
    CHECK(run.output.find(line) == run.output.rfind(line));
  }
  CHECK_FALSE(contains(run.output, ".hidden.tmp"));
  CHECK(contains(run.output, "1 spans from 1 files (8 skipped)"));
  CHECK(contains(spanprof_test::read_file(dir.sub("report.html")), record(4, "").span.span_id.to_hex()));

  // Nothing readable: no page, status 1. A usage error: status 2.
  ::unlink(dir.sub("good.pb.gz").c_str());
  ::unlink(dir.sub("report.html").c_str());
  const auto nothing = capture_command(report_command(dir.path() + " -o " + dir.sub("report.html")));
  CHECK(nothing.exit_code == 1);
  CHECK(contains(nothing.output, "no span found"));
  CHECK(::access(dir.sub("report.html").c_str(), F_OK) != 0);
  CHECK(capture_command(report_command("")).exit_code == 2);
  CHECK(capture_command(report_command(dir.path() + " --colour")).exit_code == 2);
}

TEST_CASE("a browser shows the slow function as the top difference of the two slow spans", SPANPROF_TEST_BROWSER) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    WARN("chromium not found (apt-get install chromium): the browser test is skipped");
    return;
  }
  TempDir dir("spanprof-report");
  std::vector<spanprof::SpanContext> normal, slow;
  {
    auto options = spanprof::Options();
    options.frequency_hz = 500;
    // Every span needs its samples (the diff compares them one by one), on the
    // default source too (test_outage.cpp).
    options.uploaders.push_back(std::make_shared<spanprof::FileUploader>(dir.sub("profiles")));
    spanprof_test::Collector collector(options);
    for (unsigned i = 0; i < 12; ++i) {
      const auto span = spanprof_test::span_number(7000 + i);
      (i % 6 == 5 ? slow : normal).push_back(span);
      spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /inventory"});
      inventory::count_stock(0.02);
      if (i % 6 == 5) inventory::recompute_prices_slowly(0.06);
    }
    REQUIRE(collector.profiles().size() == 12);
  }
  const std::string page = dir.sub("report.html");
  const auto run = capture_command(report_command(dir.sub("profiles") + " -o " + page));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  // Nothing on the page refers to the network: no URL at all.
  CHECK_FALSE(contains(spanprof_test::read_file(page), "://"));

  const Browser browser{chromium, dir.sub("chromium")};
  const std::string dom = browser.dump_dom("file://" + page);
  INFO("chromium said: " << spanprof_test::read_file(browser.log()).substr(0, 2000));
  REQUIRE(contains(dom, "id=\"spans\""));
  for (const auto& span : normal) CHECK_FALSE(table_row(dom, span.span_id.to_hex()).empty());
  for (const auto& span : slow) {
    const std::string row = table_row(dom, span.span_id.to_hex());
    INFO(row);
    CHECK(contains(row, "class=\"top-diff mono\" data-function=\"inventory::recompute_prices_slowly(double)\""));
  }
  // The span's own view, opened by its link: the list beside the diff starts with it.
  const std::string detail = browser.dump_dom("file://" + page + "#span=" + slow[0].span_id.to_hex());
  INFO(first_top_difference(detail));
  CHECK(contains(first_top_difference(detail), "data-function=\"inventory::recompute_prices_slowly(double)\""));
#if SPANPROF_WITH_LIBDW
  // With source lines: the slow function's line is the span's hottest, and a
  // frame's tooltip gives its function's file.
  const std::string hot_line = "tests/test_report.cpp:" + std::to_string(inventory::recompute_prices_line);
  const std::size_t hot_lines = detail.find("id=\"hot-lines\"");
  REQUIRE(hot_lines != std::string::npos);
  const std::size_t first_row = detail.find("<tbody>", hot_lines);
  INFO(detail.substr(hot_lines, 600));
  CHECK(detail.substr(first_row, detail.find("</tr>", first_row) - first_row).find(hot_line) != std::string::npos);
  // (The file as the build named it: absolute from CMake, relative to the build directory from Meson.)
  const std::size_t title = detail.find("title=\"inventory::recompute_prices_slowly(double)\n");
  REQUIRE(title != std::string::npos);
  CHECK(contains(detail.substr(title, detail.find('"', title + 7) - title), "tests/test_report.cpp:"));
#endif
}

// Options::time_split: the table's bar and the span's own view say where its time went.
TEST_CASE("a browser shows each span's time split: running, waiting for a CPU, blocked", SPANPROF_TEST_BROWSER) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    WARN("chromium not found (apt-get install chromium): the browser test is skipped");
    return;
  }
  TempDir dir("spanprof-report-split");
  const auto span = spanprof_test::span_number(7050);
  {
    auto options = spanprof::Options();
    options.frequency_hz = 500;
    options.time_split = true;
    options.uploaders.push_back(std::make_shared<spanprof::FileUploader>(dir.sub("profiles")));
    spanprof_test::Collector collector(options);
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "GET /sleepy"});
    inventory::count_stock(0.02);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  const std::string page = dir.sub("report.html");
  const auto run = capture_command(report_command(dir.sub("profiles") + " -o " + page));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const Browser browser{chromium, dir.sub("chromium")};
  const std::string dom = browser.dump_dom("file://" + page);
  INFO("chromium said: " << spanprof_test::read_file(browser.log()).substr(0, 2000));
  const std::string row = table_row(dom, span.span_id.to_hex());
  INFO(row);
  REQUIRE(contains(row, "class=\"split\""));
  CHECK(contains(row, "class=\"block\" style=\"width:"));
  // Blocked, the 60 ms asleep, is most of the bar.
  const std::size_t blocked = row.find("class=\"block\" style=\"width:");
  const double blocked_percent = std::atof(row.c_str() + blocked + std::strlen("class=\"block\" style=\"width:"));
  CHECK(blocked_percent >= 40.0);  // of ~80 ms: 20 computing (longer on a loaded machine), 60 asleep
  CHECK(blocked_percent <= 90.0);
  const std::string detail = browser.dump_dom("file://" + page + "#span=" + span.span_id.to_hex());
  const std::size_t split = detail.find("id=\"time-split\"");
  REQUIRE(split != std::string::npos);
  INFO(detail.substr(split, 800));
  CHECK(contains(detail.substr(split, 1500), "blocked 6"));  // "blocked 60.x ms" or so
  CHECK(contains(detail.substr(split, 1500), "voluntary"));
}

// Lock profiles (docs/locks.md): a span that waited for a lock says how long, where,
// and which span held it where; the span that held it, whom it made wait.
TEST_CASE("a browser shows a span's lock wait: where it waited, and the span and function that held the lock",
          SPANPROF_TEST_BROWSER) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    WARN("chromium not found (apt-get install chromium): the browser test is skipped");
    return;
  }
  TempDir dir("spanprof-report-locks");
  double measured_ms = 0, before_release_ms = 0;  // around the waiter's take_stock(), and until the holder let go
  std::chrono::steady_clock::time_point start, released;
  const auto holder_span = spanprof_test::span_number(7060), waiter_span = spanprof_test::span_number(7061);
  const auto ledger_span = spanprof_test::span_number(7062);
  double ledger_ms = 0;  // around write_ledger()
  {
    auto options = spanprof::Options();
    options.uploaders.push_back(std::make_shared<spanprof::FileUploader>(dir.sub("profiles")));
    spanprof_test::Collector collector(options);
    std::mutex shelf;
    std::atomic<bool> holding{false};
    std::thread holder([&] {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{holder_span, "GET /restock"}, spanprof::lock);
      inventory::restock_all(shelf, holding, released);
    });
    while (!holding.load()) std::this_thread::yield();
    {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{waiter_span, "POST /checkout"}, spanprof::lock);
      start = std::chrono::steady_clock::now();
      inventory::take_stock(shelf);
      measured_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    holder.join();
    before_release_ms = std::chrono::duration<double, std::milli>(released - start).count();
    std::FILE* ledger = std::fopen("/dev/null", "w");
    REQUIRE(ledger != nullptr);
    std::thread clerk([&] {
      ::flockfile(ledger);
      holding = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      ::funlockfile(ledger);
    });
    while (holding.load()) std::this_thread::yield();
    {
      spanprof::ScopedProfile guard(spanprof::NamedSpan{ledger_span, "POST /ledger"}, spanprof::lock);
      start = std::chrono::steady_clock::now();
      inventory::write_ledger(ledger);
      ledger_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    clerk.join();
    std::fclose(ledger);
  }
  const std::string page = dir.sub("report.html");
  const auto run = capture_command(report_command(dir.sub("profiles") + " -o " + page));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const Browser browser{chromium, dir.sub("chromium")};
  const auto lock_waits = [&](const spanprof::SpanContext& span) {
    const std::string detail = browser.dump_dom("file://" + page + "#span=" + span.span_id.to_hex());
    const std::size_t at = detail.find("id=\"lock-waits\"");
    return at == std::string::npos ? std::string() : detail.substr(at, detail.find("</ul>", at) - at);
  };
  const std::string waited = lock_waits(waiter_span);
  INFO("the waiter's lock waits: " << waited);
  INFO("chromium said: " << spanprof_test::read_file(browser.log()).substr(0, 2000));
  // "waited 40.1 ms on the lock taken at test_report.cpp:NN (inventory::take_stock(std::mutex&)),
  //  held by span 0000… (GET /restock) in inventory::restock_all(…) at test_report.cpp:MM"
  // The time shown, against the time measured around the call.
  const auto shown_ms = [](const std::string& text, const std::string& before) {
    const std::size_t at = text.find(before);
    return at == std::string::npos || text.find(" ms ", at) == std::string::npos ? -1.0
                                                                                 : std::atof(text.c_str() + at + before.size());
  };
  INFO("measured " << measured_ms << " ms around take_stock()");
  CHECK(shown_ms(waited, "waited ") > measured_ms * 0.85);
  CHECK(shown_ms(waited, "waited ") < measured_ms * 1.15);
  CHECK(contains(waited, " ms on the lock taken at "));
#if SPANPROF_WITH_LIBDW
  CHECK(contains(waited, ">test_report.cpp:" + std::to_string(inventory::take_stock_line) + "<"));
  CHECK(contains(waited, ">test_report.cpp:" + std::to_string(inventory::restock_all_line) + "<"));
#endif
  CHECK(contains(waited, "inventory::take_stock"));
  CHECK(contains(waited, "held by span <span class=\"mono\">" + holder_span.span_id.to_hex() + "</span> (GET /restock) in "));
  CHECK(contains(waited, "inventory::restock_all"));
  const std::string held = lock_waits(holder_span);
  INFO("the holder's: " << held);
  // A holder is charged the wait until it let go (the waiter's wake-up is its own).
  INFO(before_release_ms << " ms of it before the holder let go");
  CHECK(shown_ms(held, "made others wait ") > before_release_ms * 0.85);
  CHECK(shown_ms(held, "made others wait ") < before_release_ms * 1.15);
  CHECK(contains(held, "inventory::restock_all"));
  // A wait on glibc's own lock: its place is the program's call, past fwrite; no holder.
  const std::string ledger_waits = lock_waits(ledger_span);
  INFO("the ledger writer's: " << ledger_waits << "\nmeasured " << ledger_ms << " ms around write_ledger()");
  CHECK(shown_ms(ledger_waits, "waited ") > ledger_ms * 0.85);
  CHECK(shown_ms(ledger_waits, "waited ") < ledger_ms * 1.15);
  CHECK(contains(ledger_waits, "inventory::write_ledger"));
  CHECK(contains(ledger_waits, ", its holder unknown"));
}

}  // namespace report_test
