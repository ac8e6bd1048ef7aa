// Everything that can be configured, with defaults meant for production.
//
// One precedence rule for every setting: code > environment > built-in default.
//
//   spanprof::Options options;      // built-in defaults, overlaid with the environment
//   options.frequency_hz = 250;     // code wins over SPANPROF_FREQUENCY
//   spanprof::start(options);       // reports every problem, and returns them
//
// Options(spanprof::ignore_environment) starts from the built-in defaults alone.
// The variables, their ranges and defaults: runtime/environment.hpp and
// docs/configuration.md.
#ifndef SPANPROF_RUNTIME_OPTIONS_HPP_
#define SPANPROF_RUNTIME_OPTIONS_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/capture/engines.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/backend_options.hpp>
#include <spanprof/delivery/delivery_policy.hpp>
#include <spanprof/delivery/file_uploader.hpp>
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/runtime/environment.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

struct IgnoreEnvironment {
  explicit constexpr IgnoreEnvironment() = default;
};
inline constexpr IgnoreEnvironment ignore_environment{};

struct Options {
  // The built-in defaults, overlaid with every variable the environment sets.
  Options() noexcept;
  // The built-in defaults alone.
  explicit Options(IgnoreEnvironment) noexcept {}

  // ---- what is recorded ------------------------------------------------------------
  ProfileKinds profiles = cpu;  // what a guard records unless it says otherwise
  CpuEngine cpu_engine = CpuEngine::sampling;
  HeapEngine heap_engine = HeapEngine::sampling;
  CpuSampleSource cpu_sample_source = CpuSampleSource::automatic;
  int frequency_hz = 100;     // CPU samples per CPU-second (1..4000)
  // Wall-clock samples per second of a thread in a wall-profiled span (1..1000).
  // Its cost grows with the threads in wall spans, not the cores (docs/wall.md).
  int wall_frequency_hz = 100;
  int max_stack_depth = 64;   // frames kept per sample (1..256)
  // Mean allocated bytes between two heap samples (exponentially distributed, as in
  // Go and tcmalloc). Smaller is more precise and costs more stack captures.
  std::size_t heap_sample_interval_bytes = 512 * 1024;
  // Per profiling thread; holds the samples of its open spans. At 100 Hz and ~25
  // frames a sample this is over two minutes of CPU inside one span.
  std::size_t thread_buffer_bytes = 512 * 1024;
  // Real-time signal that carries samples. 0 picks a free one from SIGRTMIN+4 up.
  // SIGPROF is left to gperftools so the classic engine and CPUPROFILE keep working.
  int signal_number = 0;
  // A thread whose sampler fired this many times with no open span disarms it
  // (re-armed by its next guard): idle threads stop paying for signals.
  std::uint32_t idle_ticks_before_disarm = 200;

  // ---- which spans are profiled (docs/sampling.md) -----------------------------------
  // The head sampler decides when a guard opens (null: every span); the tail policy,
  // when it closes, keeps or discards what was recorded (null: keep all); the
  // adaptive trigger profiles the next spans of a name whose latency jumped (null: off).
  std::shared_ptr<HeadSampler> head_sampler;
  std::shared_ptr<TailPolicy> tail_policy;
  std::shared_ptr<AdaptiveTrigger> trigger;

  // ---- where profiles go (docs/delivery.md) ------------------------------------------
  std::vector<std::shared_ptr<Uploader>> uploaders;  // empty: a FileUploader into output_directory
  std::string output_directory = FileUploader::default_directory;
  std::size_t queue_capacity = 256;  // finished profiles waiting in the hand-off, and items in the sender's outbox
  OverflowPolicy queue_overflow = OverflowPolicy::drop_newest;
  RetryPolicy retry;
  // Where profiles an uploader could not deliver wait to be re-sent (also after a
  // restart), bounded; the oldest are dropped first. Empty: no spool.
  std::string spool_directory;
  std::uint64_t spool_max_bytes = 256u << 20;
  std::shared_ptr<Symbolizer> symbolizer;  // null: ELF symbol tables of the process
  std::string service_name;  // recorded in every profile as a comment

