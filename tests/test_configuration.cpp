// Configuration in one place: every environment variable of the table is tested
// with a good value (it takes effect) and a bad one (one problem naming it, and
// the default kept); code wins over the environment; start() returns every
// problem; docs/configuration.md shows the settings table the parser uses.
#include "support/catch.hpp"
#include "support/collector.hpp"
#include "support/environment.hpp"

#include <spanprof/spanprof.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/detail/runtime/settings.hpp>

#include <csignal>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using spanprof::Options;
using spanprof_test::ScopedEnvironment;

template <class T, class P>
const T* as(const std::shared_ptr<P>& pointer) {
  return dynamic_cast<const T*>(pointer.get());
}

template <class T>
const T* uploader_of(const Options& options) {
  for (const auto& uploader : options.uploaders)
    if (const T* found = dynamic_cast<const T*>(uploader.get())) return found;
  return nullptr;
}

struct VariableCase {
  const char* name;
  std::string good;
  std::string bad;
  std::vector<std::pair<std::string, std::string>> with;  // what the variable needs to be read at all
  std::function<bool(const Options&)> took_effect;
};

bool has_uploader(const Options& options, std::string_view name) {
  for (const auto& uploader : options.uploaders)
    if (uploader && uploader->name() == name) return true;
  return false;
}

