// The heap tests' second build: spanprof's replacement operator new/delete as the
// heap hooks, defined here, in one source file of the program, as users do.
#include <spanprof/allocation_hooks.hpp>
