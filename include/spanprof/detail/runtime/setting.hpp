// One row of the settings table (detail/runtime/settings.hpp): a member of Options or an
// environment variable, described once — its variable, the form and range of its
// value, what it means — with the code that reads, prints, copies and checks it
// generated from the member it names. Every reader of a setting works from this
// row: the environment reader, describe(), start()'s check of values set in code,
// the fuzz target and the tables of docs/configuration.md, so none of them can
// state a range or a default of its own.
//
// A row names its member by a path of member pointers (&Options::retry,
// &RetryPolicy::max_attempts), rooted at Options or, for a variable that only feeds
// an object spanprof builds, at EnvironmentSettings.
#ifndef SPANPROF_DETAIL_RUNTIME_SETTING_HPP_
#define SPANPROF_DETAIL_RUNTIME_SETTING_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/text.hpp>
#include <spanprof/config.hpp>
#include <spanprof/delivery/uploader.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/detail/runtime/environment.hpp>
#include <spanprof/runtime/options.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <signal.h>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// What a variable configures, so callers can read one part of the environment.
enum class EnvironmentGroup : std::uint8_t {
  capture, head_sampler, tail_policy, trigger, delivery, service, pyroscope, otlp
};

enum class ValueKind : std::uint8_t {
  integer,          // a whole number in [min, max]
  decimal,          // a number in [min, max], or (min, max]
  choice,           // one of `choices`
  list,             // a comma-separated subset of `choices`
  realtime_signal,  // 0, or a signal in SIGRTMIN..SIGRTMAX (only known at run time)
  directory,        // a path spanprof may create
  text,             // printable text
  url,              // http:// or https://
  key_values,       // key=value,... with percent-encoded values
  object,           // an object the program passes, or spanprof builds from variables
};

// The form of a setting's value, as the variable spells it.
struct Format {
  ValueKind kind = ValueKind::object;
  double min = 0;               // integer and decimal: the range, in the variable's unit
  double max = 0;               // (a double holds every integer the table uses exactly)
  bool min_excluded = false;    // decimal: (min, max] instead of [min, max]
  std::int64_t scale = 1;       // integer: the member holds the variable's value times this
  bool checked_in_code = false; // integer, signal: start() holds a value set in code to the range
  const char* unit = nullptr;   // shown with the type: "integer (Hz)"
  const char* const* choices = nullptr;  // choice and list: the names, in enumerator order
  std::size_t choice_count = 0;
  const char* unset_means = nullptr;     // what an empty value or a null object stands for
};

// The formats the table uses.
namespace format {

constexpr Format integer(std::int64_t min, std::int64_t max, const char* unit = nullptr) {
  Format f;
  f.kind = ValueKind::integer;
  f.min = static_cast<double>(min);
  f.max = static_cast<double>(max);
  f.checked_in_code = true;
  f.unit = unit;
  return f;
}
// A byte count the variable gives in MiB. Code may set any byte count (a spool of
// a few KiB works), so only the variable is held to the range.
constexpr Format mebibytes(std::int64_t min, std::int64_t max) {
  Format f = format::integer(min, max, "MiB");
  f.scale = std::int64_t{1} << 20;
  f.checked_in_code = false;
  return f;
}
constexpr Format decimal(double min, double max) {
  Format f;
  f.kind = ValueKind::decimal;
  f.min = min;
  f.max = max;
  return f;
}
// (min, max]; with no max: any number greater than min.
constexpr Format decimal_above(double min, double max = std::numeric_limits<double>::infinity(),
                               const char* unset_means = nullptr) {
  Format f = decimal(min, max);
  f.min_excluded = true;
  f.unset_means = unset_means;
  return f;
}
template <std::size_t N>
constexpr Format choice(const char* const (&names)[N], const char* unset_means = nullptr) {
  Format f;
  f.kind = ValueKind::choice;
  f.choices = names;
  f.choice_count = N;
  f.unset_means = unset_means;
  return f;
}
template <std::size_t N>
constexpr Format list_of(const char* const (&names)[N]) {
  Format f = format::choice(names);
  f.kind = ValueKind::list;
  return f;
}
constexpr Format of_kind(ValueKind kind, const char* unset_means) {
  Format f;
  f.kind = kind;
  f.unset_means = unset_means;
  return f;
}
constexpr Format realtime_signal() {
  Format f = of_kind(ValueKind::realtime_signal, nullptr);
  f.checked_in_code = true;
  return f;
}
constexpr Format directory(const char* unset_means = nullptr) { return of_kind(ValueKind::directory, unset_means); }
constexpr Format text(const char* unset_means = nullptr) { return of_kind(ValueKind::text, unset_means); }
constexpr Format url(const char* unset_means = nullptr) { return of_kind(ValueKind::url, unset_means); }
constexpr Format key_values() { return of_kind(ValueKind::key_values, nullptr); }
constexpr Format object(const char* unset_means) { return of_kind(ValueKind::object, unset_means); }

}  // namespace format