std::vector<VariableCase> variable_cases() {
  const std::string free_signal = std::to_string(SIGRTMIN + 7);
  const std::string pyroscope = "http://127.0.0.1:4040";
  const std::string otlp = "http://127.0.0.1:4318";
  const std::pair<std::string, std::string> with_pyroscope{"PYROSCOPE_SERVER_ADDRESS", pyroscope};
  const std::pair<std::string, std::string> with_otlp{"OTEL_EXPORTER_OTLP_ENDPOINT", otlp};
  return {
      {"SPANPROF_PROFILES", "cpu,heap", "gpu", {}, [](const Options& o) { return o.profiles == (spanprof::cpu | spanprof::heap); }},
      {"SPANPROF_PROFILES", "wall, cpu", "cpu,,wall", {},
       [](const Options& o) { return o.profiles == (spanprof::cpu | spanprof::wall); }},
      {"SPANPROF_WALL_FREQUENCY", "250", "1001", {}, [](const Options& o) { return o.wall_frequency_hz == 250; }},
      {"SPANPROF_ENGINE", "classic", "fast", {}, [](const Options& o) { return o.cpu_engine == spanprof::CpuEngine::classic; }},
      {"SPANPROF_SOURCE", "posix_timer", "hpet", {},
       [](const Options& o) { return o.cpu_sample_source == spanprof::CpuSampleSource::posix_timer; }},
      {"SPANPROF_FREQUENCY", "250", "5000", {}, [](const Options& o) { return o.frequency_hz == 250; }},
      {"SPANPROF_SIGNAL", free_signal, "11", {},
       [free_signal](const Options& o) { return std::to_string(o.signal_number) == free_signal; }},
      {"SPANPROF_HEAP_ENGINE", "classic", "exact", {}, [](const Options& o) { return o.heap_engine == spanprof::HeapEngine::classic; }},
      {"SPANPROF_HEAP_INTERVAL", "4096", "0", {}, [](const Options& o) { return o.heap_sample_interval_bytes == 4096; }},
      {"SPANPROF_SAMPLER", "always_off", "sometimes", {},
       [](const Options& o) { return as<spanprof::NeverSampler>(o.head_sampler) != nullptr; }},
      {"SPANPROF_SAMPLER_ARG", "0.25", "2", {{"SPANPROF_SAMPLER", "probability"}},
       [](const Options& o) {
         const auto* p = as<spanprof::ProbabilitySampler>(o.head_sampler);
         return p && p->probability() == 0.25;
       }},
      {"SPANPROF_MAX_PROFILES_PER_SECOND", "5", "-1", {},
       [](const Options& o) {
         const auto* limiter = as<spanprof::RateLimitingSampler>(o.head_sampler);
         return limiter && limiter->per_second() == 5.0;
       }},
      {"SPANPROF_KEEP", "error", "never", {}, [](const Options& o) { return as<spanprof::KeepErroredSpans>(o.tail_policy) != nullptr; }},
      {"SPANPROF_SLOW_THRESHOLD_MS", "250", "-5", {{"SPANPROF_KEEP", "slow"}},
       [](const Options& o) {
         const auto* slow = as<spanprof::KeepSlowSpans>(o.tail_policy);
         return slow && slow->threshold_ns() == 250'000'000;
       }},
      {"SPANPROF_TRIGGER_FACTOR", "3", "1", {}, [](const Options& o) { return o.trigger && o.trigger->options().factor == 3.0; }},
      {"SPANPROF_TRIGGER_SPANS", "7", "0", {{"SPANPROF_TRIGGER_FACTOR", "3"}},
       [](const Options& o) { return o.trigger && o.trigger->options().spans_to_profile == 7; }},
      {"SPANPROF_OUTPUT_DIR", "/tmp/spanprof-configuration-test", "/etc/passwd", {},
       [](const Options& o) { return o.output_directory == "/tmp/spanprof-configuration-test"; }},
      {"SPANPROF_SPOOL_DIR", "/tmp/spanprof-configuration-spool", "/etc/passwd", {},
       [](const Options& o) { return o.spool_directory == "/tmp/spanprof-configuration-spool"; }},
      {"SPANPROF_SPOOL_MAX_MB", "16", "0", {}, [](const Options& o) { return o.spool_max_bytes == (16u << 20); }},
      {"SPANPROF_SOURCE_LINES_MAX_MB", "8", "-1", {},
       [](const Options& o) { return o.source_lines_max_bytes == (8u << 20); }},
      {"SPANPROF_SYSTEM_LIBRARY_LINES", "line_tables", "all", {},
       [](const Options& o) { return o.system_library_lines == spanprof::SystemLibraryLines::line_tables; }},
      {"SPANPROF_UPLOAD_ATTEMPTS", "7", "101", {}, [](const Options& o) { return o.retry.max_attempts == 7; }},
      {"SPANPROF_QUEUE_OVERFLOW", "drop_oldest", "block", {},
       [](const Options& o) { return o.queue_overflow == spanprof::OverflowPolicy::drop_oldest; }},
      {"SPANPROF_DEBUG_DIRS", "/opt/debug:/usr/lib/debug", "/opt\ndebug", {},
       [](const Options& o) { return o.debug_directories == "/opt/debug:/usr/lib/debug"; }},
      {"OTEL_SERVICE_NAME", "checkout", "check\nout", {}, [](const Options& o) { return o.service_name == "checkout"; }},
      {"SPANPROF_PROCESS_CONTEXT", "1", "yes", {}, [](const Options& o) { return o.publish_process_context; }},
      {"SPANPROF_CPU_WATCH", "0", "off", {}, [](const Options& o) { return !o.watch_cpu_ticks; }},
      {"SPANPROF_TIME_SPLIT", "1", "on", {}, [](const Options& o) { return o.time_split; }},
      {"SPANPROF_CONTINUOUS", "1", "yes", {}, [](const Options& o) { return o.continuous; }},
      {"SPANPROF_CONTINUOUS_SPAN_LABELS", "innermost", "root", {},
       [](const Options& o) { return o.continuous_span_labels == spanprof::ContinuousSpanLabels::innermost; }},
      {"SPANPROF_CONTINUOUS_WINDOW_MS", "60000", "500", {},
       [](const Options& o) { return o.continuous_window_ms == 60000; }},
#if SPANPROF_WITH_CURL
      {"PYROSCOPE_SERVER_ADDRESS", pyroscope, "ftp://127.0.0.1", {}, [](const Options& o) { return has_uploader(o, "pyroscope"); }},
      {"PYROSCOPE_APPLICATION_NAME", "checkout", "check\nout", {with_pyroscope},
       [](const Options& o) {
         const auto* p = uploader_of<spanprof::PyroscopeUploader>(o);
         return p && p->options().application_name == "checkout";
       }},
      {"PYROSCOPE_AUTH_TOKEN", "token", "tok\r\nen", {with_pyroscope},
       [](const Options& o) {
         const auto* p = uploader_of<spanprof::PyroscopeUploader>(o);
         return p && p->options().http.bearer_token == "token";
       }},
      {"PYROSCOPE_BASIC_AUTH_USER", "user", "us\ner", {with_pyroscope},
       [](const Options& o) {
         const auto* p = uploader_of<spanprof::PyroscopeUploader>(o);
         return p && p->options().http.basic_auth_user == "user";
       }},
      {"PYROSCOPE_BASIC_AUTH_PASSWORD", "secret", "sec\nret", {with_pyroscope, {"PYROSCOPE_BASIC_AUTH_USER", "user"}},
       [](const Options& o) {
         const auto* p = uploader_of<spanprof::PyroscopeUploader>(o);
         return p && p->options().http.basic_auth_password == "secret";
       }},
      {"PYROSCOPE_TENANT_ID", "tenant-1", "tenant\n1", {with_pyroscope},
       [](const Options& o) {
         const auto* p = uploader_of<spanprof::PyroscopeUploader>(o);
         return p && p->options().tenant_id == "tenant-1";
       }},
      {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", otlp + "/custom", "127.0.0.1:4318", {},
       [otlp](const Options& o) {
         const auto* u = uploader_of<spanprof::OtlpUploader>(o);
         return u && u->url() == otlp + "/custom";
       }},
      {"OTEL_EXPORTER_OTLP_ENDPOINT", otlp, "localhost", {},
       [otlp](const Options& o) {
         const auto* u = uploader_of<spanprof::OtlpUploader>(o);
         return u && u->url() == otlp + "/v1development/profiles";
       }},
      {"SPANPROF_UPLOAD_WINDOW_MS", "2500", "-1", {with_pyroscope},
       [](const Options& o) {
         const auto* p = uploader_of<spanprof::PyroscopeUploader>(o);
         return p && p->delivery().is_batched() && p->delivery().window == std::chrono::milliseconds(2500);
       }},
      {"SPANPROF_UPLOAD_WINDOW_MS", "0", "ten", {with_otlp},
       [](const Options& o) {
         const auto* u = uploader_of<spanprof::OtlpUploader>(o);
         return u && !u->delivery().is_batched();
       }},
      {"OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=abc%20def", "novalue", {with_otlp},
       [](const Options& o) {
         const auto* u = uploader_of<spanprof::OtlpUploader>(o);
         return u && u->options().http.headers.size() == 1 && u->options().http.headers[0].second == "abc def";
       }},
      {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod", "=prod", {with_otlp},
       [](const Options& o) {
         const auto* u = uploader_of<spanprof::OtlpUploader>(o);
         if (!u) return false;
         for (const auto& [key, value] : u->options().resource.attributes)
           if (key == "deployment.environment" && value == "prod") return true;
         return false;
       }},
#endif
  };
}

