// spanprof — span-scoped profiles for C++ services.
// Build-time configuration. Every macro has a default and is tested by value,
// so -DSPANPROF_ENABLED=0 really turns the SDK off.
#ifndef SPANPROF_CONFIG_HPP_
#define SPANPROF_CONFIG_HPP_

#include <cstdlib>
#include <exception>

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

// SPANPROF_WITH_LIBDW=1 (the build system defines it when it links elfutils'
// libdw): profiles name inlined functions and carry file and line
// (detail/symbolization/dwarf_source.hpp). Without it, function names alone.
#ifndef SPANPROF_WITH_LIBDW
#define SPANPROF_WITH_LIBDW 0
#endif

#if (SPANPROF_ENABLED != 0 && SPANPROF_ENABLED != 1) || (SPANPROF_WITH_CURL != 0 && SPANPROF_WITH_CURL != 1) || \
    (SPANPROF_WITH_LIBDW != 0 && SPANPROF_WITH_LIBDW != 1)
#error "SPANPROF_ENABLED, SPANPROF_WITH_CURL and SPANPROF_WITH_LIBDW must be 0 or 1"
#endif

// Where the runtime is compiled: start(), flush(), shutdown(), stats(), Options(),
// the guard's slow paths and everything behind them. Once per program, so that a
// source file that opens guards compiles the guard's fast path only:
// - header-only (the default): the one source file that defines
//   SPANPROF_IMPLEMENTATION before including <spanprof/spanprof.hpp>, as with stb's
//   and doctest's single headers;
// - SPANPROF_COMPILED_LIB (as spdlog's SPDLOG_COMPILED_LIB): spanprof's compiled
//   library (CMake spanprof::spanprof_compiled, Meson option compiled_lib,
//   pkg-config spanprof-compiled), which every shared object of a process that
//   links it shares.
// With the compiled library SPANPROF_IMPLEMENTATION is ignored, so the same source
// file builds both ways. A program with neither fails to link, naming
// detail::define_SPANPROF_IMPLEMENTATION_in_one_source_file; one with two
// implementation files fails to link with multiple definitions of start().
// SPANPROF_COMPILING_LIB is defined by the compiled library's own source file.
// Compiled out (SPANPROF_ENABLED=0), everything is an inline no-op: no runtime.
#if SPANPROF_ENABLED && \
    ((defined(SPANPROF_IMPLEMENTATION) && !defined(SPANPROF_COMPILED_LIB)) || defined(SPANPROF_COMPILING_LIB))
#define SPANPROF_DEFINE_RUNTIME 1
#else
#define SPANPROF_DEFINE_RUNTIME 0
#endif

// Exceptions. spanprof catches what may throw on its side (allocation, a user's
// uploader or sampler) and never lets an exception reach the host. Built with
// -fno-exceptions the same code compiles with its handlers dropped: nothing there
// throws (errors are return values), and an allocation failure ends the process
// as it does everywhere else in such a program.
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define SPANPROF_HAS_EXCEPTIONS 1
#define SPANPROF_TRY try
#define SPANPROF_CATCH_ALL catch (...)
#define SPANPROF_CATCH_STD(e) catch (const ::std::exception& e)
#define SPANPROF_RETHROW throw
#define SPANPROF_THROW(exception) throw exception
#else
#define SPANPROF_HAS_EXCEPTIONS 0
#define SPANPROF_TRY if (true)
#define SPANPROF_CATCH_ALL if (false)
#define SPANPROF_CATCH_STD(e) if (const ::std::exception& e = ::std::exception(); false)
#define SPANPROF_RETHROW ::std::abort()
#define SPANPROF_THROW(exception) ::std::abort()
#endif
// Run-time type information: only to name the type of an exception a user's code
// let through; built with -fno-rtti that message says "an exception" instead.
#if defined(__GXX_RTTI) || defined(__cpp_rtti)
#define SPANPROF_HAS_RTTI 1
#else
#define SPANPROF_HAS_RTTI 0
#endif

// Default visibility: singletons live in inline functions and stay one per
// process even when several shared objects include spanprof (the namespace
// carries it, below; a declaration outside the namespace says it itself).
#if defined(__GNUC__)
#define SPANPROF_API __attribute__((visibility("default")))
#define SPANPROF_NOINLINE __attribute__((noinline))
#define SPANPROF_ALWAYS_INLINE __attribute__((always_inline))
#define SPANPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define SPANPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)
// Thread-local storage that a signal handler or an allocation hook reads: the
// initial-exec model never allocates the thread's block lazily, as the default
// model does for code in a dlopen'ed library (from inside malloc, or a handler
// that interrupted it, that would recurse into malloc).
#define SPANPROF_SIGNAL_SAFE_TLS __attribute__((tls_model("initial-exec")))
#else
#define SPANPROF_API
#define SPANPROF_NOINLINE
#define SPANPROF_ALWAYS_INLINE
#define SPANPROF_LIKELY(x) (x)
#define SPANPROF_UNLIKELY(x) (x)
#define SPANPROF_SIGNAL_SAFE_TLS
#endif

// The ABI namespace encodes the version and every feature switch that changes a
// declaration (SPANPROF_ENABLED, SPANPROF_WITH_CURL, SPANPROF_WITH_LIBDW): translation
// units built with different settings get different types instead of one name with
// two layouts (an ODR violation). A process that mixes them anyway is told so once
// at start(). Without libdw the name is as before it existed.
#if SPANPROF_WITH_LIBDW
#define SPANPROF_ABI_CONCAT_(major, minor, enabled, curl) spanprof_v##major##_##minor##_e##enabled##c##curl##d1
#else
#define SPANPROF_ABI_CONCAT_(major, minor, enabled, curl) spanprof_v##major##_##minor##_e##enabled##c##curl
#endif
#define SPANPROF_ABI_CONCAT(major, minor, enabled, curl) SPANPROF_ABI_CONCAT_(major, minor, enabled, curl)
#define SPANPROF_ABI_NAMESPACE \
  SPANPROF_ABI_CONCAT(SPANPROF_VERSION_MAJOR, SPANPROF_VERSION_MINOR, SPANPROF_ENABLED, SPANPROF_WITH_CURL)
#define SPANPROF_STRINGIFY_(x) #x
#define SPANPROF_STRINGIFY(x) SPANPROF_STRINGIFY_(x)
#define SPANPROF_ABI_NAME SPANPROF_STRINGIFY(SPANPROF_ABI_NAMESPACE)

// Every name keeps default visibility, whatever -fvisibility a shared object is
// built with: copies of spanprof's inline state in several shared objects (its
// thread-locals, its singletons) are one per process when their symbols meet —
// always with the compiled library as a shared library. Otherwise a plugin's
// guard would use its own thread state beside the runtime it shares.
#define SPANPROF_NAMESPACE_BEGIN \
  namespace spanprof {           \
  inline namespace SPANPROF_ABI_NAMESPACE SPANPROF_API {
#define SPANPROF_NAMESPACE_END \
  }                            \
  }

#endif  // SPANPROF_CONFIG_HPP_
