// Every environment variable spanprof reads (runtime/environment.hpp), with any
// value an operator or a deployment template can put there, and the text helpers
// under their parsers (base/text.hpp).
//
// Input: records separated by NUL (a value can hold anything else); a record's
// first byte picks a variable from the table, the rest is its value. Each value
// goes to that variable's parser directly, then all of them are put into the
// process environment for read_environment() and apply_environment(), the path
// Options() takes.
//
// Invariants: an accepted value lands inside the range the table documents (and a
// refused one is explained); read_environment() reports every refusal once, under
// the variable's name, echoing the value; apply_environment() builds Options from
// whatever was read.
//
// A problem is one short line (no control character, at most 512 bytes), a URL
// is printable, and apply_environment() stays linear in the number of
// OTEL_RESOURCE_ATTRIBUTES (the regression inputs hold a case of each).
#include "fuzz_support.hpp"

#include <spanprof/base/text.hpp>
#include <spanprof/runtime/environment.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/runtime/options-inl.hpp>

#include <signal.h>
#include <stdlib.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace sd = spanprof::detail;

constexpr std::size_t variable_count = sizeof sd::environment_variables / sizeof sd::environment_variables[0];

bool printable_and_trimmed(const std::string& text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return text.empty() || (!sd::is_ascii_space(text.front()) && !sd::is_ascii_space(text.back()));
}

bool http_url(const std::string& url) {
  return (url.rfind("http://", 0) == 0 && url.size() > 7) || (url.rfind("https://", 0) == 0 && url.size() > 8);
}

template <class T>
bool within(const std::optional<T>& value, T low, T high) {
  return !value || (*value >= low && *value <= high);
}

