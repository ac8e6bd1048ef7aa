// OTLP profiles encoding. The request is checked two independent ways: a small
// wire-format walker here (exact bytes, field by field, against the
// opentelemetry-proto v1.11.0 field numbers) and protoc, a real protobuf parser.
// With SPANPROF_OTLP_PROTO_DIR pointing at an opentelemetry-proto checkout,
// protoc also decodes it against the schema itself; CI does not need one.
#include "support/catch.hpp"
#include "support/protobuf_reader.hpp"
#include "support/test_helpers.hpp"
#include "support/command.hpp"

#include <spanprof/profile/otlp_encoder.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

const std::string trace_hex = "4bf92f3577b34da6a3ce929d0e0e4736";
const std::string span_hex = "00f067aa0ba902b7";
using spanprof_test::ten_ms;
using spanprof_test::string_label;
constexpr std::int64_t start_ns = 1'700'000'000'123'456'789;
constexpr std::int64_t duration_ns = 250'000'000;

using proto_test::Msg;
using proto_test::parse_fields;
using proto_test::read_varint;
using proto_test::WireField;

// ---- the request, decoded by field number (opentelemetry-proto v1.11.0) -------------

struct DecodedSample {
  std::uint64_t stack = 0, link = 0;
  std::vector<std::uint64_t> attributes;
  std::vector<std::int64_t> values;
};

struct DecodedProfile {
  std::uint64_t type = 0, unit = 0, period_type = 0, period_unit = 0, time = 0, duration = 0;
  std::int64_t period = 0;
  std::vector<DecodedSample> samples;
  std::vector<std::uint64_t> attributes;
};

struct DecodedRequest {
  std::size_t resource_profiles = 0, scope_profiles = 0;
  std::map<std::string, std::string> resource;
  std::string scope_name, scope_version;
  std::vector<DecodedProfile> profiles;
  // dictionary
  std::vector<std::string> mapping_rows, location_rows, function_rows, attribute_rows, stack_rows;  // raw
  std::vector<std::pair<std::string, std::string>> links;
  std::vector<std::string> strings;
};

DecodedRequest decode(const std::string& body) {
  DecodedRequest out;
  const Msg request(body);
  for (const Msg& rp : request.messages(1)) {
    ++out.resource_profiles;
    for (const Msg& attribute : rp.message(1).messages(1)) {
      out.resource[attribute.bytes(1)] = attribute.message(2).bytes(1);
    }
    for (const Msg& sp : rp.messages(2)) {
      ++out.scope_profiles;
      out.scope_name = sp.message(1).bytes(1);
      out.scope_version = sp.message(1).bytes(2);
      for (const Msg& p : sp.messages(2)) {
        DecodedProfile profile;
        profile.type = p.message(1).scalar(1);
        profile.unit = p.message(1).scalar(2);
        for (const Msg& s : p.messages(2)) {
          DecodedSample sample;
          sample.stack = s.scalar(1);
          sample.attributes = s.varints(2);
          sample.link = s.scalar(3);
          for (const std::uint64_t v : s.varints(4)) sample.values.push_back(static_cast<std::int64_t>(v));
          REQUIRE(s.count(5) == 0);  // no timestamps: one aggregated value per sample
          profile.samples.push_back(sample);
        }
        profile.time = p.scalar(3, 1);  // fixed64
        profile.duration = p.scalar(4);
        if (p.count(5) == 1) {
          profile.period_type = p.message(5).scalar(1);
          profile.period_unit = p.message(5).scalar(2);
        }
        profile.period = static_cast<std::int64_t>(p.scalar(6));
        profile.attributes = p.varints(11);
        out.profiles.push_back(profile);
      }
    }
  }
  const Msg dictionary = request.message(2);
  for (const auto b : dictionary.bytes_all(1)) out.mapping_rows.emplace_back(b);
  for (const auto b : dictionary.bytes_all(2)) out.location_rows.emplace_back(b);
  for (const auto b : dictionary.bytes_all(3)) out.function_rows.emplace_back(b);
  for (const Msg& link : dictionary.messages(4)) out.links.emplace_back(link.bytes(1), link.bytes(2));
  for (const auto b : dictionary.bytes_all(5)) out.strings.emplace_back(b);
  for (const auto b : dictionary.bytes_all(6)) out.attribute_rows.emplace_back(b);
  for (const auto b : dictionary.bytes_all(7)) out.stack_rows.emplace_back(b);
  return out;
}

