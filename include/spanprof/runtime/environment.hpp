// Every environment variable spanprof reads, in one table: its name, type, range,
// default and meaning. The parser walks this table and nothing else reads the
// environment; docs/configuration.md shows the same table (a test keeps the two
// equal), so operators and code cannot disagree about what a variable does.
//
// Precedence, the same for every setting: code > environment > built-in default.
// spanprof::Options() starts from the built-in defaults and overlays what the
// environment sets; whatever the program then assigns wins (runtime/options.hpp).
//
// A bad value never stops the program: it is recorded as a ConfigurationProblem
// (start() reports each through the error channel and returns them all) and the
// default is used instead; a bad value for a backend turns that uploader off.
#ifndef SPANPROF_RUNTIME_ENVIRONMENT_HPP_
#define SPANPROF_RUNTIME_ENVIRONMENT_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/base/text.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/profile/profile.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/stat.h>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// The parsed environment, before it becomes Options. Unset variables stay empty,
// so the built-in defaults (or the program's own values) are kept.
struct EnvironmentSettings {
  std::optional<ProfileKinds> profiles;
  std::optional<CpuEngine> cpu_engine;
  std::optional<CpuSampleSource> cpu_sample_source;
  std::optional<int> frequency_hz;
  std::optional<int> wall_frequency_hz;
  std::optional<int> signal_number;
  std::optional<HeapEngine> heap_engine;
  std::optional<std::size_t> heap_sample_interval_bytes;
  std::string head_sampler;  // a name from the table, lower case; empty: unset
  std::optional<double> head_sampler_argument;
  std::optional<double> max_profiles_per_second;
  std::string keep;  // all | slow | error | slow,error | error,slow; empty: unset
  std::optional<std::int64_t> slow_threshold_ms;
  std::optional<double> trigger_factor;
  std::optional<std::uint32_t> trigger_spans;
  std::optional<std::string> output_directory;
  std::optional<std::string> spool_directory;
  std::optional<std::uint64_t> spool_max_bytes;
  std::optional<int> upload_attempts;
  std::optional<std::int64_t> upload_window_ms;
  std::optional<OverflowPolicy> queue_overflow;
  std::string service_name;
  std::string pyroscope_server_address, pyroscope_application_name, pyroscope_auth_token;
  std::string pyroscope_basic_auth_user, pyroscope_basic_auth_password, pyroscope_tenant_id;
  std::string otlp_profiles_endpoint, otlp_endpoint;
  std::vector<std::pair<std::string, std::string>> otlp_headers, resource_attributes;
  bool pyroscope_refused = false;  // a Pyroscope variable was bad: that uploader is off
  bool otlp_refused = false;
  std::vector<ConfigurationProblem> problems;
};

// What a variable configures, so callers can read one part of the environment.
enum class EnvironmentGroup : std::uint8_t { capture, head_sampler, tail_policy, trigger, delivery, service, pyroscope, otlp };

struct EnvironmentVariable {
  const char* name;
  EnvironmentGroup group;
  const char* type;
  const char* range;
  const char* default_value;
  const char* option;  // the Options field it sets, when there is one
  const char* meaning;
  // A variable that refines another is read only while that one is in effect (as
  // OTEL_TRACES_SAMPLER_ARG is only read by the samplers that take an argument):
  // null, or a check of the environment.
  bool (*in_effect)() noexcept;
  // Parses a non-empty value into `settings`; false (with `why` set to what was
  // expected) when the value is refused.
  bool (*parse)(std::string_view value, EnvironmentSettings& settings, std::string& why);
};

// ---- parsers shared by the table -------------------------------------------------

inline bool parse_bounded_integer(std::string_view text, std::int64_t low, std::int64_t high, std::int64_t& out,
                                  std::string& why) {
  std::int64_t value = 0;
  if (!parse_integer(trim_ascii_space(text), value) || value < low || value > high) {
    why = "is not an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
    return false;
  }
  out = value;
  return true;
}