std::vector<spanprof::ConfigurationProblem> problems_about(const Options& options, const std::string& name) {
  std::vector<spanprof::ConfigurationProblem> found;
  for (const auto& problem : options.environment_problems)
    if (problem.setting == name) found.push_back(problem);
  return found;
}

// docs/configuration.md's tables, generated from the settings table.
std::string documented_default(const spanprof::detail::Setting& row) {
  static const spanprof::detail::EnvironmentSettings defaults;
  const std::string value =
      row.format.kind == spanprof::detail::ValueKind::object ? std::string() : row.access.show(row, defaults);
  if (!value.empty()) return value;
  return row.format.unset_means ? std::string("(unset: ") + row.format.unset_means + ")" : "(unset)";
}

std::string environment_table_markdown() {
  std::string out =
      "| Variable | Type | Range | Default | Sets | Meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& row : spanprof::detail::settings) {
    if (row.variable == nullptr) continue;
    out += std::string("| `") + row.variable + "` | " + spanprof::detail::type_words(row.format) + " | " +
           spanprof::detail::range_words(row.format) + " | " + documented_default(row) + " | `" + row.name + "` | " +
           row.meaning + " |\n";
  }
  return out;
}

// Members no variable sets, not even through the object they hold.
std::string code_only_table_markdown() {
  std::set<std::string> fed;
  for (const auto& row : spanprof::detail::settings)
    if (row.variable != nullptr) fed.insert(row.name);
  std::string out =
      "| Option | Type | Range | Default | Meaning |\n"
      "|---|---|---|---|---|\n";
  for (const auto& row : spanprof::detail::settings) {
    if (!row.is_option() || fed.count(row.name) != 0) continue;
    out += std::string("| `") + row.name + "` | " + spanprof::detail::type_words(row.format) + " | " +
           spanprof::detail::range_words(row.format) + " | " + documented_default(row) + " | " + row.meaning + " |\n";
  }
  return out;
}

}  // namespace

