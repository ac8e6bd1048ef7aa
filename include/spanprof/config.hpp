// spanprof — span-scoped profiles for C++ services.
// Build-time configuration. Every macro has a default and is tested by value,
// so -DSPANPROF_ENABLED=0 really turns the SDK off.
#ifndef SPANPROF_CONFIG_HPP_
#define SPANPROF_CONFIG_HPP_

#define SPANPROF_VERSION_MAJOR 0
#define SPANPROF_VERSION_MINOR 2
#define SPANPROF_VERSION_PATCH 0
#define SPANPROF_VERSION_STRING "0.2.0"

// SPANPROF_ENABLED=0 compiles every guard to an empty object and start(), flush(),
// shutdown() and stats() to no-ops: no code, no data, no dependency on gperftools.
// Every public name still exists, so one source builds both ways.
#ifndef SPANPROF_ENABLED
#define SPANPROF_ENABLED 1
#endif

// Built with libcurl (the build system defines it when it links libcurl): the
// Pyroscope and OTLP uploaders exist, and options_from_environment() configures
// them from PYROSCOPE_* and OTEL_EXPORTER_OTLP_* variables.
#ifndef SPANPROF_WITH_CURL
#define SPANPROF_WITH_CURL 0
#endif

#if (SPANPROF_ENABLED != 0 && SPANPROF_ENABLED != 1) || (SPANPROF_WITH_CURL != 0 && SPANPROF_WITH_CURL != 1)
#error "SPANPROF_ENABLED and SPANPROF_WITH_CURL must be 0 or 1"
#endif

// Singletons live in inline functions; with default visibility they stay one
// per process even when several shared libraries include spanprof.
#if defined(__GNUC__)
#define SPANPROF_API __attribute__((visibility("default")))
#define SPANPROF_NOINLINE __attribute__((noinline))
#define SPANPROF_ALWAYS_INLINE __attribute__((always_inline))
#define SPANPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define SPANPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SPANPROF_API
#define SPANPROF_NOINLINE
#define SPANPROF_ALWAYS_INLINE
#define SPANPROF_LIKELY(x) (x)
#define SPANPROF_UNLIKELY(x) (x)
#endif

// The ABI namespace encodes the version and every feature switch that changes a
// declaration (SPANPROF_ENABLED, SPANPROF_WITH_CURL): translation units built with
// different settings get different types instead of one name with two layouts (an
// ODR violation). A process that mixes them anyway is told so once at start().
#define SPANPROF_ABI_CONCAT_(major, minor, enabled, curl) spanprof_v##major##_##minor##_e##enabled##c##curl
#define SPANPROF_ABI_CONCAT(major, minor, enabled, curl) SPANPROF_ABI_CONCAT_(major, minor, enabled, curl)
#define SPANPROF_ABI_NAMESPACE \
  SPANPROF_ABI_CONCAT(SPANPROF_VERSION_MAJOR, SPANPROF_VERSION_MINOR, SPANPROF_ENABLED, SPANPROF_WITH_CURL)
#define SPANPROF_STRINGIFY_(x) #x
#define SPANPROF_STRINGIFY(x) SPANPROF_STRINGIFY_(x)
#define SPANPROF_ABI_NAME SPANPROF_STRINGIFY(SPANPROF_ABI_NAMESPACE)

#define SPANPROF_NAMESPACE_BEGIN \
  namespace spanprof {           \
  inline namespace SPANPROF_ABI_NAMESPACE {
#define SPANPROF_NAMESPACE_END \
  }                            \
  }

#endif  // SPANPROF_CONFIG_HPP_
