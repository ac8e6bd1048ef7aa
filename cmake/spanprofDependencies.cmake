# Finds what spanprof needs at run time and defines spanprof::gperftools_profiler.
# Shared by the build tree and the installed package, so a consumer's
# find_package(spanprof) finds the same libraries the build did.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(ZLIB)

if(NOT TARGET spanprof::gperftools_profiler)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(SPANPROF_PC_PROFILER QUIET IMPORTED_TARGET libprofiler)
  endif()
  add_library(spanprof::gperftools_profiler INTERFACE IMPORTED)
  if(SPANPROF_PC_PROFILER_FOUND)
    set_property(TARGET spanprof::gperftools_profiler PROPERTY INTERFACE_LINK_LIBRARIES PkgConfig::SPANPROF_PC_PROFILER)
  else()
    # No pkg-config file (older distributions, custom installs): look for the
    # library and header directly.
    find_library(SPANPROF_PROFILER_LIBRARY NAMES profiler)
    find_path(SPANPROF_PROFILER_INCLUDE_DIR NAMES gperftools/profiler.h)
    if(NOT SPANPROF_PROFILER_LIBRARY OR NOT SPANPROF_PROFILER_INCLUDE_DIR)
      message(FATAL_ERROR "spanprof needs gperftools' libprofiler (Debian: apt-get install libgoogle-perftools-dev)")
    endif()
    set_property(TARGET spanprof::gperftools_profiler PROPERTY INTERFACE_LINK_LIBRARIES "${SPANPROF_PROFILER_LIBRARY}")
    set_property(TARGET spanprof::gperftools_profiler PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${SPANPROF_PROFILER_INCLUDE_DIR}")
  endif()
endif()

# spanprof::tcmalloc makes tcmalloc the program's allocator, which the MallocHook
# heap hooks and the classic heap engine need. It is optional: link it (or
# LD_PRELOAD libtcmalloc) only in programs that profile the heap that way.
# spanprof finds tcmalloc's functions at run time, so the linker sees no reference
# to it; --no-as-needed keeps it linked anyway.
if(NOT DEFINED SPANPROF_TCMALLOC)
  set(SPANPROF_TCMALLOC AUTO)
endif()
if(NOT TARGET spanprof::tcmalloc AND NOT SPANPROF_TCMALLOC STREQUAL "OFF")
  find_library(SPANPROF_TCMALLOC_LIBRARY NAMES tcmalloc)
  if(SPANPROF_TCMALLOC_LIBRARY)
    add_library(spanprof::tcmalloc INTERFACE IMPORTED)
    set_property(TARGET spanprof::tcmalloc PROPERTY INTERFACE_LINK_LIBRARIES
      "-Wl,--push-state,--no-as-needed" "${SPANPROF_TCMALLOC_LIBRARY}" "-Wl,--pop-state")
  elseif(SPANPROF_TCMALLOC STREQUAL "ON")
    message(FATAL_ERROR "SPANPROF_TCMALLOC=ON but libtcmalloc was not found (Debian: libgoogle-perftools-dev)")
  endif()
endif()

# spanprof::curl: libcurl for the Pyroscope and OTLP uploaders. With it,
# SPANPROF_WITH_CURL=1 turns those uploaders (and their environment variables) on.
if(NOT DEFINED SPANPROF_CURL)
  set(SPANPROF_CURL AUTO)
endif()
if(NOT TARGET spanprof::curl AND NOT SPANPROF_CURL STREQUAL "OFF")
  if(SPANPROF_CURL STREQUAL "ON")
    find_dependency(CURL)
  else()
    find_package(CURL QUIET)
  endif()
  if(CURL_FOUND)
    add_library(spanprof::curl INTERFACE IMPORTED)
    set_property(TARGET spanprof::curl PROPERTY INTERFACE_LINK_LIBRARIES CURL::libcurl)
    set_property(TARGET spanprof::curl PROPERTY INTERFACE_COMPILE_DEFINITIONS SPANPROF_WITH_CURL=1)
  endif()
endif()

# spanprof::libdw: elfutils' libdw, for source lines and inlined functions
# (detail/symbolization/dwarf_source.hpp). With it, SPANPROF_WITH_LIBDW=1.
if(NOT DEFINED SPANPROF_LIBDW)
  set(SPANPROF_LIBDW AUTO)
endif()
if(NOT TARGET spanprof::libdw AND NOT SPANPROF_LIBDW STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(SPANPROF_PC_LIBDW QUIET IMPORTED_TARGET libdw)
  endif()
  if(SPANPROF_PC_LIBDW_FOUND)
    add_library(spanprof::libdw INTERFACE IMPORTED)
    set_property(TARGET spanprof::libdw PROPERTY INTERFACE_LINK_LIBRARIES PkgConfig::SPANPROF_PC_LIBDW)
    set_property(TARGET spanprof::libdw PROPERTY INTERFACE_COMPILE_DEFINITIONS SPANPROF_WITH_LIBDW=1)
  elseif(SPANPROF_LIBDW STREQUAL "ON")
    message(FATAL_ERROR "SPANPROF_LIBDW=ON but libdw was not found (Debian: apt-get install libdw-dev)")
  endif()
endif()
