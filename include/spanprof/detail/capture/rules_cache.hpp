// A thread's memo of the call frame rules found at return addresses
// (call_frame_info.hpp finds them; the stack walker asks here first).
#ifndef SPANPROF_DETAIL_CAPTURE_RULES_CACHE_HPP_
#define SPANPROF_DETAIL_CAPTURE_RULES_CACHE_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/call_frame_info.hpp>

#if SPANPROF_HAS_CFI_WALKER

#include <cstddef>
#include <cstdint>

SPANPROF_NAMESPACE_BEGIN
namespace detail {
namespace cfi {

// One thread's memo of the rules found at return addresses. A sampled thread's
// callers are the same from one sample to the next (its request loop, the
// framework, the handler), and finding their rules anew costs a binary search
// through the object's FDE table and a run of the FDE's instructions: a dozen
// cache lines per frame, cold by the next sample 10 ms later. From the memo a
// frame costs one line. Keyed by the address and the object's .eh_frame_hdr, so
// an object unloaded and another loaded in its place miss (unless its table lands
// at the very same address: a wrong caller at worst, the walker checks every stack
// read); rules that need a DWARF expression are never kept (they point into the
// object's data). Direct-mapped, written and read only by its thread's sample
// signal handler, which the signal does not interrupt: no atomics needed. 8 KiB
// (x86-64), 11 KiB (aarch64, which tracks more callee-saved registers).
class RulesCache {
 public:
  SPANPROF_UNINSTRUMENTED bool find(std::uint64_t pc, const std::uint8_t* header, FrameRules& rules) const noexcept {
    const Entry& e = entries_[slot(pc)];
    if (e.pc != pc || e.header != header) return false;  // an empty slot: pc 0, which no walk looks up
    rules.reset(e.signal_frame);
    rules.return_address_signed = e.return_address_signed;
    rules.cfa_register = e.cfa_register;
    rules.cfa_offset = e.cfa_offset;
    for (int i = 0; i < tracked_count; ++i) rules.reg[i] = RegisterRule{static_cast<Rule>(e.rule[i]), e.n[i], nullptr};
    return true;
  }

  SPANPROF_UNINSTRUMENTED void store(std::uint64_t pc, const std::uint8_t* header, const FrameRules& rules) noexcept {
    if (rules.cfa_is_expression || !fits(rules.cfa_offset) || rules.cfa_register < 0 ||
        rules.cfa_register >= register_count)
      return;
    for (const RegisterRule& r : rules.reg)
      if (r.rule == Rule::expression || r.rule == Rule::val_expression || !fits(r.n)) return;
    Entry& e = entries_[slot(pc)];
    e.pc = 0;  // a half-written entry never matches
    e.header = header;
    e.cfa_offset = static_cast<std::int32_t>(rules.cfa_offset);
    e.cfa_register = static_cast<std::uint8_t>(rules.cfa_register);
    e.signal_frame = rules.signal_frame;
    e.return_address_signed = rules.return_address_signed;
    for (int i = 0; i < tracked_count; ++i) {
      e.rule[i] = static_cast<std::uint8_t>(rules.reg[i].rule);
      e.n[i] = static_cast<std::int32_t>(rules.reg[i].n);
    }
    e.pc = pc;
  }

 private:
  static constexpr std::size_t slots = 128;
  struct Entry {
    std::uint64_t pc = 0;
    const std::uint8_t* header = nullptr;
    std::int32_t cfa_offset = 0;
    std::int32_t n[tracked_count] = {};
    std::uint8_t cfa_register = 0;
    std::uint8_t rule[tracked_count] = {};
    bool signal_frame = false;
    bool return_address_signed = false;
  };

  static constexpr std::size_t slot(std::uint64_t pc) noexcept {
    return static_cast<std::size_t>((pc * 0x9E3779B97F4A7C15ull) >> 57);  // the top 7 bits: 128 slots
  }
  static constexpr bool fits(std::int64_t v) noexcept { return v >= INT32_MIN && v <= INT32_MAX; }
  static_assert(slots == 128, "slot() keeps the hash's top 7 bits");

  Entry entries_[slots];
};

}  // namespace cfi
}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_HAS_CFI_WALKER

#endif  // SPANPROF_DETAIL_CAPTURE_RULES_CACHE_HPP_