// ---- what the format says, in words (problems and docs) ---------------------------

inline std::string format_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

inline std::string joined_choices(const Format& f, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < f.choice_count; ++i) out += (i == 0 ? "" : separator) + std::string(f.choices[i]);
  return out;
}

inline std::string type_words(const Format& f) {
  switch (f.kind) {
    case ValueKind::integer: return f.unit ? std::string("integer (") + f.unit + ")" : "integer";
    case ValueKind::decimal: return "number";
    case ValueKind::choice: return "choice";
    case ValueKind::list: return "list";
    case ValueKind::realtime_signal: return "integer";
    case ValueKind::directory: return "path";
    case ValueKind::text: return "text";
    case ValueKind::url: return "URL";
    case ValueKind::key_values: return "list";
    case ValueKind::object: return "object";
  }
  return "";
}

inline std::string range_words(const Format& f) {
  switch (f.kind) {
    case ValueKind::integer: return format_number(f.min) + ".." + format_number(f.max);
    case ValueKind::decimal:
      if (f.max == std::numeric_limits<double>::infinity()) return "> " + format_number(f.min);
      if (f.min_excluded) return "(" + format_number(f.min) + ", " + format_number(f.max) + "]";
      return format_number(f.min) + ".." + format_number(f.max);
    case ValueKind::choice: return joined_choices(f, ", ");
    case ValueKind::list:
      return joined_choices(f, ", ") + ", or several: " + f.choices[0] + "," + f.choices[f.choice_count - 1];
    case ValueKind::realtime_signal: return "a real-time signal, SIGRTMIN..SIGRTMAX";
    case ValueKind::directory: return "a directory (created if missing)";
    case ValueKind::text: return "printable";
    case ValueKind::url: return "http:// or https://";
    case ValueKind::key_values: return "key=value,... (values percent-encoded)";
    case ValueKind::object: return "";
  }
  return "";
}

// ---- reading a value into its member ------------------------------------------------

template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
template <class T> struct is_shared_ptr : std::false_type {};
template <class T> struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};
template <class> inline constexpr bool no_reader_for = false;

inline bool parse_whole_number(const Format& f, std::string_view text, std::int64_t& out, std::string& why) {
  if (f.kind == ValueKind::integer)
    return parse_bounded_integer(text, static_cast<std::int64_t>(f.min), static_cast<std::int64_t>(f.max), out, why);
  std::int64_t signal = 0;
  if (!parse_integer(trim_ascii_space(text), signal) || (signal != 0 && (signal < SIGRTMIN || signal > SIGRTMAX))) {
    why = "is not 0 or a real-time signal in [" + std::to_string(SIGRTMIN) + ", " + std::to_string(SIGRTMAX) + "]";
    return false;
  }
  out = signal;
  return true;
}

inline bool parse_bounded_decimal(const Format& f, std::string_view text, double& out, std::string& why) {
  double value = 0;
  const bool parsed = parse_decimal(trim_ascii_space(text), value);
  if (!parsed || !(f.min_excluded ? value > f.min : value >= f.min) || !(value <= f.max)) {
    if (f.max == std::numeric_limits<double>::infinity()) why = "is not a number greater than " + format_number(f.min);
    else why = "is not a number in " + std::string(f.min_excluded ? "(" : "[") + format_number(f.min) + ", " +
               format_number(f.max) + "]";
    return false;
  }
  out = value;
  return true;
}

