// Eight call chains, outer_N -> middle_N -> hot_N, each thread of the stack walk
// test running its own. Compiled twice into the tests, at -O2 with and without
// frame pointers (SPANPROF_WALK_VARIANT names the namespace), so the walker is
// checked on both kinds of code a user builds.
//
// hot_N calls nothing: every sample that lands in it must show it on top and its
// two callers above it. The constants differ per chain, so the compiler cannot
// fold the eight chains into one function (identical code folding at -O2).
#include "walk_workload.hpp"

#include <cstdint>

namespace SPANPROF_WALK_VARIANT {

#define SPANPROF_WALK_CHAIN(n)                                                          \
  __attribute__((noinline)) std::uint64_t hot_##n(std::uint64_t iterations) {           \
    std::uint64_t x = 0x9E3779B97F4A7C15ull + n;                                        \
    for (std::uint64_t i = 0; i < iterations; ++i) {                                    \
      x ^= x << (13 + n % 3);                                                           \
      x ^= x >> 7;                                                                      \
      x ^= x << 17;                                                                     \
      x += i * (2 * n + 1);                                                             \
    }                                                                                   \
    return x;                                                                           \
  }                                                                                     \
  __attribute__((noinline)) std::uint64_t middle_##n(std::uint64_t iterations) {        \
    const std::uint64_t r = hot_##n(iterations);                                        \
    asm volatile("" : : "r"(r) : "memory"); /* no tail call: this frame stays */       \
    return r * (n + 3);                                                                 \
  }                                                                                     \
  __attribute__((noinline)) std::uint64_t outer_##n(std::uint64_t iterations) {         \
    const std::uint64_t r = middle_##n(iterations);                                     \
    asm volatile("" : : "r"(r) : "memory");                                             \
    return r + n;                                                                       \
  }

SPANPROF_WALK_CHAIN(0)
SPANPROF_WALK_CHAIN(1)
SPANPROF_WALK_CHAIN(2)
SPANPROF_WALK_CHAIN(3)
SPANPROF_WALK_CHAIN(4)
SPANPROF_WALK_CHAIN(5)
SPANPROF_WALK_CHAIN(6)
SPANPROF_WALK_CHAIN(7)

std::uint64_t run_chain(int chain, std::uint64_t iterations) {
  switch (chain) {
    case 0: return outer_0(iterations);
    case 1: return outer_1(iterations);
    case 2: return outer_2(iterations);
    case 3: return outer_3(iterations);
    case 4: return outer_4(iterations);
    case 5: return outer_5(iterations);
    case 6: return outer_6(iterations);
    default: return outer_7(iterations);
  }
}

}  // namespace SPANPROF_WALK_VARIANT