std::string string_at(const DecodedRequest& r, std::uint64_t index) {
  REQUIRE(index < r.strings.size());
  return r.strings[index];
}

// Function names of a stack, leaf first; "@0x..." for a location without a line.
std::vector<std::string> stack_names(const DecodedRequest& r, std::uint64_t stack) {
  REQUIRE(stack < r.stack_rows.size());
  std::vector<std::string> names;
  for (const std::uint64_t location : Msg(r.stack_rows[stack]).varints(1)) {
    REQUIRE(location > 0);
    REQUIRE(location < r.location_rows.size());
    const Msg loc(r.location_rows[location]);
    if (loc.count(3) == 0) {
      std::ostringstream address;
      address << "@0x" << std::hex << loc.scalar(2);
      names.push_back(address.str());
      continue;
    }
    const std::uint64_t function = loc.message(3).scalar(1);
    REQUIRE(function > 0);
    REQUIRE(function < r.function_rows.size());
    names.push_back(string_at(r, Msg(r.function_rows[function]).scalar(1)));
  }
  return names;
}

// key -> value ("=<int> <unit>" for integers) of attribute_table entries.
std::map<std::string, std::string> attributes(const DecodedRequest& r, const std::vector<std::uint64_t>& indices) {
  std::map<std::string, std::string> out;
  for (const std::uint64_t index : indices) {
    REQUIRE(index > 0);
    REQUIRE(index < r.attribute_rows.size());
    const Msg attribute(r.attribute_rows[index]);
    const std::string key = string_at(r, attribute.scalar(1));
    REQUIRE(out.count(key) == 0);  // keys unique per referencing message
    const Msg value = attribute.message(2);
    out[key] = value.count(3) ? "=" + std::to_string(static_cast<std::int64_t>(value.scalar(3))) + " " +
                                    string_at(r, attribute.scalar(3))
                              : value.bytes(1);
  }
  return out;
}

// Every table present, entry 0 the zero value, as ProfilesDictionary requires.
void check_zero_entries(const DecodedRequest& r) {
  for (const auto* table : {&r.mapping_rows, &r.location_rows, &r.function_rows, &r.attribute_rows, &r.stack_rows}) {
    REQUIRE(!table->empty());
    CHECK(table->front().empty());
  }
  REQUIRE(!r.strings.empty());
  CHECK(r.strings[0].empty());
  REQUIRE(!r.links.empty());
  CHECK(r.links[0].first == std::string(16, '\0'));
  CHECK(r.links[0].second == std::string(8, '\0'));
}

std::string id_bytes(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// ---- the profile under test ----------------------------------------------------------


spanprof::SpanRecord record() {
  spanprof::SpanRecord span;
  span.span.trace_id = spanprof::TraceId::from_hex(trace_hex);
  span.span.span_id = spanprof::SpanId::from_hex(span_hex);
  span.span_name = "POST /checkout";
  span.kind = spanprof::ProfileKind::cpu;
  span.start_unix_ns = start_ns;
  span.duration_ns = duration_ns;
  span.reason = spanprof::ProfileReason::slow;
  return span;
}

spanprof::OtlpResource resource() { return {{{"service.name", "checkout"}, {"service.version", "1.2.3"}}}; }

// hot_function <- main twice (3 samples' worth), main alone once; one mapping.
spanprof::Profile cpu_profile() {
  spanprof::Profile p;
  p.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
  p.default_sample_type = "cpu";
  p.period_type = {"cpu", "nanoseconds"};
  p.period = ten_ms;
  p.time_nanos = start_ns;
  p.duration_nanos = duration_ns;

  spanprof::Mapping exe;
  exe.id = 1;
  exe.memory_start = 0x400000;
  exe.memory_limit = 0x500000;
  exe.file_offset = 0x1000;
  exe.filename = "/usr/bin/fake-service";
  exe.build_id = "0123456789abcdef0123456789abcdef01234567";
  exe.htl_hash = "caf6e5907166ac76eef618e5f7f59cd9";
  exe.has_functions = true;
  p.mappings = {exe};
  p.functions = {{1, "hot_function", "_Z12hot_functionv", "service.cpp"}, {2, "main", "main", "service.cpp"}};
  p.locations = {{1, 1, 0x401234, 1}, {2, 1, 0x402345, 2}};

  // Every sample belongs to the span's record, which gives it the span's labels.
  p.spans = {record()};
  p.samples.push_back({{1, 2}, {1, ten_ms}, {}, 1});
  p.samples.push_back({{1, 2}, {2, 2 * ten_ms}, {}, 1});
  spanprof::Label thread;
  thread.key = "thread_id";
  thread.num = 4242;
  thread.is_num = true;
  p.samples.push_back({{2}, {1, ten_ms}, {thread}, 1});
  return p;
}

std::string encode_ok(const spanprof::Profile& profile, const spanprof::SpanRecord& id = record()) {
  std::string out;
  const spanprof::Status encoded = spanprof::encode_otlp_profiles_request(profile, id, resource(), out);
  INFO(encoded.to_string());
  REQUIRE(encoded);
  return out;
}

// ---- protoc ----------------------------------------------------------------------------

bool protoc_on_path() { return spanprof_test::capture_command("command -v protoc").exit_code == 0; }

spanprof_test::CommandResult protoc(const std::string& body, const std::string& args) {
  char path[] = "/tmp/spanprof-otlp-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    std::ofstream file(path, std::ios::binary);
    file.write(body.data(), static_cast<std::streamsize>(body.size()));
    REQUIRE(file.good());
  }
  auto result = spanprof_test::capture_command("protoc " + args + " < " + path);
  ::unlink(path);
  return result;
}

