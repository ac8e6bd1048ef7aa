// spanprof — span-scoped profiles for C++ services.
// Build-time configuration. Every macro has a default and is tested by value,
// so -DSPANPROF_ENABLED=0 really turns the SDK off.
#ifndef SPANPROF_CONFIG_HPP_
#define SPANPROF_CONFIG_HPP_

#define SPANPROF_VERSION_MAJOR 0
#define SPANPROF_VERSION_MINOR 1
#define SPANPROF_VERSION_PATCH 0
#define SPANPROF_VERSION_STRING "0.1.0"

// SPANPROF_ENABLED=0 compiles every guard to an empty object: no code, no data,
// no dependency on gperftools at run time.
#ifndef SPANPROF_ENABLED
#define SPANPROF_ENABLED 1
#endif

// Built with libcurl (the build system defines it when it links libcurl): the
// Pyroscope and OTLP uploaders exist, and options_from_environment() configures
// them from PYROSCOPE_* and OTEL_EXPORTER_OTLP_* variables.
#ifndef SPANPROF_WITH_CURL
#define SPANPROF_WITH_CURL 0
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

// The ABI namespace encodes version and configuration, so two translation units
// built with different settings fail to link instead of silently disagreeing.
#define SPANPROF_ABI_CONCAT_(a, b, c, d) spanprof_v##a##_##b##_e##c##d
#define SPANPROF_ABI_CONCAT(a, b, c, d) SPANPROF_ABI_CONCAT_(a, b, c, d)
#define SPANPROF_ABI_NAMESPACE \
  SPANPROF_ABI_CONCAT(SPANPROF_VERSION_MAJOR, SPANPROF_VERSION_MINOR, SPANPROF_ENABLED, )

#define SPANPROF_NAMESPACE_BEGIN \
  namespace spanprof {           \
  inline namespace SPANPROF_ABI_NAMESPACE {
#define SPANPROF_NAMESPACE_END \
  }                            \
  }

#endif  // SPANPROF_CONFIG_HPP_
