// Every setting of spanprof, declared once: the members of Options in the order of
// the struct, each with its environment variable (or none), the form and range of
// its value and its meaning; after an object member (the head sampler, the tail
// policy, the trigger, the uploaders), the variables spanprof builds it from.
//
// Defaults are not repeated here: a member's is its initializer in Options, a
// feeding variable's is EnvironmentSettings' (environment.hpp). From this table:
//   read_environment()    reads and checks every variable (nothing else calls getenv)
//   apply_environment()   copies the accepted values onto Options (options-inl.hpp)
//   describe()            prints every member, in this order
//   check_code_values()   clamps a value set in code to its range, at start()
//   plan_start()          what start() builds everything from: each member of Options
//                         fed, as the runtime reads it, by its row (start_plan.hpp)
//   docs/configuration.md its two tables are generated from this one, and a test
//                         fails when they differ (tests/test_configuration.cpp)
//   the fuzz target       feeds every variable and checks values against the ranges
//
// A new scalar option: its member in Options, its row here with what it feeds, and
// the docs regenerated (SPANPROF_UPDATE_DOCS=1 on the configuration test); the test
// of every variable asks for a good and a bad value, and the test of every member
// that it has a row and that its row changes the plan.
#ifndef SPANPROF_DETAIL_RUNTIME_SETTINGS_HPP_
#define SPANPROF_DETAIL_RUNTIME_SETTINGS_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/detail/capture/stack_sampler.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/runtime/environment.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/detail/runtime/setting.hpp>
#include <spanprof/detail/runtime/start_plan.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// ---- names, in the order of the enumerators they stand for --------------------------

inline constexpr const char* profile_kind_names[] = {"cpu", "heap", "wall", "lock"};
inline constexpr const char* engine_names[] = {"sampling", "classic"};  // CpuEngine, HeapEngine
inline constexpr const char* cpu_sample_source_names[] = {"automatic", "perf_event", "posix_timer"};
inline constexpr const char* overflow_policy_names[] = {"drop_newest", "drop_oldest"};
inline constexpr const char* system_library_lines_names[] = {"none", "line_tables", "inlined_functions"};
inline constexpr const char* continuous_span_labels_names[] = {"local_root", "innermost", "none"};
// The head samplers, named as OpenTelemetry names its trace samplers.
inline constexpr const char* head_sampler_names[] = {"always_on",   "always_off", "traceidratio", "probability",
                                                     "parentbased_always_on", "parentbased_traceidratio"};
inline constexpr const char* keep_rules[] = {"all", "slow", "error", "slow,error", "error,slow"};

template <class Enum, std::size_t N>
constexpr bool names_match(const char* const (&names)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (to_string(static_cast<Enum>(i)) != names[i]) return false;
  return true;
}
static_assert(names_match<ProfileKind>(profile_kind_names) && names_match<CpuEngine>(engine_names) &&
                  names_match<HeapEngine>(engine_names) && names_match<CpuSampleSource>(cpu_sample_source_names) &&
                  names_match<SystemLibraryLines>(system_library_lines_names) &&
                  names_match<ContinuousSpanLabels>(continuous_span_labels_names),
              "describe() and the variables spell an enumerator as to_string() does");

// The stack sampler's own bound. Compiled out (SPANPROF_ENABLED=0) there is no
// sampler: the option is never applied, only described.
#if SPANPROF_ENABLED
inline constexpr int deepest_stack_kept = max_stack_depth_limit;
#else
inline constexpr int deepest_stack_kept = 256;
#endif

// ---- when a refining variable is read ---------------------------------------------------

inline bool sampler_takes_argument() noexcept {
  return environment_is_one_of("SPANPROF_SAMPLER", {"traceidratio", "probability", "parentbased_traceidratio"});
}
inline bool keeps_slow_spans() noexcept {
  return environment_is_one_of("SPANPROF_KEEP", {"slow", "slow,error", "error,slow"});
}
inline bool trigger_is_on() noexcept { return is_set("SPANPROF_TRIGGER_FACTOR"); }
inline bool pyroscope_is_on() noexcept { return is_set("PYROSCOPE_SERVER_ADDRESS"); }
inline bool otlp_is_on() noexcept {
  return is_set("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") || is_set("OTEL_EXPORTER_OTLP_ENDPOINT");
}
inline bool a_backend_is_on() noexcept { return pyroscope_is_on() || otlp_is_on(); }