// The request as protoc decodes it against the opentelemetry-proto schema, when
// SPANPROF_OTLP_PROTO_DIR names a checkout of it ("" when none does). Checks that
// every field written is in the schema: an unknown one prints as a bare number.
std::string decoded_with_schema(const std::string& body) {
  const char* proto_dir = std::getenv("SPANPROF_OTLP_PROTO_DIR");
  if (proto_dir == nullptr || *proto_dir == '\0') return {};
  const auto typed =
      protoc(body, std::string("--decode=opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest -I ") +
                       proto_dir + " opentelemetry/proto/collector/profiles/v1development/profiles_service.proto");
  INFO(typed.output);
  REQUIRE(typed.exit_code == 0);
  std::istringstream lines(typed.output);
  for (std::string line; std::getline(lines, line);) {
    line.erase(0, line.find_first_not_of(' '));
    INFO(line);
    CHECK(!(line.size() > 0 && line[0] >= '0' && line[0] <= '9'));
  }
  return typed.output;
}

// protoc's text output as a tree: "N: value" leaves and "N { ... }" blocks.
struct TextNode {
  std::string name, value;
  std::vector<TextNode> children;
  std::vector<const TextNode*> get(const std::string& child) const {
    std::vector<const TextNode*> out;
    for (const TextNode& c : children)
      if (c.name == child) out.push_back(&c);
    return out;
  }
};

void parse_text_block(std::istringstream& in, TextNode& node) {
  std::string line;
  while (std::getline(in, line)) {
    line.erase(0, line.find_first_not_of(' '));
    if (line.empty()) continue;
    if (line == "}") return;
    TextNode child;
    if (line.size() > 2 && line.compare(line.size() - 2, 2, " {") == 0) {
      child.name = line.substr(0, line.size() - 2);
      parse_text_block(in, child);
    } else {
      const std::size_t colon = line.find(": ");
      REQUIRE(colon != std::string::npos);
      child.name = line.substr(0, colon);
      child.value = line.substr(colon + 2);
    }
    node.children.push_back(std::move(child));
  }
}

TextNode parse_text(const std::string& text) {
  TextNode root;
  std::istringstream in(text);
  parse_text_block(in, root);
  return root;
}

// Undoes protoc's C escaping of a quoted bytes value ("\000\360g...").
std::string unescape(const std::string& quoted) {
  REQUIRE(quoted.size() >= 2);
  REQUIRE(quoted.front() == '"');
  REQUIRE(quoted.back() == '"');
  std::string out;
  for (std::size_t i = 1; i + 1 < quoted.size(); ++i) {
    if (quoted[i] != '\\') {
      out += quoted[i];
      continue;
    }
    const char c = quoted[++i];
    if (c >= '0' && c <= '7') {
      int value = 0;
      for (int digits = 0; digits < 3 && quoted[i] >= '0' && quoted[i] <= '7'; ++digits) {
        value = value * 8 + (quoted[i++] - '0');
      }
      --i;
      out += static_cast<char>(value);
    } else {
      out += c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;  // \" \' \\ stand for themselves
    }
  }
  return out;
}

}  // namespace