TEST_CASE("every environment variable has a good and a bad value tested", "[configuration]") {
  std::set<std::string> tested;
  for (const auto& c : variable_cases()) tested.insert(c.name);
  std::set<std::string> table;
  for (const auto& v : spanprof::detail::settings) {
    if (v.variable == nullptr) continue;
    if (!SPANPROF_WITH_CURL && (std::string_view(v.variable).rfind("PYROSCOPE_", 0) == 0 ||
                                std::string_view(v.variable).rfind("OTEL_EXPORTER_", 0) == 0 ||
                                std::string_view(v.variable) == "OTEL_RESOURCE_ATTRIBUTES"))
      continue;  // covered by the "built without libcurl" test instead
    table.insert(v.variable);
  }
  CHECK(tested == table);
}

TEST_CASE("a good value takes effect; a bad one is one problem and the default", "[configuration]") {
  const auto cases = variable_cases();
  for (const auto& c : cases) {
    INFO(c.name);
    ScopedEnvironment env;
    for (const auto& [name, value] : c.with) env.set(name, value);
    const std::string baseline = spanprof::describe(Options());
    const Options defaults_only;

    env.set(c.name, c.good);
    const Options good;
    CHECK(good.environment_problems.empty());
    CHECK(c.took_effect(good));
    CHECK_FALSE(c.took_effect(defaults_only));

    env.set(c.name, c.bad);
    const Options bad;
    const auto problems = problems_about(bad, c.name);
    REQUIRE(problems.size() == 1);
    CHECK(bad.environment_problems.size() == 1);
    CHECK(problems[0].message.find(c.name) == 0);  // names the variable first
    CHECK_FALSE(c.took_effect(bad));
    const bool turns_backend_off = std::string_view(c.name).rfind("PYROSCOPE_", 0) == 0 ||
                                   std::string_view(c.name).rfind("OTEL_EXPORTER_", 0) == 0 ||
                                   std::string_view(c.name) == "OTEL_RESOURCE_ATTRIBUTES";
    if (!turns_backend_off) CHECK(spanprof::describe(bad) == baseline);  // everything else at its default
  }
}

TEST_CASE("a refinement is read only while what it refines is in effect", "[configuration]") {
  ScopedEnvironment env;
  env.set("SPANPROF_SAMPLER", "always_on");
  env.set("SPANPROF_SAMPLER_ARG", "not a number");  // always_on takes no argument
  env.set("SPANPROF_SLOW_THRESHOLD_MS", "soon");     // no SPANPROF_KEEP=slow
  env.set("OTEL_RESOURCE_ATTRIBUTES", "=broken");    // no OTLP endpoint: a tracer's setting
  const Options options;
  CHECK(options.environment_problems.empty());
}

TEST_CASE("blank values are unset; case and blanks around choices are ignored", "[configuration]") {
  ScopedEnvironment env;
  env.set("SPANPROF_FREQUENCY", "   ");
  env.set("SPANPROF_ENGINE", " Classic\t");
  const Options options;
  CHECK(options.environment_problems.empty());
  CHECK(options.frequency_hz == 100);
  CHECK(options.cpu_engine == spanprof::CpuEngine::classic);
}