  // What the environment got wrong when these options were made; start() reports
  // each and returns them with its own findings.
  std::vector<ConfigurationProblem> environment_problems;
};

namespace detail {

inline std::shared_ptr<HeadSampler> make_head_sampler(const EnvironmentSettings& env) {
  const std::string& name = env.head_sampler;
  const double argument = env.head_sampler_argument.value_or(1.0);
  std::vector<std::shared_ptr<HeadSampler>> stages;  // ANDed in order
  if (name == "always_off") return std::make_shared<NeverSampler>();
  if (name == "traceidratio") stages.push_back(std::make_shared<TraceIdRatioSampler>(argument));
  if (name == "probability") stages.push_back(std::make_shared<ProbabilitySampler>(argument));
  if (name == "parentbased_always_on" || name == "parentbased_traceidratio")
    stages.push_back(std::make_shared<ParentSampledSampler>());
  if (name == "parentbased_traceidratio") stages.push_back(std::make_shared<TraceIdRatioSampler>(argument));
  // Last, so the limit is charged only for spans the sampler accepted.
  if (env.max_profiles_per_second) {
    const double rate = *env.max_profiles_per_second;
    stages.push_back(std::make_shared<RateLimitingSampler>(rate, rate > 1.0 ? rate : 1.0));
  }
  if (stages.empty()) return name == "always_on" ? std::make_shared<AlwaysSampler>() : nullptr;
  if (stages.size() == 1) return std::move(stages.front());
  return std::make_shared<AllOfSampler>(std::move(stages));
}

inline std::shared_ptr<TailPolicy> make_tail_policy(const EnvironmentSettings& env) {
  if (env.keep.empty() || env.keep == "all") return nullptr;
  auto slow = std::make_shared<KeepSlowSpans>(std::chrono::milliseconds(env.slow_threshold_ms.value_or(100)));
  auto errors = std::make_shared<KeepErroredSpans>();
  if (env.keep == "slow") return slow;
  if (env.keep == "error") return errors;
  if (env.keep == "slow,error") return keep_any_of({slow, errors});
  return keep_any_of({errors, slow});
}

inline std::shared_ptr<AdaptiveTrigger> make_trigger(const EnvironmentSettings& env) {
  if (!env.trigger_factor) return nullptr;
  AdaptiveTriggerOptions trigger;
  trigger.factor = *env.trigger_factor;
  if (env.trigger_spans) trigger.spans_to_profile = *env.trigger_spans;
  return std::make_shared<AdaptiveTrigger>(trigger);
}

inline void refuse_without_curl(const char* variable, EnvironmentSettings& env) {
  env.problems.push_back({variable, std::string(variable) +
                                        " is set, but spanprof was built without libcurl (SPANPROF_WITH_CURL=0); "
                                        "that uploader is off"});
}

inline std::vector<std::shared_ptr<Uploader>> make_uploaders(EnvironmentSettings& env) {
  std::vector<std::shared_ptr<Uploader>> uploaders;
  Delivery delivery = Delivery::batched();
  if (env.upload_window_ms) {
    delivery = *env.upload_window_ms == 0 ? Delivery::per_span()
                                          : Delivery::batched(std::chrono::milliseconds(*env.upload_window_ms));
  }
  if (!env.pyroscope_server_address.empty() && !env.pyroscope_refused) {
    PyroscopeOptions options;
    options.server_address = env.pyroscope_server_address;
    options.application_name =
        env.pyroscope_application_name.empty() ? env.service_name : env.pyroscope_application_name;
    options.tenant_id = env.pyroscope_tenant_id;
    options.delivery = delivery;
    options.http.bearer_token = env.pyroscope_auth_token;
    options.http.basic_auth_user = env.pyroscope_basic_auth_user;
    options.http.basic_auth_password = env.pyroscope_basic_auth_password;
    if (!options.http.basic_auth_password.empty() && options.http.basic_auth_user.empty()) {
      env.problems.push_back({"PYROSCOPE_BASIC_AUTH_PASSWORD",
                              "PYROSCOPE_BASIC_AUTH_PASSWORD is set without PYROSCOPE_BASIC_AUTH_USER; the Pyroscope "
                              "uploader is off"});
    } else if (!SPANPROF_WITH_CURL && SPANPROF_ENABLED) {
      refuse_without_curl("PYROSCOPE_SERVER_ADDRESS", env);
    } else {
#if SPANPROF_WITH_CURL || !SPANPROF_ENABLED
      uploaders.push_back(std::make_shared<PyroscopeUploader>(std::move(options)));
#endif
    }
  }
  if ((!env.otlp_profiles_endpoint.empty() || !env.otlp_endpoint.empty()) && !env.otlp_refused) {
    OtlpOptions options;
    options.profiles_endpoint = env.otlp_profiles_endpoint;
    options.endpoint = env.otlp_endpoint;
    options.http.headers = env.otlp_headers;
    options.delivery = delivery;
    // OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES.
    std::string service = env.service_name;
    // The first of repeated keys wins; a set keeps this linear in a long list.
    std::unordered_set<std::string_view> kept;
    for (const auto& [key, value] : env.resource_attributes) {
      if (key == "service.name") {
        if (service.empty()) service = value;
        continue;
      }
      if (kept.insert(key).second) options.resource.attributes.emplace_back(key, value);
    }
    options.resource.attributes.emplace_back("service.name", service.empty() ? "unknown_service" : service);
    if (!SPANPROF_WITH_CURL && SPANPROF_ENABLED) {
      refuse_without_curl(env.otlp_profiles_endpoint.empty() ? "OTEL_EXPORTER_OTLP_ENDPOINT"
                                                             : "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                          env);
    } else {
#if SPANPROF_WITH_CURL || !SPANPROF_ENABLED
      uploaders.push_back(std::make_shared<OtlpUploader>(std::move(options)));
#endif
    }
  }
  return uploaders;
}

// Overlays what the environment set on `options`.
inline void apply_environment(EnvironmentSettings env, Options& options) {
  if (env.profiles) options.profiles = *env.profiles;
  if (env.cpu_engine) options.cpu_engine = *env.cpu_engine;
  if (env.cpu_sample_source) options.cpu_sample_source = *env.cpu_sample_source;
  if (env.frequency_hz) options.frequency_hz = *env.frequency_hz;
  if (env.wall_frequency_hz) options.wall_frequency_hz = *env.wall_frequency_hz;
  if (env.signal_number) options.signal_number = *env.signal_number;
  if (env.heap_engine) options.heap_engine = *env.heap_engine;
  if (env.heap_sample_interval_bytes) options.heap_sample_interval_bytes = *env.heap_sample_interval_bytes;
  options.head_sampler = make_head_sampler(env);
  options.tail_policy = make_tail_policy(env);
  options.trigger = make_trigger(env);
  if (env.output_directory) options.output_directory = *env.output_directory;
  if (env.spool_directory) options.spool_directory = *env.spool_directory;
  if (env.spool_max_bytes) options.spool_max_bytes = *env.spool_max_bytes;
  if (env.upload_attempts) options.retry.max_attempts = *env.upload_attempts;
  if (env.queue_overflow) options.queue_overflow = *env.queue_overflow;
  if (!env.service_name.empty()) options.service_name = env.service_name;
  options.uploaders = make_uploaders(env);
  // A backend replaces the default file uploader; an explicit SPANPROF_OUTPUT_DIR
  // keeps files coming too.
  if (!options.uploaders.empty() && env.output_directory)
    options.uploaders.insert(options.uploaders.begin(), std::make_shared<FileUploader>(*env.output_directory));
  options.environment_problems = std::move(env.problems);
}

}  // namespace detail

inline Options::Options() noexcept {
#if SPANPROF_ENABLED
  try {
    detail::apply_environment(detail::read_environment(), *this);
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory reading spanprof's environment variables");
  }
#endif
}

// The head sampler SPANPROF_SAMPLER, SPANPROF_SAMPLER_ARG and
// SPANPROF_MAX_PROFILES_PER_SECOND describe (null: every span), reporting each bad
// value. What Options() does for its head_sampler, on its own.
inline std::shared_ptr<HeadSampler> head_sampler_from_environment() noexcept {
  try {
    detail::EnvironmentSettings env = detail::read_environment({detail::EnvironmentGroup::head_sampler});
    for (const ConfigurationProblem& problem : env.problems) report_error(ErrorCode::invalid_configuration, problem.message);
    return detail::make_head_sampler(env);
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory building the head sampler from SPANPROF_SAMPLER");
    return nullptr;
  }
}

// The uploaders PYROSCOPE_* and OTEL_EXPORTER_OTLP_* describe, reporting each bad
// value. What Options() does for its uploaders, on its own.
inline std::vector<std::shared_ptr<Uploader>> uploaders_from_environment() noexcept {
  try {
    detail::EnvironmentSettings env = detail::read_environment(
        {detail::EnvironmentGroup::service, detail::EnvironmentGroup::pyroscope, detail::EnvironmentGroup::otlp});
    auto uploaders = detail::make_uploaders(env);
    for (const ConfigurationProblem& problem : env.problems) report_error(ErrorCode::invalid_configuration, problem.message);
    return uploaders;
  } catch (...) {
    report_error(ErrorCode::internal, "out of memory reading the uploaders' environment variables");
    return {};
  }
}

// Every setting as `name=value` lines, in the order of the struct: for a startup
// log line, and to see what the environment changed.
inline std::string describe(const Options& options) {
  std::string out;
  auto line = [&](const char* name, const std::string& value) { out += std::string(name) + "=" + value + "\n"; };
  auto number = [](auto value) { return std::to_string(value); };
  auto object = [](const auto& pointer) { return pointer ? std::string("set") : std::string("none"); };
  std::string kinds;
  for (const ProfileKind kind : {ProfileKind::cpu, ProfileKind::heap, ProfileKind::wall})
    if (options.profiles.contains(kind)) kinds += (kinds.empty() ? "" : ",") + std::string(to_string(kind));
  line("profiles", kinds.empty() ? "none" : kinds);
  line("cpu_engine", std::string(to_string(options.cpu_engine)));
  line("heap_engine", std::string(to_string(options.heap_engine)));
  line("cpu_sample_source", std::string(to_string(options.cpu_sample_source)));
  line("frequency_hz", number(options.frequency_hz));
  line("wall_frequency_hz", number(options.wall_frequency_hz));
  line("max_stack_depth", number(options.max_stack_depth));
  line("heap_sample_interval_bytes", number(options.heap_sample_interval_bytes));
  line("thread_buffer_bytes", number(options.thread_buffer_bytes));
  line("signal_number", number(options.signal_number));
  line("idle_ticks_before_disarm", number(options.idle_ticks_before_disarm));
  line("head_sampler", object(options.head_sampler));
  line("tail_policy", object(options.tail_policy));
  line("trigger", object(options.trigger));
  std::string uploaders;
  for (const auto& uploader : options.uploaders)
    if (uploader) uploaders += (uploaders.empty() ? "" : ",") + std::string(uploader->name());
  line("uploaders", uploaders.empty() ? "default" : uploaders);
  line("output_directory", options.output_directory);
  line("queue_capacity", number(options.queue_capacity));
  line("queue_overflow", options.queue_overflow == OverflowPolicy::drop_newest ? "drop_newest" : "drop_oldest");
  line("retry.max_attempts", number(options.retry.max_attempts));
  line("spool_directory", options.spool_directory);
  line("spool_max_bytes", number(options.spool_max_bytes));
  line("symbolizer", object(options.symbolizer));
  line("service_name", options.service_name);
  return out;
}

// The name of 0.1, kept for one release. Options() now reads the environment
// itself, and code wins over it; this returns `options` unchanged.
[[deprecated("Options() reads the environment itself; code now wins over it")]] inline Options
options_from_environment(Options options = {}) noexcept {
  return options;
}
[[deprecated("renamed spanprof::head_sampler_from_environment")]] inline std::shared_ptr<HeadSampler>
sampler_from_environment() noexcept {
  return head_sampler_from_environment();
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_RUNTIME_OPTIONS_HPP_