TEST_CASE("OTLP request carries resource, scope, one profile per sample type", "[otlp]") {
  const DecodedRequest r = decode(encode_ok(cpu_profile()));
  check_zero_entries(r);
  CHECK(r.resource_profiles == 1);
  CHECK(r.scope_profiles == 1);
  CHECK(r.resource.at("service.name") == "checkout");
  CHECK(r.resource.at("service.version") == "1.2.3");
  CHECK(r.scope_name == "spanprof");
  CHECK(r.scope_version == SPANPROF_VERSION_STRING);

  REQUIRE(r.profiles.size() == 2);
  // The pprof default sample type comes first: viewers show profiles[0].
  CHECK(string_at(r, r.profiles[0].type) == "cpu");
  CHECK(string_at(r, r.profiles[0].unit) == "nanoseconds");
  CHECK(string_at(r, r.profiles[1].type) == "samples");
  CHECK(string_at(r, r.profiles[1].unit) == "count");
  for (const DecodedProfile& p : r.profiles) {
    CHECK(p.time == static_cast<std::uint64_t>(start_ns));
    CHECK(p.duration == static_cast<std::uint64_t>(duration_ns));
    CHECK(string_at(r, p.period_type) == "cpu");
    CHECK(string_at(r, p.period_unit) == "nanoseconds");
    CHECK(p.period == ten_ms);
    const auto profile_attributes = attributes(r, p.attributes);
    CHECK(profile_attributes.at("span_name") == "POST /checkout");
    CHECK(profile_attributes.at("profile_reason") == "slow");
    CHECK(profile_attributes.count("spanprof.time.running") == 0);  // Options::time_split was off
  }
}

TEST_CASE("OTLP profiles carry a span's time split as attributes", "[otlp]") {
  spanprof::SpanRecord timed = record();
  timed.time = spanprof::TimeSplit{41'000'000, 80'000'000, 129'000'000, 3, 17};
  spanprof::Profile profile = cpu_profile();
  profile.spans = {timed};
  const DecodedRequest r = decode(encode_ok(profile, timed));
  REQUIRE_FALSE(r.profiles.empty());
  for (const DecodedProfile& p : r.profiles) {
    const auto a = attributes(r, p.attributes);
    CHECK(a.at("spanprof.time.running") == "=41000000 ns");
    CHECK(a.at("spanprof.time.waiting_for_cpu") == "=80000000 ns");
    CHECK(a.at("spanprof.time.blocked") == "=129000000 ns");
    CHECK(a.at("spanprof.context_switches.voluntary") == "=3 ");
    CHECK(a.at("spanprof.context_switches.involuntary") == "=17 ");
  }
}

