// The stack walk test's workload (walk_workload.cpp), built twice: with frame
// pointers (namespace walk_fp) and without (walk_nofp).
#pragma once

#include <cstdint>

namespace walk_fp {
// Runs outer_<chain> -> middle_<chain> -> hot_<chain> for `iterations` rounds.
std::uint64_t run_chain(int chain, std::uint64_t iterations);
}  // namespace walk_fp

namespace walk_nofp {
std::uint64_t run_chain(int chain, std::uint64_t iterations);
}  // namespace walk_nofp