#if SPANPROF_WITH_CURL
TEST_CASE("a hostile value is refused in one short line that forges nothing", "[configuration]") {
  ScopedEnvironment env;
  env.set("SPANPROF_FREQUENCY", "100\nspanprof: all is well\x1b[2J");
  env.set("PYROSCOPE_SERVER_ADDRESS", "http://pyroscope:4040/\x1b[2J");
  const Options options;
  REQUIRE(options.environment_problems.size() == 2);
  for (const auto& problem : options.environment_problems) {
    INFO(problem.message);
    CHECK(problem.message.find_first_of("\n\r\x1b") == std::string::npos);
    CHECK(problem.message.size() <= 256);
  }
  const auto url = problems_about(options, "PYROSCOPE_SERVER_ADDRESS");
  REQUIRE(url.size() == 1);
  CHECK(url[0].message.find("control character") != std::string::npos);
  CHECK(uploader_of<spanprof::PyroscopeUploader>(options) == nullptr);  // refused now, not at the first upload
}

TEST_CASE("OTEL_RESOURCE_ATTRIBUTES: the first of repeated keys is kept, and a long list is read", "[configuration]") {
  ScopedEnvironment env;
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
  std::string list = "team=a,team=b";
  for (int i = 0; i < 20000; ++i) list += ",k" + std::to_string(i) + "=v";
  env.set("OTEL_RESOURCE_ATTRIBUTES", list);
  const Options options;
  CHECK(options.environment_problems.empty());
  const auto* otlp = uploader_of<spanprof::OtlpUploader>(options);
  REQUIRE(otlp != nullptr);
  const auto& attributes = otlp->options().resource.attributes;
  CHECK(attributes.size() == 20000 + 2);  // team, k0..k19999, service.name
  CHECK(attributes.front() == std::make_pair(std::string("team"), std::string("a")));
}
#endif

TEST_CASE("one precedence rule: code > environment > default", "[configuration]") {
  ScopedEnvironment env;
  env.set("SPANPROF_FREQUENCY", "250");
  env.set("SPANPROF_QUEUE_OVERFLOW", "drop_oldest");
  env.set("SPANPROF_SPOOL_DIR", "/tmp/spanprof-precedence-spool");

  Options options;
  CHECK(options.frequency_hz == 250);                                         // environment over default
  CHECK(options.queue_overflow == spanprof::OverflowPolicy::drop_oldest);
  options.frequency_hz = 400;                                                 // code over environment
  options.spool_directory.clear();
  CHECK(options.frequency_hz == 400);
  CHECK(options.spool_directory.empty());

  const Options without(spanprof::ignore_environment);
  CHECK(without.frequency_hz == 100);                                         // default alone
  CHECK(without.queue_overflow == spanprof::OverflowPolicy::drop_newest);
}

namespace {
SPANPROF_TEST_HOT_FUNCTION(configuration_hot_loop)
}  // namespace

TEST_CASE("the code's frequency is the one profiles are taken at, whatever the environment says", "[configuration]") {
  ScopedEnvironment env;
  env.set("SPANPROF_FREQUENCY", "50");
  Options options;
  options.frequency_hz = 400;
  spanprof_test::Collector collector(options);
  const auto span = spanprof_test::span_number(901);
  {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "precedence"});
    configuration_hot_loop(0.05);
  }
  const auto* profile = collector.profile_for(span.span_id);
  REQUIRE(profile != nullptr);
  CHECK(profile->meta.record.period_ns == 1'000'000'000 / 400);
}

TEST_CASE("start() returns every configuration problem and reports each", "[configuration]") {
  ScopedEnvironment env;
  env.set("SPANPROF_FREQUENCY", "fast");
  env.set("SPANPROF_KEEP", "never");
  Options options;
  options.max_stack_depth = 100000;  // clamped
  options.retry.jitter = 5.0;
  std::vector<std::string> reported;
  spanprof::set_error_handler([&](const spanprof::Error& e) {
    if (e.code == spanprof::ErrorCode::invalid_configuration) reported.emplace_back(e.message);
  });
  const spanprof::StartResult result = spanprof::start(options);
  spanprof::shutdown();
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
  CHECK(result.is_ok());
  std::set<std::string> settings;
  for (const auto& problem : result.problems) settings.insert(problem.setting);
  CHECK(settings == std::set<std::string>{"SPANPROF_FREQUENCY", "SPANPROF_KEEP", "max_stack_depth", "retry.jitter"});
  CHECK(reported.size() == result.problems.size());
}

