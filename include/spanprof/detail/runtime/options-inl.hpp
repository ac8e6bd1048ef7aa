// What reads the environment into Options (options.hpp): Options(),
// head_sampler_from_environment(), uploaders_from_environment(), describe(); each
// walks the table of detail/runtime/settings.hpp, and builds the objects its variables
// describe.
// Compiled once per program, with the runtime (config.hpp).
#ifndef SPANPROF_DETAIL_RUNTIME_OPTIONS_INL_HPP_
#define SPANPROF_DETAIL_RUNTIME_OPTIONS_INL_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/backend_options.hpp>
#include <spanprof/delivery/file_uploader.hpp>
#include <spanprof/delivery/otlp_uploader.hpp>
#include <spanprof/delivery/pyroscope_uploader.hpp>
#include <spanprof/policy/adaptive_trigger.hpp>
#include <spanprof/policy/head_sampler.hpp>
#include <spanprof/policy/tail_policy.hpp>
#include <spanprof/detail/runtime/environment.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/detail/runtime/setting.hpp>
#include <spanprof/detail/runtime/settings.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#if SPANPROF_DEFINE_RUNTIME

SPANPROF_NAMESPACE_BEGIN

namespace detail {

inline std::shared_ptr<HeadSampler> make_head_sampler(const EnvironmentSettings& env) {
  const std::string& name = env.head_sampler;
  const double argument = env.head_sampler_argument;
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
  if (env.keep == "all") return nullptr;
  auto slow = std::make_shared<KeepSlowSpans>(std::chrono::milliseconds(env.slow_threshold_ms));
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
  trigger.spans_to_profile = env.trigger_spans;
  return std::make_shared<AdaptiveTrigger>(trigger);
}

inline void refuse_without_curl(const char* variable, EnvironmentSettings& env) {
  env.problems.push_back({variable, std::string(variable) +
                                        " is set, but spanprof was built without libcurl (SPANPROF_WITH_CURL=0); "
                                        "that uploader is off"});
}

inline std::vector<std::shared_ptr<Uploader>> make_uploaders(EnvironmentSettings& env) {
  std::vector<std::shared_ptr<Uploader>> uploaders;
  const Delivery delivery = env.upload_window_ms == 0 ? Delivery::per_span()
                                                       : Delivery::batched(std::chrono::milliseconds(env.upload_window_ms));
  if (!env.pyroscope_server_address.empty() && !env.pyroscope_refused) {
    PyroscopeOptions options;
    options.server_address = env.pyroscope_server_address;
    options.application_name =
        env.pyroscope_application_name.empty() ? env.options.service_name : env.pyroscope_application_name;
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
    std::string service = env.options.service_name;
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

// Overlays what the environment set on `options`: the members whose variable was
// accepted, and the objects the variables describe.
inline void apply_environment(EnvironmentSettings env, Options& options) {
  for (const Setting* row : env.accepted)
    if (row->access.copy != nullptr) row->access.copy(env.options, options);
  options.head_sampler = make_head_sampler(env);
  options.tail_policy = make_tail_policy(env);
  options.trigger = make_trigger(env);
  options.uploaders = make_uploaders(env);
  // A backend replaces the default file uploader; an explicit SPANPROF_OUTPUT_DIR
  // keeps files coming too.
  if (!options.uploaders.empty() && variable_accepted(env, "SPANPROF_OUTPUT_DIR"))
    options.uploaders.insert(options.uploaders.begin(), std::make_shared<FileUploader>(env.options.output_directory));
  options.environment_problems = std::move(env.problems);
}

}  // namespace detail

#if SPANPROF_ENABLED
Options::Options() noexcept {
  SPANPROF_TRY {
    detail::apply_environment(detail::read_environment(), *this);
  } SPANPROF_CATCH_ALL {
    report_error(ErrorCode::internal, "out of memory reading spanprof's environment variables");
  }
}
#endif

std::shared_ptr<HeadSampler> head_sampler_from_environment() noexcept {
  SPANPROF_TRY {
    detail::EnvironmentSettings env = detail::read_environment({detail::EnvironmentGroup::head_sampler});
    for (const ConfigurationProblem& problem : env.problems) report_error(ErrorCode::invalid_configuration, problem.message);
    return detail::make_head_sampler(env);
  } SPANPROF_CATCH_ALL {
    report_error(ErrorCode::internal, "out of memory building the head sampler from SPANPROF_SAMPLER");
    return nullptr;
  }
}

std::vector<std::shared_ptr<Uploader>> uploaders_from_environment() noexcept {
  SPANPROF_TRY {
    detail::EnvironmentSettings env = detail::read_environment(
        {detail::EnvironmentGroup::service, detail::EnvironmentGroup::pyroscope, detail::EnvironmentGroup::otlp});
    auto uploaders = detail::make_uploaders(env);
    for (const ConfigurationProblem& problem : env.problems) report_error(ErrorCode::invalid_configuration, problem.message);
    return uploaders;
  } SPANPROF_CATCH_ALL {
    report_error(ErrorCode::internal, "out of memory reading the uploaders' environment variables");
    return {};
  }
}

std::string describe(const Options& options) {
  std::string out;
  for (const detail::Setting& row : detail::settings)
    if (row.is_option()) out += std::string(row.name) + "=" + row.access.describe(row, options) + "\n";
  return out;
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DEFINE_RUNTIME

#endif  // SPANPROF_DETAIL_RUNTIME_OPTIONS_INL_HPP_