inline bool parse_kinds(const Format& f, std::string_view text, ProfileKinds& out, std::string& why) {
  ProfileKinds kinds;
  while (true) {
    const std::size_t comma = text.find(',');
    std::string ignored;
    const int index = parse_choice(text.substr(0, comma), f.choices, f.choice_count, ignored);
    if (index < 0) {
      why = "is not a comma-separated list of " + joined_choices(f, ", ");
      return false;
    }
    kinds = kinds | ProfileKinds(static_cast<ProfileKind>(index));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  out = kinds;
  return true;
}

// Reads `text` into `out`, which is left alone when the text is refused.
template <class T>
bool parse_value(const Format& f, std::string_view text, T& out, std::string& why) {
  if constexpr (is_optional<T>::value) {
    typename T::value_type value{};
    if (!parse_value(f, text, value, why)) return false;
    out = std::move(value);
    return true;
  } else if constexpr (std::is_same_v<T, ProfileKinds>) {
    return parse_kinds(f, text, out, why);
  } else if constexpr (std::is_same_v<T, bool>) {  // a switch: integer(0, 1)
    std::int64_t value = 0;
    if (!parse_whole_number(f, text, value, why)) return false;
    out = value != 0;
    return true;
  } else if constexpr (std::is_enum_v<T>) {
    const int index = parse_choice(text, f.choices, f.choice_count, why);
    if (index >= 0) out = static_cast<T>(index);
    return index >= 0;
  } else if constexpr (std::is_integral_v<T>) {
    std::int64_t value = 0;
    if (!parse_whole_number(f, text, value, why)) return false;
    out = static_cast<T>(static_cast<T>(value) * static_cast<T>(f.scale));
    return true;
  } else if constexpr (std::is_floating_point_v<T>) {
    return parse_bounded_decimal(f, text, out, why);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (f.kind == ValueKind::choice) {
      const int index = parse_choice(text, f.choices, f.choice_count, why);
      if (index >= 0) out = f.choices[index];
      return index >= 0;
    }
    if (f.kind == ValueKind::directory) return parse_directory(text, out, why);
    if (f.kind == ValueKind::url) return parse_http_url(text, out, why);
    return parse_text(text, out, why);
  } else if constexpr (std::is_same_v<T, KeyValues>) {
    KeyValues list;
    if (!parse_key_value_list(text, list, why)) return false;
    out = std::move(list);
    return true;
  } else {
    static_assert(no_reader_for<T>, "no reader for this member's type");
    return false;
  }
}

// ---- printing a value -----------------------------------------------------------------

// The value as the variable spells it (in the variable's unit) or, with
// `in_variable_unit` false, as describe() prints the member. Empty: unset.
template <class T>
std::string show_value(const Format& f, const T& value, bool in_variable_unit) {
  if constexpr (is_optional<T>::value) {
    return value ? show_value(f, *value, in_variable_unit) : std::string();
  } else if constexpr (std::is_same_v<T, ProfileKinds>) {
    std::string out;
    for (std::size_t i = 0; i < f.choice_count; ++i)
      if (value.contains(static_cast<ProfileKind>(i))) out += (out.empty() ? "" : ",") + std::string(f.choices[i]);
    return out.empty() ? "none" : out;
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "1" : "0";
  } else if constexpr (std::is_enum_v<T>) {
    const auto index = static_cast<std::size_t>(value);
    return index < f.choice_count ? f.choices[index] : "unknown";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(in_variable_unit ? value / static_cast<T>(f.scale) : value);
  } else if constexpr (std::is_floating_point_v<T>) {
    return format_number(value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else if constexpr (std::is_same_v<T, KeyValues>) {
    std::string out;
    for (const auto& [key, item] : value) out += (out.empty() ? "" : ",") + key + "=" + item;
    return out;
  } else if constexpr (is_shared_ptr<T>::value) {
    return value ? "set" : "none";
  } else if constexpr (std::is_same_v<T, std::vector<std::shared_ptr<Uploader>>>) {
    std::string names;
    for (const auto& uploader : value)
      if (uploader) names += (names.empty() ? "" : ",") + std::string(uploader->name());
    return names.empty() ? "default" : names;
  } else {
    static_assert(no_reader_for<T>, "no printer for this member's type");
    return {};
  }
}

// ---- the member a row names ---------------------------------------------------------

template <class> struct member_owner;
template <class T, class C> struct member_owner<T C::*> { using type = C; };

// member_at<&A::b, &B::c>(a) is a.b.c.
template <auto First, auto... Rest, class Object>
constexpr auto& member_at(Object& object) noexcept {
  if constexpr (sizeof...(Rest) == 0) return object.*First;
  else return member_at<Rest...>(object.*First);
}

template <auto First, auto... Rest>
inline constexpr bool rooted_at_options = std::is_same_v<typename member_owner<decltype(First)>::type, Options>;

template <auto First, auto... Rest, class Environment>
constexpr auto& place_in(Environment& env) noexcept {
  if constexpr (rooted_at_options<First>) return member_at<First, Rest...>(env.options);
  else return member_at<First, Rest...>(env);
}

template <auto... Path>
using member_t = std::remove_reference_t<decltype(place_in<Path...>(std::declval<EnvironmentSettings&>()))>;

// What a member holds, so a format that does not fit it is a compile error
// (settings.hpp checks every row).
enum class MemberKind : std::uint8_t { whole_number, number, enumeration, kinds, string, key_values, object };

template <class T>
constexpr MemberKind member_kind_of() {
  if constexpr (is_optional<T>::value) return member_kind_of<typename T::value_type>();
  else if constexpr (std::is_same_v<T, ProfileKinds>) return MemberKind::kinds;
  else if constexpr (std::is_enum_v<T>) return MemberKind::enumeration;
  else if constexpr (std::is_integral_v<T>) return MemberKind::whole_number;
  else if constexpr (std::is_floating_point_v<T>) return MemberKind::number;
  else if constexpr (std::is_same_v<T, std::string>) return MemberKind::string;
  else if constexpr (std::is_same_v<T, KeyValues>) return MemberKind::key_values;
  else return MemberKind::object;
}

struct Setting;
struct StartPlan;  // start_plan.hpp

// What a member of Options is made into for start(): it writes the member, in the
// form the runtime reads, into the plan start() builds everything from.
using Feed = void (*)(const Options& options, StartPlan& plan);

// The code generated for a row's member.
struct Access {
  MemberKind member = MemberKind::object;
  // Reads the variable's text into the member's place in `env`; false, with `why`
  // set, when refused. Null for objects.
  bool (*parse)(const Setting&, std::string_view text, EnvironmentSettings& env, std::string& why) = nullptr;
  // The value in `env`, in the variable's unit; empty when unset.
  std::string (*show)(const Setting&, const EnvironmentSettings& env) = nullptr;
  // Members of Options only: the value as describe() prints it; copying it from
  // the parsed environment onto the program's Options; start()'s check of a value
  // set in code (integers and signals: out of range becomes a problem and is clamped).
  std::string (*describe)(const Setting&, const Options&) = nullptr;
  void (*copy)(const Options& from, Options& to) = nullptr;
  // Whether those are set: a flag, because the table's checks run at compile time
  // and the address of a function template may not be compared with null there
  // (GCC under -fsanitize=undefined keeps it open: the symbol is weak).
  bool of_options = false;
  void (*check_in_code)(const Setting&, Options&, std::vector<ConfigurationProblem>&) = nullptr;
};

struct Setting {
  // The member of Options: what describe() prints, what a problem about a value set
  // in code names. A variable that feeds an object names that object's member.
  const char* name;
  const char* variable;  // null: set in code only
  EnvironmentGroup group;
  Format format;
  Access access;
  const char* meaning;
  // A variable that refines another is read only while that one is in effect (as
  // OTEL_TRACES_SAMPLER_ARG is only read by the samplers that take an argument):
  // null, or a check of the environment.
  bool (*in_effect)() noexcept;

  // Members of Options only: what start() makes of the member (start_plan.hpp).
  // `feeds_plan` says it is set, for the same reason as Access::of_options.
  Feed feed = nullptr;
  bool feeds_plan = false;

  // A member of Options, not a variable that feeds one.
  constexpr bool is_option() const noexcept { return access.of_options; }

  // The row, feeding its member into start()'s plan.
  constexpr Setting feeds(Feed into_plan) const noexcept {
    Setting row = *this;
    row.feed = into_plan;
    row.feeds_plan = true;
    return row;
  }
};

template <auto... Path>
bool parse_at(const Setting& setting, std::string_view text, EnvironmentSettings& env, std::string& why) {
  return parse_value(setting.format, text, place_in<Path...>(env), why);
}

template <auto... Path>
std::string show_at(const Setting& setting, const EnvironmentSettings& env) {
  return show_value(setting.format, place_in<Path...>(env), true);
}

template <auto... Path>
std::string describe_at(const Setting& setting, const Options& options) {
  return show_value(setting.format, member_at<Path...>(options), false);
}

template <auto... Path>
void copy_at(const Options& from, Options& to) {
  member_at<Path...>(to) = member_at<Path...>(from);
}

template <auto... Path>
void check_at(const Setting& setting, Options& options, std::vector<ConfigurationProblem>& problems) {
  auto& value = member_at<Path...>(options);
  using T = std::remove_reference_t<decltype(value)>;
  const Format& f = setting.format;
  if (!f.checked_in_code) return;
  if (f.kind == ValueKind::realtime_signal) {
    const auto signal = static_cast<std::int64_t>(value);
    if (signal != 0 && (signal < SIGRTMIN || signal > SIGRTMAX)) {
      problems.push_back({setting.name, std::string(setting.name) + "=" + std::to_string(value) +
                                            " is not a real-time signal; picking a free one"});
      value = 0;
    }
    return;
  }
  const T low = static_cast<T>(static_cast<std::int64_t>(f.min) * f.scale);
  const T high = static_cast<T>(static_cast<std::int64_t>(f.max) * f.scale);
  if (value >= low && value <= high) return;
  problems.push_back({setting.name, std::string(setting.name) + "=" + std::to_string(value) + " is outside [" +
                                        std::to_string(low) + ", " + std::to_string(high) + "]; clamped"});
  value = value < low ? low : high;
}

template <auto... Path>
constexpr Access access_to() {
  using T = std::remove_cv_t<member_t<Path...>>;
  Access access;
  access.member = member_kind_of<T>();
  if constexpr (member_kind_of<T>() != MemberKind::object) access.parse = &parse_at<Path...>;
  access.show = &show_at<Path...>;
  if constexpr (rooted_at_options<Path...>) {
    access.describe = &describe_at<Path...>;
    access.copy = &copy_at<Path...>;
    access.of_options = true;
    if constexpr (member_kind_of<T>() == MemberKind::whole_number && !std::is_same_v<T, bool>)
      access.check_in_code = &check_at<Path...>;  // a bool is always in range
  }
  return access;
}

// A row of the table, with the code for the member at the end of Path.
template <auto... Path>
constexpr Setting setting(const char* name, const char* variable, EnvironmentGroup group, Format format,
                          const char* meaning, bool (*in_effect)() noexcept = nullptr) {
  return Setting{name, variable, group, format, access_to<Path...>(), meaning, in_effect, nullptr, false};
}

// Whether a row's format fits the member it names.
constexpr bool format_fits(const Setting& s) {
  switch (s.format.kind) {
    case ValueKind::integer:
    case ValueKind::realtime_signal: return s.access.member == MemberKind::whole_number;
    case ValueKind::decimal: return s.access.member == MemberKind::number;
    case ValueKind::choice: return s.access.member == MemberKind::enumeration || s.access.member == MemberKind::string;
    case ValueKind::list: return s.access.member == MemberKind::kinds;
    case ValueKind::directory:
    case ValueKind::text:
    case ValueKind::url: return s.access.member == MemberKind::string;
    case ValueKind::key_values: return s.access.member == MemberKind::key_values;
    case ValueKind::object: return s.access.member == MemberKind::object && s.variable == nullptr;
  }
  return false;
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_RUNTIME_SETTING_HPP_