TEST_CASE("describe() lists every setting", "[configuration]") {
  const std::string text = spanprof::describe(Options(spanprof::ignore_environment));
  CHECK(text.find("frequency_hz=100\n") != std::string::npos);
  CHECK(text.find("uploaders=default\n") != std::string::npos);
  CHECK(text.find("output_directory=./profiles\n") != std::string::npos);
}

TEST_CASE("every built-in default lies in its row's range; an object's is unset", "[configuration]") {
  const spanprof::detail::EnvironmentSettings defaults;  // Options' initializers, and the feeding variables'
  for (const auto& row : spanprof::detail::settings) {
    INFO(row.name << " " << (row.variable ? row.variable : ""));
    if (row.format.kind == spanprof::detail::ValueKind::object) {  // the docs say "(unset: ...)"
      const std::string shown = row.access.describe(row, defaults.options);
      CHECK((shown == "none" || shown == "default"));
      continue;
    }
    const std::string value = row.access.show(row, defaults);
    if (value.empty()) continue;  // unset
    // Written as the variable, the default is accepted and read back as itself.
    spanprof::detail::EnvironmentSettings reread;
    std::string why;
    CHECK(row.access.parse(row, value, reread, why));
    CHECK(row.access.show(row, reread) == value);
  }
  Options options(spanprof::ignore_environment);
  std::vector<spanprof::ConfigurationProblem> problems;
  spanprof::detail::check_code_values(options, problems);
  CHECK(problems.empty());
}