// Matches `text` (ASCII case and surrounding blanks ignored) against `choices`;
// returns the index or -1 and explains.
inline int parse_choice(std::string_view text, std::initializer_list<const char*> choices, std::string& why) {
  const std::string_view wanted = trim_ascii_space(text);
  int index = 0;
  for (const char* choice : choices) {
    if (equals_ignoring_ascii_case(wanted, choice)) return index;
    ++index;
  }
  why = "is not one of";
  for (const char* choice : choices) why += std::string(" ") + choice;
  return -1;
}

inline bool is_http_url(std::string_view url) {
  return (url.rfind("http://", 0) == 0 && url.size() > 7) || (url.rfind("https://", 0) == 0 && url.size() > 8);
}

inline bool parse_http_url(std::string_view text, std::string& out, std::string& why) {
  const std::string_view url = trim_ascii_space(text);
  if (!is_http_url(url)) {
    why = "is not an http:// or https:// URL";
    return false;
  }
  // Refused here, not at the first upload: a blank or a terminal escape is never
  // part of a URL, and the uploader would otherwise turn on for nothing.
  for (const char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      why = "contains a blank or a control character";
      return false;
    }
  }
  out = std::string(url);
  return true;
}

inline int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int high = hex_digit(in[i + 1]), low = hex_digit(in[i + 2]);
    if (high < 0 || low < 0) return false;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return true;
}

// The W3C-baggage-like list OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS
// use: key=value pairs separated by commas, values percent-encoded.
inline bool parse_key_value_list(std::string_view text, std::vector<std::pair<std::string, std::string>>& out,
                                 std::string& why) {
  out.clear();
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim_ascii_space(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos || trim_ascii_space(item.substr(0, equals)).empty()) {
      why = "has '" + std::string(item.substr(0, 64)) + "', which is not key=value";
      return false;
    }
    std::string value;
    if (!percent_decode(trim_ascii_space(item.substr(equals + 1)), value)) {
      why = "has bad percent-encoding in the value of '" +
            printable_excerpt(trim_ascii_space(item.substr(0, equals)), 64) + "'";
      return false;
    }
    out.emplace_back(std::string(trim_ascii_space(item.substr(0, equals))), std::move(value));
  }
  return true;
}

// Free text: anything printable. A control character (a newline in a token, say)
// would end up in an HTTP header, a URL or a log line, so it is refused.
inline bool parse_text(std::string_view text, std::string& out, std::string& why) {
  const std::string_view value = trim_ascii_space(text);
  for (char c : value) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      why = "contains a control character";
      return false;
    }
  }
  out = std::string(value);
  return true;
}

// A directory spanprof may have to create: refused only when something that is
// not a directory is already in its place.
inline bool parse_directory(std::string_view text, std::optional<std::string>& out, std::string& why) {
  std::string path;
  if (!parse_text(text, path, why)) return false;
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && !S_ISDIR(status.st_mode)) {
    why = "names something that is not a directory";
    return false;
  }
  out = std::move(path);
  return true;
}

inline bool is_set(const char* name) noexcept {
  const char* value = std::getenv(name);
  return value != nullptr && !trim_ascii_space(value).empty();
}

inline bool environment_is_one_of(const char* name, std::initializer_list<const char*> values) noexcept {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  for (const char* candidate : values)
    if (equals_ignoring_ascii_case(trim_ascii_space(value), candidate)) return true;
  return false;
}

// ---- the table -------------------------------------------------------------------

using EG = EnvironmentGroup;
using ES = EnvironmentSettings;

