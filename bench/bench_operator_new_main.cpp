// bench_heap.cpp again, with spanprof's replacement operator new/delete as the heap
// hooks instead of tcmalloc's MallocHook (docs/heap.md).
#include <spanprof/allocation_hooks.hpp>

#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
