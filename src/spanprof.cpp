// spanprof's compiled library (SPANPROF_COMPILED_LIB, config.hpp): the runtime,
// compiled once. Programs that link it define SPANPROF_COMPILED_LIB (the CMake
// target, the Meson dependency and pkg-config's spanprof-compiled do it for them)
// and their source files compile only what they use.
#define SPANPROF_COMPILING_LIB
#include <spanprof/spanprof.hpp>