// The order is the order of docs/configuration.md.
inline const EnvironmentVariable environment_variables[] = {
    {"SPANPROF_PROFILES", EG::capture, "list", "cpu, heap, wall, or several: cpu,wall", "cpu", "profiles",
     "What a guard records unless its code says otherwise.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       ProfileKinds kinds;
       std::string_view rest = v;
       while (true) {
         const std::size_t comma = rest.find(',');
         std::string ignored;
         const int i = parse_choice(rest.substr(0, comma), {"cpu", "heap", "wall"}, ignored);
         if (i < 0) {
           why = "is not a comma-separated list of cpu, heap, wall";
           return false;
         }
         kinds = kinds | ProfileKinds(static_cast<ProfileKind>(i));
         if (comma == std::string_view::npos) break;
         rest.remove_prefix(comma + 1);
       }
       s.profiles = kinds;
       return true;
     }},
    {"SPANPROF_ENGINE", EG::capture, "choice", "sampling, classic", "sampling", "cpu_engine",
     "The CPU engine: per-thread sampling, or gperftools' ProfilerStart/Stop around each scope.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       const int i = parse_choice(v, {"sampling", "classic"}, why);
       if (i >= 0) s.cpu_engine = i == 0 ? CpuEngine::sampling : CpuEngine::classic;
       return i >= 0;
     }},
    {"SPANPROF_SOURCE", EG::capture, "choice", "automatic, perf_event, posix_timer", "automatic",
     "cpu_sample_source", "Where the sampling engine's CPU ticks come from; automatic is posix_timer (docs/cost.md).",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       const int i = parse_choice(v, {"automatic", "perf_event", "posix_timer"}, why);
       if (i >= 0) s.cpu_sample_source = static_cast<CpuSampleSource>(i);
       return i >= 0;
     }},
    {"SPANPROF_FREQUENCY", EG::capture, "integer (Hz)", "1..4000", "100", "frequency_hz",
     "CPU samples per CPU-second of a profiled thread.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t hz = 0;
       if (!parse_bounded_integer(v, 1, 4000, hz, why)) return false;
       s.frequency_hz = static_cast<int>(hz);
       return true;
     }},
    {"SPANPROF_WALL_FREQUENCY", EG::capture, "integer (Hz)", "1..1000", "100", "wall_frequency_hz",
     "Wall-clock samples per second of a thread in a wall-profiled span.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t hz = 0;
       if (!parse_bounded_integer(v, 1, 1000, hz, why)) return false;
       s.wall_frequency_hz = static_cast<int>(hz);
       return true;
     }},
    {"SPANPROF_SIGNAL", EG::capture, "integer", "a real-time signal, SIGRTMIN..SIGRTMAX", "0", "signal_number",
     "The signal that carries CPU samples; 0 picks the first free one from SIGRTMIN+4.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t signal = 0;
       if (!parse_integer(trim_ascii_space(v), signal) || (signal != 0 && (signal < SIGRTMIN || signal > SIGRTMAX))) {
         why = "is not 0 or a real-time signal in [" + std::to_string(SIGRTMIN) + ", " + std::to_string(SIGRTMAX) + "]";
         return false;
       }
       s.signal_number = static_cast<int>(signal);
       return true;
     }},
    {"SPANPROF_HEAP_ENGINE", EG::capture, "choice", "sampling, classic", "sampling", "heap_engine",
     "The heap engine: sampled allocation hooks, or gperftools' heap profiler around each scope.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       const int i = parse_choice(v, {"sampling", "classic"}, why);
       if (i >= 0) s.heap_engine = i == 0 ? HeapEngine::sampling : HeapEngine::classic;
       return i >= 0;
     }},
    {"SPANPROF_HEAP_INTERVAL", EG::capture, "integer (bytes)", "1..1073741824", "524288",
     "heap_sample_interval_bytes", "Mean allocated bytes between two heap samples.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t bytes = 0;
       if (!parse_bounded_integer(v, 1, std::int64_t{1} << 30, bytes, why)) return false;
       s.heap_sample_interval_bytes = static_cast<std::size_t>(bytes);
       return true;
     }},
    {"SPANPROF_SAMPLER", EG::head_sampler, "choice",
     "always_on, always_off, traceidratio, probability, parentbased_always_on, parentbased_traceidratio",
     "(unset: every span)", "head_sampler",
     "The head sampler, named as OpenTelemetry names its trace samplers.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       static const char* const names[] = {"always_on",   "always_off", "traceidratio", "probability",
                                           "parentbased_always_on", "parentbased_traceidratio"};
       const int i = parse_choice(v, {names[0], names[1], names[2], names[3], names[4], names[5]}, why);
       if (i >= 0) s.head_sampler = names[i];
       return i >= 0;
     }},
    {"SPANPROF_SAMPLER_ARG", EG::head_sampler, "number", "0..1", "1.0", "",
     "The ratio or probability of SPANPROF_SAMPLER's traceidratio, probability and parentbased_traceidratio.",
     []() noexcept { return environment_is_one_of("SPANPROF_SAMPLER", {"traceidratio", "probability", "parentbased_traceidratio"}); },
     [](std::string_view v, ES& s, std::string& why) {
       double value = 0;
       if (!parse_decimal(trim_ascii_space(v), value) || value < 0 || value > 1) {
         why = "is not a number in [0, 1]";
         return false;
       }
       s.head_sampler_argument = value;
       return true;
     }},
    {"SPANPROF_MAX_PROFILES_PER_SECOND", EG::head_sampler, "number", "> 0", "(unset: no limit)", "",
     "At most this many profiled spans a second (burst max(1, rate)), after SPANPROF_SAMPLER said yes.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       double value = 0;
       if (!parse_decimal(trim_ascii_space(v), value) || !(value > 0)) {
         why = "is not a number greater than 0";
         return false;
       }
       s.max_profiles_per_second = value;
       return true;
     }},
    {"SPANPROF_KEEP", EG::tail_policy, "choice", "all, slow, error, slow,error", "all", "tail_policy",
     "The tail policy: which recorded profiles are kept when the span ends.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       static const char* const rules[] = {"all", "slow", "error", "slow,error", "error,slow"};
       const int i = parse_choice(v, {rules[0], rules[1], rules[2], rules[3], rules[4]}, why);
       if (i >= 0) s.keep = rules[i];
       return i >= 0;
     }},
    {"SPANPROF_SLOW_THRESHOLD_MS", EG::tail_policy, "integer (ms)", "0..86400000", "100", "",
     "A span at least this long is slow, for SPANPROF_KEEP=slow.",
     []() noexcept { return environment_is_one_of("SPANPROF_KEEP", {"slow", "slow,error", "error,slow"}); },
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t ms = 0;
       if (!parse_bounded_integer(v, 0, 86'400'000, ms, why)) return false;
       s.slow_threshold_ms = ms;
       return true;
     }},
    {"SPANPROF_TRIGGER_FACTOR", EG::trigger, "number", "(1, 1000]", "(unset: off)", "trigger",
     "Turns the adaptive trigger on: a span name whose latency exceeds this factor of its normal is profiled.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       double factor = 0;
       if (!parse_decimal(trim_ascii_space(v), factor) || !(factor > 1.0) || factor > 1000.0) {
         why = "is not a number in (1, 1000]";
         return false;
       }
       s.trigger_factor = factor;
       return true;
     }},
    {"SPANPROF_TRIGGER_SPANS", EG::trigger, "integer", "1..1000", "5", "",
     "How many spans of that name the adaptive trigger profiles each time it arms.",
     []() noexcept { return is_set("SPANPROF_TRIGGER_FACTOR"); },
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t spans = 0;
       if (!parse_bounded_integer(v, 1, 1000, spans, why)) return false;
       s.trigger_spans = static_cast<std::uint32_t>(spans);
       return true;
     }},
    {"SPANPROF_OUTPUT_DIR", EG::delivery, "path", "a directory (created if missing)", "./profiles", "output_directory",
     "Where the default file uploader writes; set alongside a backend, files are written too.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) { return parse_directory(v, s.output_directory, why); }},
    {"SPANPROF_SPOOL_DIR", EG::delivery, "path", "a directory (created if missing)", "(unset: no spool)", "spool_directory",
     "Where profiles an uploader could not deliver wait to be re-sent, also after a restart.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) { return parse_directory(v, s.spool_directory, why); }},
    {"SPANPROF_SPOOL_MAX_MB", EG::delivery, "integer (MiB)", "1..1048576", "256", "spool_max_bytes",
     "The spool's size bound; the oldest profiles are dropped first.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t mib = 0;
       if (!parse_bounded_integer(v, 1, std::int64_t{1} << 20, mib, why)) return false;
       s.spool_max_bytes = static_cast<std::uint64_t>(mib) << 20;
       return true;
     }},
    {"SPANPROF_UPLOAD_ATTEMPTS", EG::delivery, "integer", "1..100", "3", "retry.max_attempts",
     "Attempts per profile and uploader for a retryable failure, the first included.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t attempts = 0;
       if (!parse_bounded_integer(v, 1, 100, attempts, why)) return false;
       s.upload_attempts = static_cast<int>(attempts);
       return true;
     }},
    {"SPANPROF_UPLOAD_WINDOW_MS", EG::delivery, "integer (ms)", "0..600000", "10000", "",
     "Pyroscope and OTLP from the environment merge kept spans into one profile per kind per window this long; 0: one per span.",
     []() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS") || is_set("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") ||
                            is_set("OTEL_EXPORTER_OTLP_ENDPOINT"); },
     [](std::string_view v, ES& s, std::string& why) {
       std::int64_t window = 0;
       if (!parse_bounded_integer(v, 0, 600'000, window, why)) return false;
       s.upload_window_ms = window;
       return true;
     }},
    {"SPANPROF_QUEUE_OVERFLOW", EG::delivery, "choice", "drop_newest, drop_oldest", "drop_newest", "queue_overflow",
     "Which profile a full hand-off queue drops; a request thread never waits.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) {
       const int i = parse_choice(v, {"drop_newest", "drop_oldest"}, why);
       if (i >= 0) s.queue_overflow = i == 0 ? OverflowPolicy::drop_newest : OverflowPolicy::drop_oldest;
       return i >= 0;
     }},
    {"OTEL_SERVICE_NAME", EG::service, "text", "printable", "(unset)", "service_name",
     "The service: a comment in every profile, Pyroscope's application name and OTLP's service.name.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) { return parse_text(v, s.service_name, why); }},
    {"PYROSCOPE_SERVER_ADDRESS", EG::pyroscope, "URL", "http:// or https://", "(unset: off)", "uploaders",
     "Turns on the Pyroscope uploader (needs libcurl), e.g. http://pyroscope:4040.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) { return parse_http_url(v, s.pyroscope_server_address, why); }},
    {"PYROSCOPE_APPLICATION_NAME", EG::pyroscope, "text", "printable", "OTEL_SERVICE_NAME, else spanprof", "",
     "The Pyroscope application (series name).",
     []() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_text(v, s.pyroscope_application_name, why); }},
    {"PYROSCOPE_AUTH_TOKEN", EG::pyroscope, "text", "printable", "(unset)", "",
     "Sent as Authorization: Bearer <token>.",
     []() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_text(v, s.pyroscope_auth_token, why); }},
    {"PYROSCOPE_BASIC_AUTH_USER", EG::pyroscope, "text", "printable", "(unset)", "",
     "Basic authentication user (Grafana Cloud: the stack's user id).",
     []() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_text(v, s.pyroscope_basic_auth_user, why); }},
    {"PYROSCOPE_BASIC_AUTH_PASSWORD", EG::pyroscope, "text", "printable; needs PYROSCOPE_BASIC_AUTH_USER", "(unset)", "",
     "Basic authentication password.",
     []() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_text(v, s.pyroscope_basic_auth_password, why); }},
    {"PYROSCOPE_TENANT_ID", EG::pyroscope, "text", "printable", "(unset)", "",
     "Sent as X-Scope-OrgID, for multi-tenant Pyroscope.",
     []() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_text(v, s.pyroscope_tenant_id, why); }},
    {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", EG::otlp, "URL", "http:// or https://", "(unset)", "uploaders",
     "Turns on the OTLP uploader (needs libcurl); the full URL profiles are posted to.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) { return parse_http_url(v, s.otlp_profiles_endpoint, why); }},
    {"OTEL_EXPORTER_OTLP_ENDPOINT", EG::otlp, "URL", "http:// or https://", "(unset)", "uploaders",
     "Turns on the OTLP uploader (needs libcurl); /v1development/profiles is appended.",
     nullptr,
     [](std::string_view v, ES& s, std::string& why) { return parse_http_url(v, s.otlp_endpoint, why); }},
    {"OTEL_EXPORTER_OTLP_HEADERS", EG::otlp, "list", "key=value,... (values percent-encoded)", "(unset)", "",
     "Extra headers on every OTLP request.",
     []() noexcept { return is_set("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") || is_set("OTEL_EXPORTER_OTLP_ENDPOINT"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_key_value_list(v, s.otlp_headers, why); }},
    {"OTEL_RESOURCE_ATTRIBUTES", EG::otlp, "list", "key=value,... (values percent-encoded)", "(unset)", "",
     "Resource attributes of OTLP profiles; OTEL_SERVICE_NAME wins over a service.name here.",
     []() noexcept { return is_set("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") || is_set("OTEL_EXPORTER_OTLP_ENDPOINT"); },
     [](std::string_view v, ES& s, std::string& why) { return parse_key_value_list(v, s.resource_attributes, why); }},
};

// Echoes at most 64 bytes of the value (printable_excerpt): an environment
// variable can be anything, and a problem must stay one short line.
inline ConfigurationProblem environment_problem(const char* name, std::string_view value, const std::string& why,
                                                const char* consequence) {
  std::string message = std::string(name) + "=\"" + printable_excerpt(value, 64) + "\" " +
                        printable_excerpt(why, why.size()) + "; " + consequence;
  return {name, std::move(message)};
}

// Reads every variable of the given groups (all by default). Never throws: out of
// memory leaves what was read so far.
inline EnvironmentSettings read_environment(std::initializer_list<EnvironmentGroup> groups = {}) noexcept {
  EnvironmentSettings settings;
  SPANPROF_TRY {
    for (const EnvironmentVariable& variable : environment_variables) {
      if (groups.size() != 0 && std::find(groups.begin(), groups.end(), variable.group) == groups.end()) continue;
      if (!is_set(variable.name) || (variable.in_effect != nullptr && !variable.in_effect())) continue;
      const char* raw = std::getenv(variable.name);
      std::string why;
      if (variable.parse(raw, settings, why)) continue;
      if (variable.group == EG::pyroscope) {
        settings.pyroscope_refused = true;
        settings.problems.push_back(environment_problem(variable.name, raw, why, "the Pyroscope uploader is off"));
      } else if (variable.group == EG::otlp) {
        settings.otlp_refused = true;
        settings.problems.push_back(environment_problem(variable.name, raw, why, "the OTLP uploader is off"));
      } else {
        settings.problems.push_back(environment_problem(variable.name, raw, why, "using the default"));
      }
    }
  } SPANPROF_CATCH_ALL {
  }
  return settings;
}

inline const EnvironmentVariable* find_environment_variable(std::string_view name) noexcept {
  for (const EnvironmentVariable& variable : environment_variables)
    if (name == variable.name) return &variable;
  return nullptr;
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_ENVIRONMENT_HPP_