TEST_CASE("OTLP samples keep their stacks, values, labels and the span link", "[otlp]") {
  const DecodedRequest r = decode(encode_ok(cpu_profile()));

  // The link table: the zero link, then the span's exact 16 + 8 id bytes.
  REQUIRE(r.links.size() == 2);
  CHECK(r.links[1].first == id_bytes(trace_hex));
  CHECK(r.links[1].second == id_bytes(span_hex));
  CHECK(r.links[1].first.size() == 16);
  CHECK(r.links[1].second.size() == 8);

  // The first two pprof samples share stack, labels and link: one OTLP sample,
  // values summed, as the schema asks.
  const std::vector<std::vector<std::int64_t>> expected_values = {{3 * ten_ms, ten_ms}, {3, 1}};
  const std::vector<std::vector<std::string>> expected_stacks = {{"hot_function", "main"}, {"main"}};
  for (std::size_t p = 0; p < r.profiles.size(); ++p) {
    const auto& samples = r.profiles[p].samples;
    REQUIRE(samples.size() == 2);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      INFO("profile " << p << " sample " << i);
      CHECK(samples[i].link == 1);
      CHECK(samples[i].values == std::vector<std::int64_t>{expected_values[p][i]});
      CHECK(stack_names(r, samples[i].stack) == expected_stacks[i]);
      const auto labels = attributes(r, samples[i].attributes);
      CHECK(labels.at("trace_id") == trace_hex);
      CHECK(labels.at("span_id") == span_hex);
      CHECK(labels.at("span_name") == "POST /checkout");
      CHECK(labels.at("profile_reason") == "slow");
      CHECK(labels.size() == (i == 1 ? 5u : 4u));
      if (i == 1) CHECK(labels.at("thread_id") == "=4242 ");
    }
    CHECK(samples[0].stack != samples[1].stack);  // one stack_table entry per distinct stack
  }
  CHECK(r.stack_rows.size() == 3);

  // Functions, the mapping and its build id, each stored once and shared.
  REQUIRE(r.function_rows.size() == 3);
  const Msg hot(r.function_rows[1]);
  CHECK(string_at(r, hot.scalar(1)) == "hot_function");
  CHECK(string_at(r, hot.scalar(2)) == "_Z12hot_functionv");
  CHECK(string_at(r, hot.scalar(3)) == "service.cpp");
  REQUIRE(r.location_rows.size() == 3);
  const Msg leaf(r.location_rows[1]);
  CHECK(leaf.scalar(1) == 1);
  CHECK(leaf.scalar(2) == 0x401234);
  CHECK(attributes(r, leaf.varints(4)).at("profile.frame.type") == "native");
  REQUIRE(r.mapping_rows.size() == 2);
  const Msg exe(r.mapping_rows[1]);
  CHECK(exe.scalar(1) == 0x400000);
  CHECK(exe.scalar(2) == 0x500000);
  CHECK(exe.scalar(3) == 0x1000);
  CHECK(string_at(r, exe.scalar(4)) == "/usr/bin/fake-service");
  CHECK(attributes(r, exe.varints(5)).at("process.executable.build_id.gnu") ==
        "0123456789abcdef0123456789abcdef01234567");
  CHECK(attributes(r, exe.varints(5)).at("process.executable.build_id.htlhash") == "caf6e5907166ac76eef618e5f7f59cd9");

  // Each string once; the function names are in it.
  std::map<std::string, int> seen;
  for (const std::string& s : r.strings) ++seen[s];
  for (const auto& [text, count] : seen) CHECK(count == 1);
  CHECK(seen.count("hot_function") == 1);
  CHECK(seen.count("main") == 1);
}

TEST_CASE("protoc parses the OTLP request and sees the same link", "[otlp][protoc]") {
  if (!protoc_on_path()) FAIL("protoc is required for this test (apt-get install protobuf-compiler)");
  const std::string body = encode_ok(cpu_profile());
  const auto raw = protoc(body, "--decode_raw");
  INFO(raw.output);
  REQUIRE(raw.exit_code == 0);
  const TextNode root = parse_text(raw.output);

  // dictionary (2) -> link_table (4): entry 1 holds the span's bytes exactly.
  REQUIRE(root.get("2").size() == 1);
  const auto links = root.get("2")[0]->get("4");
  REQUIRE(links.size() == 2);
  CHECK(unescape(links[0]->get("1").at(0)->value) == std::string(16, '\0'));
  CHECK(unescape(links[0]->get("2").at(0)->value) == std::string(8, '\0'));
  CHECK(unescape(links[1]->get("1").at(0)->value) == id_bytes(trace_hex));
  CHECK(unescape(links[1]->get("2").at(0)->value) == id_bytes(span_hex));

  // resource_profiles (1) -> scope_profiles (2) -> profiles (2) -> samples (2) -> link_index (3)
  const auto scope_profiles = root.get("1").at(0)->get("2");
  REQUIRE(scope_profiles.size() == 1);
  CHECK(scope_profiles[0]->get("1").at(0)->get("1").at(0)->value == "\"spanprof\"");
  const auto profiles = scope_profiles[0]->get("2");
  REQUIRE(profiles.size() == 2);
  for (const TextNode* profile : profiles) {
    const auto samples = profile->get("2");
    REQUIRE(samples.size() == 2);
    for (const TextNode* sample : samples) CHECK(sample->get("3").at(0)->value == "1");
  }
  CHECK(raw.output.find("\"service.name\"") != std::string::npos);
  CHECK(raw.output.find("\"hot_function\"") != std::string::npos);

  // Against the schema itself, when a checkout of opentelemetry-proto is at hand.
  const std::string typed = decoded_with_schema(body);
  if (typed.empty()) return;
  INFO(typed);
  std::size_t link_indices = 0;
  for (std::size_t pos = typed.find("link_index: 1"); pos != std::string::npos;
       pos = typed.find("link_index: 1", pos + 1)) {
    ++link_indices;
  }
  CHECK(link_indices == 4);
  CHECK(typed.find("string_value: \"checkout\"") != std::string::npos);
  // The mapping's build ids, as attributes the schema's mapping refers to.
  CHECK(typed.find("\"process.executable.build_id.gnu\"") != std::string::npos);
  CHECK(typed.find("string_value: \"caf6e5907166ac76eef618e5f7f59cd9\"") != std::string::npos);
  CHECK(typed.find("attribute_indices") != std::string::npos);
  CHECK(typed.find("name: \"spanprof\"") != std::string::npos);
  CHECK(typed.find("time_unix_nano: 1700000000123456789") != std::string::npos);
}