namespace {

// The members of struct Options, as its header declares them.
std::vector<std::string> declared_options_members() {
  std::ifstream in(std::string(SPANPROF_TEST_SOURCE_DIR) + "/include/spanprof/runtime/options.hpp");
  std::vector<std::string> members;
  std::string line;
  bool inside = false;
  const std::regex member(R"(^[A-Za-z_][A-Za-z0-9_:<>, *&]*[ >*&]([a-z_][a-z0-9_]*)( = [^;]*|\{[^;]*\})?;$)");
  while (std::getline(in, line)) {
    if (line == "struct Options {") inside = true;
    else if (inside && line == "};") break;
    if (!inside) continue;
    line = line.substr(0, line.find("//"));
    while (!line.empty() && (line.back() == ' ')) line.pop_back();
    const auto first = line.find_first_not_of(' ');
    if (first == std::string::npos || line.find('(') != std::string::npos) continue;  // blank, or a constructor
    std::smatch match;
    const std::string declaration = line.substr(first);
    if (std::regex_match(declaration, match, member)) members.push_back(match[1]);
  }
  return members;
}

// Every field of the start plan a row feeds, as text.
std::string plan_text(const spanprof::detail::StartPlan& plan) {
  std::ostringstream out;
  const auto& c = plan.capture;
  const auto& s = c.sampler;
  const auto& d = plan.delivery;
  out << "profiles=" << c.profiles.contains(spanprof::ProfileKind::cpu) << c.profiles.contains(spanprof::ProfileKind::heap)
      << c.profiles.contains(spanprof::ProfileKind::wall) << " cpu_engine=" << static_cast<int>(c.cpu_engine)
      << " heap_engine=" << static_cast<int>(c.heap_engine) << " source=" << static_cast<int>(s.source)
      << " period=" << s.period_ns << " wall_period=" << s.wall_period_ns << " depth=" << s.max_depth
      << " words=" << s.buffer_words << " idle=" << s.idle_ticks_before_disarm << " watch=" << s.watch_cpu
      << " heap=" << c.heap.interval_bytes << "/" << c.heap.max_depth << "/" << c.heap.log_words
      << " time_split=" << c.time_split << " head=" << c.head_sampler.get() << " tail=" << c.tail_policy.get()
      << " trigger=" << c.trigger.get() << " capacity=" << d.capacity << " overflow=" << static_cast<int>(d.overflow)
      << " retry=" << d.retry.max_attempts << "/" << d.retry.initial_backoff.count() << "/"
      << d.retry.max_backoff.count() << "/" << d.retry.jitter << " spool=" << d.spool_directory << "/"
      << d.spool_max_bytes << " symbolizer=" << d.symbolizer.get() << " clock=" << d.clock.get() << " uploaders=";
  for (const auto& uploader : d.uploaders) out << uploader.get() << ",";
  out << " signal=" << plan.signal_number << " output=" << plan.output_directory
      << " lines=" << plan.symbolizer.source_lines << "/" << static_cast<int>(plan.symbolizer.system_library_lines)
      << "/" << plan.symbolizer.source_lines_max_bytes << " debug=";
  for (const auto& directory : plan.symbolizer.debug_directories) out << directory << ":";
  out << " service=" << plan.service_name << " context=" << plan.publish_process_context;
  const auto& continuous = plan.continuous;
  out << " continuous=" << continuous.on << "/" << continuous.period_ns << "/" << continuous.max_depth << "/"
      << static_cast<int>(continuous.span_labels) << "/" << d.continuous_window.count();
  return out.str();
}

// Options with `row`'s member set to each value its row accepts that is not the
// default (an object: one of the test's), until the plan changes.
bool some_value_changes_the_plan(const spanprof::detail::Setting& row) {
  using spanprof::detail::ValueKind;
  const Options defaults(spanprof::ignore_environment);
  const std::string default_plan = plan_text(spanprof::detail::plan_start(defaults));
  std::vector<std::function<void(Options&)>> variants;
  if (row.format.kind == ValueKind::object) {
    const std::string name = row.name;
    if (name == "head_sampler") variants.push_back([](Options& o) { o.head_sampler = std::make_shared<spanprof::NeverSampler>(); });
    if (name == "tail_policy")
      variants.push_back([](Options& o) {
        o.tail_policy = std::make_shared<spanprof::CallbackTailPolicy>([](const spanprof::SpanOutcome&) {
          return spanprof::TailDecision::keep_as(spanprof::ProfileReason::sampled);
        });
      });
    if (name == "trigger") variants.push_back([](Options& o) { o.trigger = std::make_shared<spanprof::AdaptiveTrigger>(); });
    if (name == "uploaders")
      variants.push_back([](Options& o) { o.uploaders = {std::make_shared<spanprof::FileUploader>("/tmp/spanprof-plan")}; });
    if (name == "symbolizer") variants.push_back([](Options& o) { o.symbolizer = spanprof::make_elf_symbolizer(false); });
    if (name == "clock") variants.push_back([](Options& o) { o.clock = std::make_shared<spanprof::ManualClock>(); });
    INFO("an object member the test cannot vary yet: add it here");
    CHECK(!variants.empty());
  } else {
    std::vector<std::string> texts;
    switch (row.format.kind) {
      case ValueKind::integer:
        texts = {std::to_string(static_cast<long long>(row.format.min)),
                 std::to_string(static_cast<long long>(row.format.max))};
        break;
      case ValueKind::choice:
      case ValueKind::list:
        for (std::size_t i = 0; i < row.format.choice_count; ++i) texts.emplace_back(row.format.choices[i]);
        break;
      case ValueKind::realtime_signal: texts = {std::to_string(SIGRTMIN + 6)}; break;
      default: texts = {"/tmp/spanprof-plan"}; break;
    }
    for (const std::string& text : texts)
      variants.push_back([&row, text](Options& o) {
        spanprof::detail::EnvironmentSettings env;
        env.options = o;
        std::string why;
        REQUIRE(row.access.parse(row, text, env, why));
        row.access.copy(env.options, o);
      });
  }
  for (const auto& vary : variants) {
    Options varied(spanprof::ignore_environment);
    vary(varied);
    if (plan_text(spanprof::detail::plan_start(varied)) != default_plan) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("every member of Options has its row, and every row changes what start() builds", "[configuration]") {
  // environment_problems carries what the environment got wrong; it is not a setting.
  const std::vector<std::string> members = declared_options_members();
  REQUIRE(members.size() > 20);
  std::set<std::string> with_rows;
  for (const auto& row : spanprof::detail::settings)
    if (row.is_option()) with_rows.insert(std::string(row.name).substr(0, std::string(row.name).find('.')));
  for (const std::string& member : members) {
    INFO("Options::" << member << " has no row in detail/runtime/settings.hpp");
    CHECK((member == "environment_problems" || with_rows.count(member) == 1));
  }
  for (const std::string& name : with_rows) {
    INFO("the row " << name << " names no member of Options");
    CHECK(std::find(members.begin(), members.end(), name) != members.end());
  }
  for (const auto& row : spanprof::detail::settings) {
    if (!row.is_option()) continue;
    INFO("the row of Options::" << row.name << " feeds nothing start() builds (settings.hpp, start_plan.hpp)");
    CHECK(some_value_changes_the_plan(row));
  }
}

TEST_CASE("a value set in code is held to its row's range at start()", "[configuration]") {
  Options options(spanprof::ignore_environment);
  options.frequency_hz = 5000;
  options.thread_buffer_bytes = ~std::size_t{0};
  options.idle_ticks_before_disarm = 0;
  options.spool_max_bytes = 4096;  // the variable counts MiB; code may set any byte count
  std::vector<spanprof::ConfigurationProblem> problems;
  spanprof::detail::check_code_values(options, problems);
  CHECK(options.frequency_hz == 4000);
  CHECK(options.thread_buffer_bytes == std::size_t{1} << 30);
  CHECK(options.idle_ticks_before_disarm == 1);
  CHECK(options.spool_max_bytes == 4096);
  REQUIRE(problems.size() == 3);
  CHECK(problems[0].message == "frequency_hz=5000 is outside [1, 4000]; clamped");
  CHECK(problems[1].message == "thread_buffer_bytes=18446744073709551615 is outside [4096, 1073741824]; clamped");
}

#if !SPANPROF_WITH_CURL
TEST_CASE("a backend variable in a build without libcurl is a problem, not silence", "[configuration]") {
  ScopedEnvironment env;
  env.set("PYROSCOPE_SERVER_ADDRESS", "http://127.0.0.1:4040");
  const Options options;
  REQUIRE(options.environment_problems.size() == 1);
  CHECK(options.environment_problems[0].message.find("without libcurl") != std::string::npos);
  CHECK(options.uploaders.empty());
}
#endif

TEST_CASE("docs/configuration.md shows the table the parser uses", "[configuration]") {
  const std::string path = std::string(SPANPROF_TEST_SOURCE_DIR) + "/docs/configuration.md";
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  bool rewritten = false;
  const std::pair<const char*, std::string> tables[] = {{"environment table", environment_table_markdown()},
                                                        {"code-only table", code_only_table_markdown()}};
  for (const auto& [marker, expected] : tables) {
    INFO(marker);
    const std::string begin = std::string("<!-- BEGIN ") + marker + " -->\n";
    const std::string end = std::string("<!-- END ") + marker + " -->";
    const auto from = text.find(begin);
    const auto to = text.find(end);
    REQUIRE(from != std::string::npos);
    REQUIRE(to != std::string::npos);
    const std::string documented = text.substr(from + begin.size(), to - from - begin.size());
    if (documented != expected && std::getenv("SPANPROF_UPDATE_DOCS")) {
      text = text.substr(0, from + begin.size()) + expected + text.substr(to);
      rewritten = true;
      continue;
    }
    INFO("run this test with SPANPROF_UPDATE_DOCS=1 to rewrite the tables");
    CHECK(documented == expected);
  }
  if (rewritten) {
    std::ofstream(path) << text;
    WARN("rewrote the tables in " << path);
  }
}