// What the table documents for each variable, checked on whatever was accepted.
void check_settings(const sd::EnvironmentSettings& s) {
  SPANPROF_FUZZ_CHECK(!s.profiles || !s.profiles->empty());
  SPANPROF_FUZZ_CHECK(within(s.frequency_hz, 1, 4000));
  SPANPROF_FUZZ_CHECK(within(s.wall_frequency_hz, 1, 1000));
  SPANPROF_FUZZ_CHECK(!s.signal_number || *s.signal_number == 0 ||
                      (*s.signal_number >= SIGRTMIN && *s.signal_number <= SIGRTMAX));
  SPANPROF_FUZZ_CHECK(within<std::size_t>(s.heap_sample_interval_bytes, 1, std::size_t{1} << 30));
  SPANPROF_FUZZ_CHECK(within(s.head_sampler_argument, 0.0, 1.0));
  SPANPROF_FUZZ_CHECK(!s.max_profiles_per_second ||
                      (*s.max_profiles_per_second > 0 && std::isfinite(*s.max_profiles_per_second)));
  SPANPROF_FUZZ_CHECK(within<std::int64_t>(s.slow_threshold_ms, 0, 86'400'000));
  SPANPROF_FUZZ_CHECK(!s.trigger_factor || (*s.trigger_factor > 1.0 && *s.trigger_factor <= 1000.0));
  SPANPROF_FUZZ_CHECK(within<std::uint32_t>(s.trigger_spans, 1, 1000));
  SPANPROF_FUZZ_CHECK(!s.spool_max_bytes ||
                      (*s.spool_max_bytes >= (1u << 20) && *s.spool_max_bytes <= (std::uint64_t{1} << 40) &&
                       *s.spool_max_bytes % (1u << 20) == 0));
  SPANPROF_FUZZ_CHECK(within(s.upload_attempts, 1, 100));
  SPANPROF_FUZZ_CHECK(within<std::int64_t>(s.upload_window_ms, 0, 600'000));
  for (const auto* text : {&s.service_name, &s.pyroscope_application_name, &s.pyroscope_auth_token,
                           &s.pyroscope_basic_auth_user, &s.pyroscope_basic_auth_password, &s.pyroscope_tenant_id})
    SPANPROF_FUZZ_CHECK(printable_and_trimmed(*text));
  for (const auto* directory : {&s.output_directory, &s.spool_directory})
    SPANPROF_FUZZ_CHECK(!*directory || printable_and_trimmed(**directory));
  for (const auto* url : {&s.pyroscope_server_address, &s.otlp_profiles_endpoint, &s.otlp_endpoint})
    SPANPROF_FUZZ_CHECK(url->empty() || (http_url(*url) && printable_and_trimmed(*url)));
  for (const auto* list : {&s.otlp_headers, &s.resource_attributes})
    for (const auto& [key, value] : *list)
      SPANPROF_FUZZ_CHECK(!key.empty() && !sd::is_ascii_space(key.front()) && !sd::is_ascii_space(key.back()));
}

// base/text.hpp, under every parser: the number readers accept the whole text and
// nothing else, whatever strtol or strtod would have let through.
void check_text_helpers(std::string_view value) {
  const std::string_view trimmed = sd::trim_ascii_space(value);
  SPANPROF_FUZZ_CHECK(sd::trim_ascii_space(trimmed) == trimmed);
  SPANPROF_FUZZ_CHECK(sd::equals_ignoring_ascii_case(value, value));

  std::int64_t integer = 0;
  std::string_view digits = value;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
  const bool well_formed =
      !digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string_view::npos;
  SPANPROF_FUZZ_CHECK(sd::parse_integer(value, integer) == well_formed);
  if (well_formed) {
    std::int64_t expected = 0;
    for (const char c : digits) expected = expected * 10 + (c - '0');
    SPANPROF_FUZZ_CHECK(integer == (negative ? -expected : expected));
  }

  double decimal = 0;
  if (sd::parse_decimal(value, decimal)) {
    SPANPROF_FUZZ_CHECK(std::isfinite(decimal));
    SPANPROF_FUZZ_CHECK(value.find_first_not_of("0123456789.eE+-") == std::string_view::npos);
    const std::string copy(value);
    char* end = nullptr;
    SPANPROF_FUZZ_CHECK(std::strtod(copy.c_str(), &end) == decimal && end == copy.c_str() + copy.size());
  }
}

void check_problem(const spanprof::ConfigurationProblem& problem) {
  const sd::EnvironmentVariable* variable = sd::find_environment_variable(problem.setting);
  SPANPROF_FUZZ_CHECK(variable != nullptr || problem.setting.empty());
  SPANPROF_FUZZ_CHECK(problem.message.rfind(problem.setting, 0) == 0);
  SPANPROF_FUZZ_CHECK(problem.message.size() <= 512);
  for (const char c : problem.message) SPANPROF_FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
}

void fuzz_one(std::string_view rest) {
  // putenv keeps our strings: no copies pile up in libc over millions of runs.
  static std::vector<std::string> assignments(variable_count);
  std::vector<bool> assigned(variable_count, false);
  sd::EnvironmentSettings direct;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\0');
    const std::string_view record = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (record.empty()) continue;
    const std::size_t index = static_cast<std::uint8_t>(record.front()) % variable_count;
    const std::string_view value = record.substr(1);
    const sd::EnvironmentVariable& variable = sd::environment_variables[index];
    check_text_helpers(value);
    std::string why;
    if (!sd::trim_ascii_space(value).empty() && !variable.parse(value, direct, why)) SPANPROF_FUZZ_CHECK(!why.empty());
    assignments[index] = std::string(variable.name) + "=" + std::string(value);
    assigned[index] = true;
  }
  check_settings(direct);

  for (std::size_t i = 0; i < variable_count; ++i)
    if (assigned[i]) ::putenv(assignments[i].data());
  sd::EnvironmentSettings read = sd::read_environment();
  check_settings(read);
  std::size_t refused = 0;
  for (const spanprof::ConfigurationProblem& problem : read.problems) {
    check_problem(problem);
    SPANPROF_FUZZ_CHECK(sd::find_environment_variable(problem.setting) != nullptr);
    ++refused;
  }
  SPANPROF_FUZZ_CHECK(refused <= variable_count);

  spanprof::Options options(spanprof::ignore_environment);
  sd::apply_environment(std::move(read), options);
  SPANPROF_FUZZ_CHECK(options.frequency_hz >= 1 && options.frequency_hz <= 4000);
  for (const spanprof::ConfigurationProblem& problem : options.environment_problems) check_problem(problem);

  for (std::size_t i = 0; i < variable_count; ++i)
    if (assigned[i]) ::unsetenv(sd::environment_variables[i].name);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // stderr is for findings; whatever the code under test reports is noise here.
  spanprof::set_error_handler({});
  for (const sd::EnvironmentVariable& variable : sd::environment_variables) ::unsetenv(variable.name);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