// A lock profile (docs/locks.md) as the builder makes one: a wait under its call
// site with the holder's labels, and the waits the span caused holding a lock.
spanprof::Profile lock_profile() {
  spanprof::Profile p = cpu_profile();
  p.sample_types = {{"contentions", "count"}, {"delay", "nanoseconds"}};
  p.default_sample_type = "delay";
  p.period_type = {"contentions", "count"};
  p.period = 1;
  p.samples.clear();
  const auto text = [](const char* key, const char* value) {
    spanprof::Label label;
    label.key = key;
    label.str = value;
    return label;
  };
  spanprof::Label thread;
  thread.key = "holder_thread";
  thread.num = 30772;
  thread.is_num = true;
  p.samples.push_back({{1, 2},
                       {1, 41'000'000},
                       {text("lock_role", "waiter"), thread, text("holder_span_id", "5f3a000000000001"),
                        text("holder_trace_id", "00000000abc000010000000000000002"),
                        text("holder_span_name", "GET /restock"), text("holder_function", "restock_all"),
                        text("holder_location", "inventory.cpp:88")},
                       1});
  p.samples.push_back({{2}, {3, 90'000'000}, {text("lock_role", "holder")}, 1});
  return p;
}

TEST_CASE("a lock profile's OTLP request: contentions and delay, the holder's labels as attributes", "[otlp][protoc]") {
  const std::string body = encode_ok(lock_profile());
  const DecodedRequest r = decode(body);
  check_zero_entries(r);
  // One profile per sample type, the default (delay) first.
  REQUIRE(r.profiles.size() == 2);
  CHECK(string_at(r, r.profiles[0].type) == "delay");
  CHECK(string_at(r, r.profiles[0].unit) == "nanoseconds");
  CHECK(string_at(r, r.profiles[1].type) == "contentions");
  CHECK(string_at(r, r.profiles[1].unit) == "count");
  const auto& delays = r.profiles[0].samples;
  REQUIRE(delays.size() == 2);
  CHECK(delays[0].values == std::vector<std::int64_t>{41'000'000});
  CHECK(delays[1].values == std::vector<std::int64_t>{90'000'000});
  CHECK(r.profiles[1].samples[1].values == std::vector<std::int64_t>{3});
  const auto waiter = attributes(r, delays[0].attributes);
  CHECK(waiter.at("span_id") == span_hex);
  CHECK(waiter.at("lock_role") == "waiter");
  CHECK(waiter.at("holder_thread") == "=30772 ");
  CHECK(waiter.at("holder_span_id") == "5f3a000000000001");
  CHECK(waiter.at("holder_trace_id") == "00000000abc000010000000000000002");
  CHECK(waiter.at("holder_span_name") == "GET /restock");
  CHECK(waiter.at("holder_function") == "restock_all");
  CHECK(waiter.at("holder_location") == "inventory.cpp:88");
  CHECK(attributes(r, delays[1].attributes).at("lock_role") == "holder");

  if (!protoc_on_path()) FAIL("protoc is required for this test (apt-get install protobuf-compiler)");
  const auto raw = protoc(body, "--decode_raw");
  INFO(raw.output);
  REQUIRE(raw.exit_code == 0);
  CHECK(raw.output.find("\"holder_span_name\"") != std::string::npos);
  // Against the schema itself, when a checkout of opentelemetry-proto is at hand.
  const std::string typed = decoded_with_schema(body);
  if (typed.empty()) return;
  INFO(typed);
  CHECK(typed.find("string_value: \"GET /restock\"") != std::string::npos);
  CHECK(typed.find("int_value: 30772") != std::string::npos);
}

