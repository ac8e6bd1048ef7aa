// The customization point that lets `ScopedProfile guard(span)` accept any span
// type. Specialize span_adapter for your span class with two noexcept static
// functions:
//
//   template <> struct spanprof::span_adapter<my::Span> {
//     static spanprof::SpanContext context(const my::Span& s) noexcept;
//     static std::string_view name(const my::Span& s) noexcept;  // may be empty
//   };
//
// The name only needs to stay valid during the guard's constructor: it is copied.
//
// Optionally, two more functions, called when the guard closes (the span must then
// outlive the guard: a temporary is refused at compile time):
//
//     // the span's status, so tail policies that keep failed spans see errors the
//     // tracer recorded
//     static bool failed(const my::Span& s) noexcept;
//     // a profile of the span was handed to delivery: link the span to it (the
//     // OpenTelemetry adapter sets pyroscope.profile.id)
//     static void profile_kept(const my::Span& s) noexcept;
#ifndef SPANPROF_SPAN_SPAN_ADAPTER_HPP_
#define SPANPROF_SPAN_SPAN_ADAPTER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/span/span_context.hpp>

#include <string_view>
#include <type_traits>

SPANPROF_NAMESPACE_BEGIN

template <class Span, class Enable = void>
struct span_adapter;  // undefined: a span type without an adapter fails to compile

// A span identity with a name, for services that carry ids themselves (for
// instance from a traceparent header) rather than a tracing library's span.
struct NamedSpan {
  SpanContext context;
  std::string_view name;
};

template <>
struct span_adapter<SpanContext> {
  static SpanContext context(const SpanContext& span) noexcept { return span; }
  static std::string_view name(const SpanContext&) noexcept { return {}; }
};

template <>
struct span_adapter<NamedSpan> {
  static SpanContext context(const NamedSpan& span) noexcept { return span.context; }
  static std::string_view name(const NamedSpan& span) noexcept { return span.name; }
};

namespace detail {
template <class Span, class = void>
struct has_span_adapter : std::false_type {};
template <class Span>
struct has_span_adapter<Span, std::void_t<decltype(span_adapter<Span>::context(std::declval<const Span&>())),
                                          decltype(span_adapter<Span>::name(std::declval<const Span&>()))>>
    : std::true_type {};
}  // namespace detail

template <class Span>
inline constexpr bool is_span_v = detail::has_span_adapter<std::decay_t<Span>>::value;

namespace detail {
// One clear error, at the line that opened the guard, instead of a page of failed
// overloads: the guard's constructors call this for every span type they are given.
template <class Span>
constexpr void require_span_adapter() noexcept {
  static_assert(is_span_v<Span>,
                "spanprof::ScopedProfile: this span type has no spanprof::span_adapter. Specialize "
                "spanprof::span_adapter<YourSpan> with context() and name() (see docs/spans.md), include the "
                "integration header for your tracer, or pass a spanprof::SpanContext or spanprof::NamedSpan.");
}
}  // namespace detail

namespace detail {
template <class Span, class = void>
struct has_span_status : std::false_type {};
template <class Span>
struct has_span_status<Span, std::void_t<decltype(span_adapter<Span>::failed(std::declval<const Span&>()))>>
    : std::true_type {};
template <class Span>
inline constexpr bool has_span_status_v = has_span_status<std::decay_t<Span>>::value;

template <class Span, class = void>
struct has_profile_kept_hook : std::false_type {};
template <class Span>
struct has_profile_kept_hook<Span, std::void_t<decltype(span_adapter<Span>::profile_kept(std::declval<const Span&>()))>>
    : std::true_type {};
template <class Span>
inline constexpr bool has_profile_kept_hook_v = has_profile_kept_hook<std::decay_t<Span>>::value;

// The guard keeps a pointer to such a span and reads it when it closes.
template <class Span>
inline constexpr bool reads_span_at_close_v = has_span_status_v<Span> || has_profile_kept_hook_v<Span>;

template <class Span>
inline constexpr bool always_false_v = false;

template <class Span>
constexpr void require_lasting_span() noexcept {
  static_assert(always_false_v<Span>,
                "spanprof::ScopedProfile: this span is read again when the guard closes (its status, or to link it "
                "to its profile), so it must outlive the guard: keep it in a variable declared before the guard, not "
                "a temporary (see docs/spans.md).");
}
}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SPAN_SPAN_ADAPTER_HPP_
