// The one pseudo-random step the samplers draw from (Marsaglia's xorshift64, 13/7/17):
// a per-thread state, no shared state, no call, async-signal-safe.
// Good enough for sampling intervals, not for anything secret.
#ifndef SPANPROF_DETAIL_BASE_XORSHIFT_HPP_
#define SPANPROF_DETAIL_BASE_XORSHIFT_HPP_

#include <spanprof/config.hpp>

#include <cstdint>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Advances `state` (never 0) and returns it.
inline std::uint64_t xorshift64(std::uint64_t& state) noexcept {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// A uniform draw in (0, 1) from the state's next value.
inline double xorshift_unit(std::uint64_t& state) noexcept {
  return (static_cast<double>(xorshift64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_BASE_XORSHIFT_HPP_