// A location with a function inlined into another: its lines, innermost first,
// each with its line number; the functions with their files and first lines.
TEST_CASE("OTLP locations carry their inlined functions' lines, innermost first", "[otlp][protoc]") {
  if (!protoc_on_path()) FAIL("protoc is required for this test (apt-get install protobuf-compiler)");
  spanprof::Profile p = cpu_profile();
  p.functions.push_back({3, "checksum", "", "hot.hpp", 40});
  p.functions[0].start_line = 10;
  p.locations[0].line = 12;                  // hot_function's call of checksum
  p.locations[0].inlined.push_back({3, 42});  // checksum's own line
  const std::string body = encode_ok(p);
  const auto raw = protoc(body, "--decode_raw");
  INFO(raw.output);
  REQUIRE(raw.exit_code == 0);
  const TextNode root = parse_text(raw.output);
  // dictionary (2): string_table (5), function_table (3), location_table (2).
  const auto& dictionary = *root.get("2").at(0);
  std::vector<std::string> strings;
  for (const TextNode* entry : dictionary.get("5")) strings.push_back(unescape(entry->value));
  const auto functions = dictionary.get("3");
  const auto function_name = [&](const std::string& index) {
    const TextNode& function = *functions.at(std::stoul(index));
    return strings.at(std::stoul(function.get("1").at(0)->value));
  };
  bool found = false;
  for (const TextNode* location : dictionary.get("2")) {
    const auto lines = location->get("3");
    if (lines.size() != 2) continue;
    found = true;
    CHECK(function_name(lines[0]->get("1").at(0)->value) == "checksum");
    CHECK(lines[0]->get("2").at(0)->value == "42");
    CHECK(function_name(lines[1]->get("1").at(0)->value) == "hot_function");
    CHECK(lines[1]->get("2").at(0)->value == "12");
  }
  CHECK(found);
  for (const TextNode* function : functions) {
    if (function->get("1").empty()) continue;  // row 0
    const std::string name = strings.at(std::stoul(function->get("1").at(0)->value));
    if (name == "checksum") {
      CHECK(strings.at(std::stoul(function->get("3").at(0)->value)) == "hot.hpp");
      CHECK(function->get("4").at(0)->value == "40");
    }
    if (name == "hot_function") CHECK(function->get("4").at(0)->value == "10");
  }
  // Against the schema itself, when a checkout of opentelemetry-proto is at hand.
  const std::string typed = decoded_with_schema(body);
  if (typed.empty()) return;
  INFO(typed);
  CHECK(typed.find("line: 42") != std::string::npos);
  CHECK(typed.find("start_line: 40") != std::string::npos);
}

TEST_CASE("an empty OTLP profile is a valid request with zero samples", "[otlp]") {
  SECTION("no sample types: no profiles, only the zero dictionary entries") {
    const std::string body = encode_ok(spanprof::Profile{});
    const DecodedRequest r = decode(body);
    check_zero_entries(r);
    CHECK(r.scope_name == "spanprof");
    CHECK(r.profiles.empty());
    CHECK(r.links.size() == 1);  // nothing refers to the span link, so it is not stored
    CHECK(r.strings.size() == 1);
    CHECK(r.attribute_rows.size() == 1);
    if (protoc_on_path()) CHECK(protoc(body, "--decode_raw").exit_code == 0);
  }
  SECTION("a CPU profile without samples: one empty profile per sample type") {
    spanprof::Profile p = cpu_profile();
    p.samples.clear();
    const std::string body = encode_ok(p);
    const DecodedRequest r = decode(body);
    check_zero_entries(r);
    REQUIRE(r.profiles.size() == 2);
    for (const DecodedProfile& profile : r.profiles) CHECK(profile.samples.empty());
    CHECK(r.location_rows.size() == 1);  // unreferenced entries stay out
    CHECK(r.function_rows.size() == 1);
    CHECK(r.mapping_rows.size() == 1);
    if (protoc_on_path()) CHECK(protoc(body, "--decode_raw").exit_code == 0);
  }
}

