// Every environment variable spanprof reads (the settings table,
// detail/runtime/settings.hpp), with any value an operator or a deployment template can
// put there, and the text helpers under their parsers (detail/base/text.hpp).
//
// Input: records separated by NUL (a value can hold anything else); a record's
// first byte picks a variable (the n-th row of the table that has one, modulo
// their number), the rest is its value. Each value goes to that row's reader
// directly, then all of them are put into the process environment for
// read_environment() and apply_environment(), the path Options() takes.
//
// Invariants: an accepted value lands inside the range its row documents (and a
// refused one is explained); read_environment() reports every refusal once, under
// the variable's name, echoing the value; apply_environment() builds Options from
// whatever was read, and they pass start()'s checks of values set in code.
//
// A problem is one short line (no control character, at most 512 bytes), a URL
// is printable, and apply_environment() stays linear in the number of
// OTEL_RESOURCE_ATTRIBUTES (the regression inputs hold a case of each).
// The program's one source file: it compiles what Options() needs (config.hpp).
#define SPANPROF_IMPLEMENTATION
#include "fuzz_support.hpp"

#include <spanprof/detail/base/text.hpp>
#include <spanprof/detail/runtime/environment.hpp>
#include <spanprof/runtime/options.hpp>
#include <spanprof/detail/runtime/options-inl.hpp>
#include <spanprof/detail/runtime/settings.hpp>

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

constexpr std::size_t count_variables() {
  std::size_t count = 0;
  for (const sd::Setting& row : sd::settings) count += row.variable != nullptr ? 1 : 0;
  return count;
}
constexpr std::size_t variable_count = count_variables();

const sd::Setting& variable_at(std::size_t index) {
  for (const sd::Setting& row : sd::settings)
    if (row.variable != nullptr && index-- == 0) return row;
  std::abort();
}

bool printable_and_trimmed(const std::string& text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return text.empty() || (!sd::is_ascii_space(text.front()) && !sd::is_ascii_space(text.back()));
}

bool http_url(const std::string& url) {
  return (url.rfind("http://", 0) == 0 && url.size() > 7) || (url.rfind("https://", 0) == 0 && url.size() > 8);
}

// What its row documents about a variable's value, checked on the value in `s`
// (the default, or what was accepted); empty is unset.
void check_value(const sd::Setting& row, const sd::EnvironmentSettings& s) {
  const sd::Format& f = row.format;
  const std::string value = row.access.show(row, s);
  switch (f.kind) {
    case sd::ValueKind::integer: {
      std::int64_t number = 0;
      SPANPROF_FUZZ_CHECK(sd::parse_integer(value, number) && static_cast<double>(number) >= f.min &&
                          static_cast<double>(number) <= f.max);
      if (row.is_option()) {  // the member holds the variable's value times the scale, exactly
        std::uint64_t held = 0;
        const std::string described = row.access.describe(row, s.options);
        SPANPROF_FUZZ_CHECK(described.find_first_not_of("0123456789") == std::string::npos);
        for (const char c : described) held = held * 10 + static_cast<std::uint64_t>(c - '0');
        SPANPROF_FUZZ_CHECK(held == static_cast<std::uint64_t>(number) * static_cast<std::uint64_t>(f.scale));
      }
      break;
    }
    case sd::ValueKind::decimal: {
      double number = 0;
      if (value.empty()) break;
      SPANPROF_FUZZ_CHECK(sd::parse_decimal(value, number) && std::isfinite(number));
      SPANPROF_FUZZ_CHECK((f.min_excluded ? number > f.min : number >= f.min) && number <= f.max);
      break;
    }
    case sd::ValueKind::choice: {
      bool known = value.empty();
      for (std::size_t i = 0; i < f.choice_count; ++i) known = known || value == f.choices[i];
      SPANPROF_FUZZ_CHECK(known);
      break;
    }
    case sd::ValueKind::list: SPANPROF_FUZZ_CHECK(value != "none"); break;
    case sd::ValueKind::realtime_signal: {
      std::int64_t signal = 0;
      SPANPROF_FUZZ_CHECK(sd::parse_integer(value, signal));
      SPANPROF_FUZZ_CHECK(signal == 0 || (signal >= SIGRTMIN && signal <= SIGRTMAX));
      break;
    }
    case sd::ValueKind::directory:
    case sd::ValueKind::text: SPANPROF_FUZZ_CHECK(printable_and_trimmed(value)); break;
    case sd::ValueKind::url:
      SPANPROF_FUZZ_CHECK(value.empty() || (http_url(value) && printable_and_trimmed(value)));
      break;
    case sd::ValueKind::key_values:  // keys are checked below: a value may hold ',' and '='
    case sd::ValueKind::object: break;
  }
}

void check_settings(const sd::EnvironmentSettings& s) {
  for (const sd::Setting& row : sd::settings)
    if (row.variable != nullptr) check_value(row, s);
  for (const auto* list : {&s.otlp_headers, &s.resource_attributes})
    for (const auto& [key, value] : *list)
      SPANPROF_FUZZ_CHECK(!key.empty() && !sd::is_ascii_space(key.front()) && !sd::is_ascii_space(key.back()));
}

// detail/base/text.hpp, under every parser: the number readers accept the whole text and
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
  const sd::Setting* variable = sd::find_variable(problem.setting);
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
    const sd::Setting& variable = variable_at(index);
    check_text_helpers(value);
    std::string why;
    if (!sd::trim_ascii_space(value).empty() && !variable.access.parse(variable, value, direct, why))
      SPANPROF_FUZZ_CHECK(!why.empty());
    assignments[index] = std::string(variable.variable) + "=" + std::string(value);
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
    SPANPROF_FUZZ_CHECK(sd::find_variable(problem.setting) != nullptr);
    ++refused;
  }
  SPANPROF_FUZZ_CHECK(refused <= variable_count);

  spanprof::Options options(spanprof::ignore_environment);
  sd::apply_environment(std::move(read), options);
  for (const spanprof::ConfigurationProblem& problem : options.environment_problems) check_problem(problem);
  std::vector<spanprof::ConfigurationProblem> out_of_range;
  sd::check_code_values(options, out_of_range);
  SPANPROF_FUZZ_CHECK(out_of_range.empty());

  for (std::size_t i = 0; i < variable_count; ++i)
    if (assigned[i]) ::unsetenv(variable_at(i).variable);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // stderr is for findings; whatever the code under test reports is noise here.
  spanprof::set_error_handler({});
  for (const sd::Setting& row : sd::settings)
    if (row.variable != nullptr) ::unsetenv(row.variable);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