// ---- the table ----------------------------------------------------------------------

using EG = EnvironmentGroup;
using ES = EnvironmentSettings;

inline constexpr Setting settings[] = {
    // ---- what is recorded
    setting<&Options::profiles>(
        "profiles", "SPANPROF_PROFILES", EG::capture, format::list_of(profile_kind_names),
        "What a guard records unless its code says otherwise.")
        .feeds([](const Options& o, StartPlan& p) { p.capture.profiles = o.profiles; }),
    setting<&Options::cpu_engine>(
        "cpu_engine", "SPANPROF_ENGINE", EG::capture, format::choice(engine_names),
        "The CPU engine: per-thread sampling, or gperftools' ProfilerStart/Stop around each scope.")
        .feeds([](const Options& o, StartPlan& p) { p.capture.cpu_engine = o.cpu_engine; }),
    setting<&Options::heap_engine>(
        "heap_engine", "SPANPROF_HEAP_ENGINE", EG::capture, format::choice(engine_names),
        "The heap engine: sampled allocation hooks, or gperftools' heap profiler around each scope.")
        .feeds([](const Options& o, StartPlan& p) { p.capture.heap_engine = o.heap_engine; }),
    setting<&Options::cpu_sample_source>(
        "cpu_sample_source", "SPANPROF_SOURCE", EG::capture, format::choice(cpu_sample_source_names),
        "Where the sampling engine's CPU ticks come from, for spans and the continuous profile; automatic: "
        "posix_timer, perf_event for a thread that runs a millisecond of CPU or more per context switch "
        "(docs/engines.md).")
        .feeds([](const Options& o, StartPlan& p) { p.capture.sampler.source = p.continuous.source = o.cpu_sample_source; }),
    setting<&Options::frequency_hz>(
        "frequency_hz", "SPANPROF_FREQUENCY", EG::capture, format::integer(1, 4000, "Hz"),
        "CPU samples per CPU-second of a profiled thread.")
        .feeds([](const Options& o, StartPlan& p) {
          p.capture.sampler.period_ns = p.continuous.period_ns = 1'000'000'000LL / o.frequency_hz;
        }),
    setting<&Options::wall_frequency_hz>(
        "wall_frequency_hz", "SPANPROF_WALL_FREQUENCY", EG::capture, format::integer(1, 1000, "Hz"),
        "Wall-clock samples per second of a thread in a wall-profiled span.")
        .feeds([](const Options& o, StartPlan& p) {
          p.capture.sampler.wall_period_ns = 1'000'000'000LL / o.wall_frequency_hz;
        }),
    setting<&Options::max_stack_depth>(
        "max_stack_depth", nullptr, EG::capture, format::integer(1, deepest_stack_kept, "frames"),
        "Frames kept per sample.")
        .feeds([](const Options& o, StartPlan& p) {
          p.capture.sampler.max_depth = p.capture.heap.max_depth = p.continuous.max_depth = o.max_stack_depth;
        }),
    setting<&Options::heap_sample_interval_bytes>(
        "heap_sample_interval_bytes", "SPANPROF_HEAP_INTERVAL", EG::capture,
        format::integer(1, std::int64_t{1} << 30, "bytes"),
        "Mean allocated bytes between two heap samples.")
        .feeds([](const Options& o, StartPlan& p) {
          p.capture.heap.interval_bytes = static_cast<std::int64_t>(o.heap_sample_interval_bytes);
        }),
    setting<&Options::thread_buffer_bytes>(
        "thread_buffer_bytes", nullptr, EG::capture, format::integer(4096, std::int64_t{1} << 30, "bytes"),
        "Per profiling thread: the samples of its open spans.")
        .feeds([](const Options& o, StartPlan& p) {
          p.capture.sampler.buffer_words = p.capture.heap.log_words = o.thread_buffer_bytes / sizeof(std::uint64_t);
        }),
    setting<&Options::signal_number>(
        "signal_number", "SPANPROF_SIGNAL", EG::capture, format::realtime_signal(),
        "The signal that carries CPU samples; 0 picks the first free one from SIGRTMIN+4.")
        .feeds([](const Options& o, StartPlan& p) { p.signal_number = o.signal_number; }),
    setting<&Options::idle_ticks_before_disarm>(
        "idle_ticks_before_disarm", nullptr, EG::capture, format::integer(1, std::int64_t{1} << 30, "ticks"),
        "An idle thread's sampler disarms after this many ticks with no open span.")
        .feeds([](const Options& o, StartPlan& p) {
          p.capture.sampler.idle_ticks_before_disarm = o.idle_ticks_before_disarm;
        }),
    setting<&Options::watch_cpu_ticks>(
        "watch_cpu_ticks", "SPANPROF_CPU_WATCH", EG::capture, format::integer(0, 1),
        "0: the POSIX timer alone; 1 (default): the ticker sends its points the kernel is late with, and a span's edges take "
        "those it passed (each span right under load).")
        .feeds([](const Options& o, StartPlan& p) { p.capture.sampler.watch_cpu = o.watch_cpu_ticks; }),
    setting<&Options::time_split>(
        "time_split", "SPANPROF_TIME_SPLIT", EG::capture, format::integer(0, 1),
        "1: each profiled span's elapsed time split into running, waiting for a CPU and blocked, with its context "
        "switches (three system calls at the open and the close, a few µs a span).")
        .feeds([](const Options& o, StartPlan& p) { p.capture.time_split = o.time_split; }),

    // ---- the whole process, all the time (docs/continuous.md)
    setting<&Options::continuous>(
        "continuous", "SPANPROF_CONTINUOUS", EG::capture, format::integer(0, 1),
        "1: every thread of the process sampled on its own CPU clock, in a span or not: one CPU profile of the "
        "process per window, each sample taken in a span labelled with it.")
        .feeds([](const Options& o, StartPlan& p) { p.continuous.on = o.continuous; }),
    setting<&Options::continuous_span_labels>(
        "continuous_span_labels", "SPANPROF_CONTINUOUS_SPAN_LABELS", EG::capture,
        format::choice(continuous_span_labels_names),
        "Which open span labels a continuous sample: the thread's outermost (local_root: a request's own span), the "
        "innermost, or none.")
        .feeds([](const Options& o, StartPlan& p) { p.continuous.span_labels = o.continuous_span_labels; }),
    setting<&Options::continuous_window_ms>(
        "continuous_window_ms", "SPANPROF_CONTINUOUS_WINDOW_MS", EG::capture, format::integer(1000, 3'600'000, "ms"),
        "The continuous profile's window, aligned to the wall clock.")
        .feeds([](const Options& o, StartPlan& p) {
          p.delivery.continuous_window = std::chrono::milliseconds(o.continuous_window_ms);
        }),

    // ---- which spans are profiled (docs/sampling.md)
    setting<&Options::head_sampler>(
        "head_sampler", nullptr, EG::head_sampler, format::object("every span"),
        "Decides when a guard opens.")
        .feeds([](const Options& o, StartPlan& p) { p.capture.head_sampler = o.head_sampler; }),
    setting<&ES::head_sampler>(
        "head_sampler", "SPANPROF_SAMPLER", EG::head_sampler, format::choice(head_sampler_names, "every span"),
        "The head sampler, named as OpenTelemetry names its trace samplers."),
    setting<&ES::head_sampler_argument>(
        "head_sampler", "SPANPROF_SAMPLER_ARG", EG::head_sampler, format::decimal(0, 1),
        "The ratio or probability of SPANPROF_SAMPLER's traceidratio, probability and parentbased_traceidratio.",
        sampler_takes_argument),
    setting<&ES::max_profiles_per_second>(
        "head_sampler", "SPANPROF_MAX_PROFILES_PER_SECOND", EG::head_sampler,
        format::decimal_above(0, std::numeric_limits<double>::infinity(), "no limit"),
        "At most this many profiled spans a second (burst max(1, rate)), after SPANPROF_SAMPLER said yes."),
    setting<&Options::tail_policy>(
        "tail_policy", nullptr, EG::tail_policy, format::object("keep all"),
        "Keeps or discards what was recorded when a span closes.")
        .feeds([](const Options& o, StartPlan& p) { p.capture.tail_policy = o.tail_policy; }),
    setting<&ES::keep>(
        "tail_policy", "SPANPROF_KEEP", EG::tail_policy, format::choice(keep_rules),
        "The tail policy: which recorded profiles are kept when the span ends."),
    setting<&ES::slow_threshold_ms>(
        "tail_policy", "SPANPROF_SLOW_THRESHOLD_MS", EG::tail_policy, format::integer(0, 86'400'000, "ms"),
        "A span at least this long is slow, for SPANPROF_KEEP=slow.", keeps_slow_spans),
    setting<&Options::trigger>(
        "trigger", nullptr, EG::trigger, format::object("off"),
        "Profiles the next spans of a name whose latency jumped.")
        .feeds([](const Options& o, StartPlan& p) { p.capture.trigger = o.trigger; }),
    setting<&ES::trigger_factor>(
        "trigger", "SPANPROF_TRIGGER_FACTOR", EG::trigger, format::decimal_above(1, 1000, "off"),
        "Turns the adaptive trigger on: a span name whose latency exceeds this factor of its normal is profiled."),
    setting<&ES::trigger_spans>(
        "trigger", "SPANPROF_TRIGGER_SPANS", EG::trigger, format::integer(1, 1000),
        "How many spans of that name the adaptive trigger profiles each time it arms.", trigger_is_on),

    // ---- where profiles go (docs/delivery.md)
    setting<&Options::uploaders>(
        "uploaders", nullptr, EG::delivery, format::object("a FileUploader into output_directory"),
        "Where finished profiles are sent.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.uploaders = o.uploaders; }),
    setting<&ES::upload_window_ms>(
        "uploaders", "SPANPROF_UPLOAD_WINDOW_MS", EG::delivery, format::integer(0, 600'000, "ms"),
        "Pyroscope and OTLP from the environment merge kept spans into one profile per kind per window this long; "
        "0: one per span.", a_backend_is_on),
    setting<&ES::pyroscope_server_address>(
        "uploaders", "PYROSCOPE_SERVER_ADDRESS", EG::pyroscope, format::url("off"),
        "Turns on the Pyroscope uploader (needs libcurl), e.g. http://pyroscope:4040."),
    setting<&ES::pyroscope_application_name>(
        "uploaders", "PYROSCOPE_APPLICATION_NAME", EG::pyroscope, format::text("OTEL_SERVICE_NAME, else spanprof"),
        "The Pyroscope application (series name).", pyroscope_is_on),
    setting<&ES::pyroscope_auth_token>(
        "uploaders", "PYROSCOPE_AUTH_TOKEN", EG::pyroscope, format::text(),
        "Sent as Authorization: Bearer <token>.", pyroscope_is_on),
    setting<&ES::pyroscope_basic_auth_user>(
        "uploaders", "PYROSCOPE_BASIC_AUTH_USER", EG::pyroscope, format::text(),
        "Basic authentication user (Grafana Cloud: the stack's user id).", pyroscope_is_on),
    setting<&ES::pyroscope_basic_auth_password>(
        "uploaders", "PYROSCOPE_BASIC_AUTH_PASSWORD", EG::pyroscope, format::text(),
        "Basic authentication password; needs PYROSCOPE_BASIC_AUTH_USER.", pyroscope_is_on),
    setting<&ES::pyroscope_tenant_id>(
        "uploaders", "PYROSCOPE_TENANT_ID", EG::pyroscope, format::text(),
        "Sent as X-Scope-OrgID, for multi-tenant Pyroscope.", pyroscope_is_on),
    setting<&ES::otlp_profiles_endpoint>(
        "uploaders", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", EG::otlp, format::url(),
        "Turns on the OTLP uploader (needs libcurl); the full URL profiles are posted to."),
    setting<&ES::otlp_endpoint>(
        "uploaders", "OTEL_EXPORTER_OTLP_ENDPOINT", EG::otlp, format::url(),
        "Turns on the OTLP uploader (needs libcurl); /v1development/profiles is appended."),
    setting<&ES::otlp_headers>(
        "uploaders", "OTEL_EXPORTER_OTLP_HEADERS", EG::otlp, format::key_values(),
        "Extra headers on every OTLP request.", otlp_is_on),
    setting<&ES::resource_attributes>(
        "uploaders", "OTEL_RESOURCE_ATTRIBUTES", EG::otlp, format::key_values(),
        "Resource attributes of OTLP profiles; OTEL_SERVICE_NAME wins over a service.name here.", otlp_is_on),
    setting<&Options::output_directory>(
        "output_directory", "SPANPROF_OUTPUT_DIR", EG::delivery, format::directory(),
        "Where the default file uploader writes; set alongside a backend, files are written too.")
        .feeds([](const Options& o, StartPlan& p) { p.output_directory = o.output_directory; }),
    setting<&Options::queue_capacity>(
        "queue_capacity", nullptr, EG::delivery, format::integer(1, std::int64_t{1} << 20, "profiles"),
        "Finished profiles waiting in the hand-off; also the sender's outbox, in items.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.capacity = o.queue_capacity; }),
    setting<&Options::queue_overflow>(
        "queue_overflow", "SPANPROF_QUEUE_OVERFLOW", EG::delivery, format::choice(overflow_policy_names),
        "Which profile a full hand-off queue drops; a request thread never waits.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.overflow = o.queue_overflow; }),
    setting<&Options::retry, &RetryPolicy::max_attempts>(
        "retry.max_attempts", "SPANPROF_UPLOAD_ATTEMPTS", EG::delivery, format::integer(1, 100),
        "Attempts per profile and uploader for a retryable failure, the first included.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.retry = o.retry; }),
    setting<&Options::spool_directory>(
        "spool_directory", "SPANPROF_SPOOL_DIR", EG::delivery, format::directory("no spool"),
        "Where profiles an uploader could not deliver wait to be re-sent, also after a restart.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.spool_directory = o.spool_directory; }),
    setting<&Options::spool_max_bytes>(
        "spool_max_bytes", "SPANPROF_SPOOL_MAX_MB", EG::delivery, format::mebibytes(1, std::int64_t{1} << 20),
        "The spool's size bound; the oldest profiles are dropped first.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.spool_max_bytes = o.spool_max_bytes; }),
    setting<&Options::symbolizer>(
        "symbolizer", nullptr, EG::delivery, format::object("ELF symbol tables of the process"),
        "Turns addresses into function names (docs/uploaders.md).")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.symbolizer = o.symbolizer; }),
    setting<&Options::debug_directories>(
        "debug_directories", "SPANPROF_DEBUG_DIRS", EG::delivery, format::text(),
        "Where the default symbolizer finds separate debug files by build id (DIR/.build-id/), colon-separated.")
        .feeds([](const Options& o, StartPlan& p) {
          p.symbolizer.debug_directories = split_directory_list(o.debug_directories);
        }),
    setting<&Options::source_lines_max_bytes>(
        "source_lines_max_bytes", "SPANPROF_SOURCE_LINES_MAX_MB", EG::delivery,
        format::mebibytes(1, std::int64_t{1} << 20),
        "What the source lines of all objects may keep; past it, the least recently used lose lines, keep names.")
        .feeds([](const Options& o, StartPlan& p) { p.symbolizer.source_lines_max_bytes = o.source_lines_max_bytes; }),
    setting<&Options::system_library_lines>(
        "system_library_lines", "SPANPROF_SYSTEM_LIBRARY_LINES", EG::delivery, format::choice(system_library_lines_names),
        "How much of a system library's debug file is read: names only, line tables (file and line), or all of it.")
        .feeds([](const Options& o, StartPlan& p) { p.symbolizer.system_library_lines = o.system_library_lines; }),
    setting<&Options::service_name>(
        "service_name", "OTEL_SERVICE_NAME", EG::service, format::text(),
        "The service: a comment in every profile, Pyroscope's application name and OTLP's service.name.")
        .feeds([](const Options& o, StartPlan& p) { p.service_name = o.service_name; }),
    setting<&Options::publish_process_context>(
        "publish_process_context", "SPANPROF_PROCESS_CONTEXT", EG::service, format::integer(0, 1),
        "1: publish the process context (OTEP 4719, a mapping named OTEL_CTX) for profilers outside the process.")
        .feeds([](const Options& o, StartPlan& p) { p.publish_process_context = o.publish_process_context; }),
    setting<&Options::clock>(
        "clock", nullptr, EG::delivery, format::object("the monotonic clock"),
        "The time batch windows, retry backoff and spool re-sends run on; tests give a ManualClock.")
        .feeds([](const Options& o, StartPlan& p) { p.delivery.clock = o.clock; }),
};

constexpr bool same_text(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

// Every format fits its member, a variable is named once, a member is described by
// one row, and a member's row (only a member's) feeds the plan.
constexpr bool table_is_consistent() {
  for (const Setting& row : settings) {
    if (!format_fits(row) || row.is_option() != row.feeds_plan) return false;
    for (const Setting& other : settings) {
      if (&other == &row) continue;
      if (row.variable && other.variable && same_text(row.variable, other.variable)) return false;
      if (row.is_option() && other.is_option() && same_text(row.name, other.name)) return false;
    }
  }
  return true;
}
static_assert(table_is_consistent(),
              "a row's format does not fit its member, a variable or member is listed twice, or a member's row "
              "feeds nothing (or a variable's row feeds the plan itself)");

// What start() builds the running configuration, the delivery threads, the default
// uploader and the default symbolizer from.
inline StartPlan plan_start(const Options& options) {
  StartPlan plan;
  for (const Setting& row : settings)
    if (row.feeds_plan) row.feed(options, plan);
  return plan;
}

// ---- walking the table ----------------------------------------------------------------

inline const Setting* find_variable(std::string_view variable) noexcept {
  for (const Setting& row : settings)
    if (row.variable != nullptr && variable == row.variable) return &row;
  return nullptr;
}

inline bool variable_accepted(const EnvironmentSettings& env, std::string_view variable) noexcept {
  for (const Setting* row : env.accepted)
    if (variable == row->variable) return true;
  return false;
}

// Reads every variable of the given groups (all by default). Never throws: out of
// memory leaves what was read so far.
inline EnvironmentSettings read_environment(std::initializer_list<EnvironmentGroup> groups = {}) noexcept {
  EnvironmentSettings env;
  SPANPROF_TRY {
    for (const Setting& row : settings) {
      if (row.variable == nullptr) continue;
      if (groups.size() != 0 && std::find(groups.begin(), groups.end(), row.group) == groups.end()) continue;
      if (!is_set(row.variable) || (row.in_effect != nullptr && !row.in_effect())) continue;
      const char* raw = std::getenv(row.variable);
      std::string why;
      if (row.access.parse(row, raw, env, why)) {
        env.accepted.push_back(&row);
        continue;
      }
      if (row.group == EG::pyroscope) {
        env.pyroscope_refused = true;
        env.problems.push_back(environment_problem(row.variable, raw, why, "the Pyroscope uploader is off"));
      } else if (row.group == EG::otlp) {
        env.otlp_refused = true;
        env.problems.push_back(environment_problem(row.variable, raw, why, "the OTLP uploader is off"));
      } else {
        env.problems.push_back(environment_problem(row.variable, raw, why, "using the default"));
      }
    }
  } SPANPROF_CATCH_ALL {
  }
  return env;
}

// A value set in code outside its row's range is one problem, and clamped (a bad
// signal: a free one is picked).
inline void check_code_values(Options& options, std::vector<ConfigurationProblem>& problems) {
  for (const Setting& row : settings)
    if (row.access.check_in_code != nullptr) row.access.check_in_code(row, options, problems);
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_RUNTIME_SETTINGS_HPP_