TEST_CASE("a span without ids leaves samples unlinked", "[otlp]") {
  spanprof::SpanRecord id = record();
  id.span = spanprof::SpanContext{};
  spanprof::Profile profile = cpu_profile();
  profile.spans = {id};
  const DecodedRequest r = decode(encode_ok(profile, id));
  REQUIRE(r.links.size() == 1);
  for (const DecodedProfile& p : r.profiles)
    for (const DecodedSample& s : p.samples) CHECK(s.link == 0);
}

TEST_CASE("samples of several spans link to their own span; the request's record is the fallback", "[otlp]") {
  spanprof::Profile profile = cpu_profile();
  const std::string other_span = "1111111111111111";
  spanprof::SpanRecord other = record();
  other.span.span_id = spanprof::SpanId::from_hex(other_span);
  profile.spans.push_back(other);
  profile.samples[1].span = 2;
  profile.samples[2].span = 0;
  const DecodedRequest r = decode(encode_ok(profile, record()));
  // The zero link, the record's span (sample 0 and, by fallback, sample 2), the other span.
  REQUIRE(r.links.size() == 3);
  CHECK(r.links[1].second == id_bytes(span_hex));
  CHECK(r.links[2].second == id_bytes(other_span));
  for (const DecodedProfile& p : r.profiles) {
    REQUIRE(p.samples.size() == 3);
    CHECK(p.samples[0].link == 1);
    CHECK(p.samples[1].link == 2);
    CHECK(p.samples[2].link == 1);
  }
}

TEST_CASE("OTLP encoding rejects inconsistent input with a clear error", "[otlp]") {
  spanprof::Profile p = cpu_profile();
  std::string expected;
  spanprof::OtlpResource res = resource();
  SECTION("a sample references a location id that does not exist") {
    p.samples[1].location_ids = {1, 99};
    expected = "sample index 1 references location id 99, which the profile does not define";
  }
  SECTION("a location references a function id that does not exist") {
    p.locations[1].function_id = 7;
    expected = "location id 2 references function id 7";
  }
  SECTION("a location references a mapping id that does not exist") {
    p.locations[0].mapping_id = 5;
    expected = "location id 1 references mapping id 5";
  }
  SECTION("a sample has the wrong number of values") {
    p.samples[2].values = {1};
    expected = "sample index 2 has 1 values for 2 sample types";
  }
  SECTION("two locations share an id") {
    p.locations[1].id = 1;
    expected = "two locations share id 1";
  }
  SECTION("a resource attribute appears twice") {
    res.attributes.push_back({"service.name", "other"});
    expected = "resource attribute 'service.name' appears twice";
  }
  std::string out = "stale";
  const spanprof::Status encoded = spanprof::encode_otlp_profiles_request(p, record(), res, out);
  CHECK_FALSE(encoded);
  CHECK(out.empty());
  CHECK(encoded.code() == spanprof::ErrorCode::encoding_failed);
  CHECK(encoded.message().rfind("otlp: invalid input: ", 0) == 0);
  CHECK(encoded.message().find(expected) != std::string::npos);
}

TEST_CASE("the encoder takes the record a guard built as is: a RawProfile's, ids as bytes", "[otlp]") {
  spanprof::RawProfile raw;
  raw.kind = spanprof::ProfileKind::cpu;
  raw.span.trace_id = spanprof::TraceId::from_hex(trace_hex);
  raw.span.span_id = spanprof::SpanId::from_hex(span_hex);
  raw.span_name = "GET /cart";
  raw.start_unix_ns = start_ns + 7;
  raw.duration_ns = duration_ns;
  raw.reason = spanprof::ProfileReason::error;
  spanprof::Profile profile = cpu_profile();
  profile.spans = {raw};
  const DecodedRequest r = decode(encode_ok(profile, raw));
  REQUIRE(r.links.size() == 2);
  CHECK(r.links[1].first == id_bytes(trace_hex));
  CHECK(r.links[1].second == id_bytes(span_hex));
  for (const DecodedProfile& p : r.profiles) {
    CHECK(p.time == static_cast<std::uint64_t>(start_ns + 7));
    const auto profile_attributes = attributes(r, p.attributes);
    CHECK(profile_attributes.at("span_name") == "GET /cart");
    CHECK(profile_attributes.at("profile_reason") == "error");
    for (const DecodedSample& sample : p.samples) CHECK(attributes(r, sample.attributes).at("span_id") == span_hex);
  }
}
