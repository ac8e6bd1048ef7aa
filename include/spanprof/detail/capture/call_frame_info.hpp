// The unwind rules of one machine instruction, read from the DWARF call frame
// information every loaded object carries in .eh_frame (what C++ exceptions use).
//
// Why it is shaped like this (see docs/host-safety.md, "Stack walks"):
//  * It runs in the sample signal handler and inside the allocator's hooks, so it
//    takes no lock and allocates nothing: objects are found with glibc's
//    _dl_find_object (lock-free, async-signal-safe, glibc >= 2.35), their FDEs
//    through the binary search table of .eh_frame_hdr, and the rules are computed
//    on the caller's stack. No table is built ahead of time, so an object loaded a
//    moment ago is covered at once and nothing needs refreshing.
//  * Only reads the object's own read-only unwind data; reading the stack is the
//    walker's job (detail/capture/stack_walker.hpp), which checks every address.
//  * Entry and instruction lengths are checked against their entries, so a
//    malformed table ends the walk instead of reading past it.
//  * x86-64 and aarch64 (their DWARF register numbers, below). Elsewhere the
//    walker keeps gperftools' unwinder.
#ifndef SPANPROF_DETAIL_CAPTURE_CALL_FRAME_INFO_HPP_
#define SPANPROF_DETAIL_CAPTURE_CALL_FRAME_INFO_HPP_

#include <spanprof/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__linux__)
#include <dlfcn.h>  // _dl_find_object, DLFO_EH_SEGMENT_TYPE (glibc >= 2.35)
#endif

#if SPANPROF_ENABLED && (defined(__x86_64__) || defined(__aarch64__)) && defined(__linux__) && \
    defined(DLFO_EH_SEGMENT_TYPE)
#define SPANPROF_HAS_CFI_WALKER 1
#else
#define SPANPROF_HAS_CFI_WALKER 0
#endif

#if SPANPROF_HAS_CFI_WALKER

// The walk runs in a signal handler and reads other frames' stack slots and other
// objects' unwind data: nothing a sanitizer can check there, and instrumented it
// costs ten times as much per frame (ThreadSanitizer), enough to starve a loaded
// test process. Every function of the walk carries this; none uses a lambda (a
// lambda's body would be a separate, instrumented function).
#if defined(__GNUC__) || defined(__clang__)
#define SPANPROF_UNINSTRUMENTED __attribute__((no_sanitize("address", "thread", "undefined")))
#else
#define SPANPROF_UNINSTRUMENTED
#endif

SPANPROF_NAMESPACE_BEGIN
namespace detail {
namespace cfi {

#if defined(__x86_64__)
// DWARF register numbers of the x86-64 psABI. The return address column is rip
// itself: a caller's pc is what the callee's rules recover for it.
enum : int { rax = 0, rdx = 1, rcx = 2, rbx = 3, rsi = 4, rdi = 5, rbp = 6, rsp = 7, r12 = 12, r15 = 15, rip = 16 };
inline constexpr int register_count = 17;
inline constexpr int sp_register = rsp;
inline constexpr int fp_register = rbp;
inline constexpr int pc_register = rip;
inline constexpr int return_address_column = rip;
inline constexpr bool return_address_in_register = false;  // a call pushes it
inline constexpr std::int64_t cfa_offset_at_entry = 8;     // the CFA is rsp + 8 where a function begins
// The registers whose rules a walk applies: the return address, the frame pointer
// and the other callee-saved registers a later CFA rule may be based on.
inline constexpr int tracked_registers[] = {rbx, rbp, 12, 13, 14, 15, rip};
inline constexpr int tracked_count = 7;
constexpr int tracked_slot(int r) noexcept {
  return r == rbx ? 0 : r == rbp ? 1 : (r >= 12 && r <= 15) ? r - 10 : r == rip ? 6 : -1;
}
#else
// DWARF register numbers of AAPCS64: x0-x30 are 0-30 (x29 the frame pointer, x30
// the link register, the return address column), sp is 31. The pc has no DWARF
// number: the walk keeps a frame's pc as 32. A leaf function leaves its return
// address in x30, and with pointer authentication signs it (RA_SIGN_STATE).
enum : int { x29 = 29, x30 = 30, sp = 31, pc = 32 };
inline constexpr int register_count = 33;
inline constexpr int sp_register = sp;
inline constexpr int fp_register = x29;
inline constexpr int pc_register = pc;
inline constexpr int return_address_column = x30;
inline constexpr bool return_address_in_register = true;  // bl writes it to x30
inline constexpr std::int64_t cfa_offset_at_entry = 0;    // the CFA is sp where a function begins
// The callee-saved registers x19-x28, the frame pointer and the link register.
inline constexpr int tracked_registers[] = {19, 20, 21, 22, 23, 24, 25, 26, 27, 28, x29, x30};
inline constexpr int tracked_count = 12;
constexpr int tracked_slot(int r) noexcept { return r >= 19 && r <= 30 ? r - 19 : -1; }
#endif

// A return address without its pointer authentication code (aarch64: xpaclri,
// a no-op on cores without pointer authentication).
SPANPROF_UNINSTRUMENTED inline std::uint64_t strip_pointer_authentication(std::uint64_t address) noexcept {
#if defined(__aarch64__)
  register std::uint64_t lr __asm__("x30") = address;
  __asm__("hint 7" : "+r"(lr));  // xpaclri
  return lr;
#else
  return address;
#endif
}

// A thread's registers as far as a walk knows them: every register of the
// interrupted frame, then only what the rules recover (the callee-saved ones).
struct Registers {
  std::uint64_t value[register_count];  // only those in `known` are ever read
  std::uint64_t known = 0;              // bit r: value[r] is valid

  SPANPROF_UNINSTRUMENTED bool has(int r) const noexcept {
    return r >= 0 && r < register_count && ((known >> r) & 1) != 0;
  }
  SPANPROF_UNINSTRUMENTED void set(int r, std::uint64_t v) noexcept {
    value[r] = v;
    known |= std::uint64_t{1} << r;
  }
};

// Reads the bytes of an entry, never past its end; `ok` turns false at the first
// read that would.
struct ByteCursor {
  const std::uint8_t* at;
  const std::uint8_t* end;
  bool ok = true;

  SPANPROF_UNINSTRUMENTED bool take(std::size_t n) noexcept {
    if (!ok || static_cast<std::size_t>(end - at) < n) return ok = false;
    return true;
  }
  template <class T>
  SPANPROF_UNINSTRUMENTED T fixed() noexcept {
    T v{};
    if (!take(sizeof(T))) return v;
    std::memcpy(&v, at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  SPANPROF_UNINSTRUMENTED std::uint64_t uleb() noexcept {
    std::uint64_t v = 0;
    for (unsigned shift = 0; take(1); shift += 7) {
      const std::uint8_t byte = *at++;
      if (shift < 64) v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return 0;
  }
  SPANPROF_UNINSTRUMENTED std::int64_t sleb() noexcept {
    std::int64_t v = 0;
    unsigned shift = 0;
    std::uint8_t byte = 0;
    do {
      if (!take(1)) return 0;
      byte = *at++;
      if (shift < 64) v |= static_cast<std::int64_t>(static_cast<std::uint64_t>(byte & 0x7f) << shift);
      shift += 7;
    } while (byte & 0x80);
    if (shift < 64 && (byte & 0x40)) v |= -(static_cast<std::int64_t>(1) << shift);
    return v;
  }
  // A pointer in one of the DW_EH_PE encodings. `data_base` serves datarel.
  SPANPROF_UNINSTRUMENTED std::uint64_t pointer(std::uint8_t encoding, std::uint64_t data_base) noexcept {
    if (encoding == 0xff) return 0;  // omit
    const auto here = reinterpret_cast<std::uint64_t>(at);
    std::uint64_t v = 0;
    switch (encoding & 0x0f) {
      case 0x00: v = fixed<std::uint64_t>(); break;  // absptr
      case 0x01: v = uleb(); break;
      case 0x02: v = fixed<std::uint16_t>(); break;
      case 0x03: v = fixed<std::uint32_t>(); break;
      case 0x04: v = fixed<std::uint64_t>(); break;
      case 0x09: v = static_cast<std::uint64_t>(sleb()); break;
      case 0x0a: v = static_cast<std::uint64_t>(static_cast<std::int64_t>(fixed<std::int16_t>())); break;
      case 0x0b: v = static_cast<std::uint64_t>(static_cast<std::int64_t>(fixed<std::int32_t>())); break;
      case 0x0c: v = static_cast<std::uint64_t>(fixed<std::int64_t>()); break;
      default: ok = false; return 0;
    }
    switch (encoding & 0x70) {
      case 0x00: break;
      case 0x10: v += here; break;       // pcrel
      case 0x30: v += data_base; break;  // datarel
      default: ok = false; return 0;     // textrel, funcrel, aligned: not used by linkers for these targets
    }
    if (encoding & 0x80) ok = false;  // indirect: would dereference data we do not check
    return v;
  }
};

// How a register of the caller is recovered.
enum class Rule : std::uint8_t {
  same,            // unchanged (callee-saved registers the function does not touch)
  undefined,       // not recoverable; for the return address: the outermost frame
  offset,          // saved at CFA + n
  val_offset,      // is CFA + n
  in_register,     // is the value of register n
  expression,      // saved at the address a DWARF expression computes
  val_expression,  // is what a DWARF expression computes
};

struct RegisterRule {
  Rule rule;
  std::int64_t n;                  // offset, or register number
  const std::uint8_t* block;       // expression: its bytes, preceded by their length
};

// Left uninitialized when declared (a walk declares one per frame): reset()
// gives the rules a CIE starts from.
struct FrameRules {
  bool cfa_is_expression;
  int cfa_register;
  std::int64_t cfa_offset;
  const std::uint8_t* cfa_block;
  RegisterRule reg[tracked_count];
  bool signal_frame;            // the caller's PC is exact, not a return address
  bool return_address_signed;   // aarch64: RA_SIGN_STATE, toggled by DW_CFA_AARCH64_negate_ra_state

  SPANPROF_UNINSTRUMENTED void reset(bool signal) noexcept {
    cfa_is_expression = false;
    cfa_register = sp_register;
    cfa_offset = cfa_offset_at_entry;
    cfa_block = nullptr;
    for (RegisterRule& r : reg) r = RegisterRule{Rule::same, 0, nullptr};
    signal_frame = signal;
    return_address_signed = false;
  }
};

// What a CIE says for all FDEs that point to it.
struct CommonInfo {
  const std::uint8_t* address = nullptr;  // identifies it (cached per walk)
  const std::uint8_t* instructions = nullptr;
  const std::uint8_t* end = nullptr;
  std::uint64_t code_align = 1;
  std::int64_t data_align = -8;
  std::uint8_t fde_encoding = 0;
  bool has_augmentation_data = false;
  bool signal_frame = false;
  int return_register = return_address_column;
  FrameRules initial;  // the rules after the CIE's initial instructions (set by parse_cie)
};

// The body of the CIE or FDE at `p` (which starts with its length). False at the
// table's terminator or an implausible length.
SPANPROF_UNINSTRUMENTED inline bool parse_entry_bounds(const std::uint8_t* p, const std::uint8_t*& body,
                                                       const std::uint8_t*& end) noexcept {
  std::uint32_t length32 = 0;
  std::memcpy(&length32, p, 4);
  if (length32 == 0) return false;  // terminator
  if (length32 == 0xffffffffu) {
    std::uint64_t length64 = 0;
    std::memcpy(&length64, p + 4, 8);
    if (length64 > (std::uint64_t{1} << 30)) return false;
    body = p + 12;
    end = body + length64;
    return true;
  }
  body = p + 4;
  end = body + length32;
  return true;
}

// The rule slot of DWARF register `r` (-1: a register the walk does not track).
SPANPROF_UNINSTRUMENTED inline int rule_slot(std::uint64_t r) noexcept {
  return r < register_count ? tracked_slot(static_cast<int>(r)) : -1;
}

SPANPROF_UNINSTRUMENTED inline void set_rule(FrameRules& rules, std::uint64_t r, Rule rule, std::int64_t n,
                                             const std::uint8_t* block = nullptr) noexcept {
  const int slot = rule_slot(r);
  if (slot >= 0) rules.reg[slot] = RegisterRule{rule, n, block};
}

// DW_CFA_restore: the rule the CIE gave register `r` (unchanged while the CIE's
// own instructions run).
SPANPROF_UNINSTRUMENTED inline void restore_rule(FrameRules& rules, std::uint64_t r,
                                                 const FrameRules* initial) noexcept {
  const int slot = rule_slot(r);
  if (slot >= 0) rules.reg[slot] = initial != nullptr ? initial->reg[slot] : RegisterRule{Rule::same, 0, nullptr};
}

// A DWARF block (an expression) at the cursor: returns where it starts (its
// length) and moves past it; null when it runs past the entry.
SPANPROF_UNINSTRUMENTED inline const std::uint8_t* take_block(ByteCursor& cursor) noexcept {
  const std::uint8_t* block = cursor.at;
  const std::uint64_t length = cursor.uleb();
  if (!cursor.take(length)) return nullptr;
  cursor.at += length;
  return block;
}

// Runs call frame instructions from `cursor` while the location stays at or below
// `pc`. `initial` serves DW_CFA_restore. False: an instruction it cannot follow.
SPANPROF_UNINSTRUMENTED inline bool run_instructions(ByteCursor cursor, const CommonInfo& cie, std::uint64_t location,
                                                     std::uint64_t pc, const FrameRules* initial,
                                                     FrameRules& rules) noexcept {
  constexpr int remember_depth = 4;  // GCC nests one level; each costs ~200 bytes of stack
  // Raw room: constructing the states up front would cost more than the rules.
  alignas(FrameRules) unsigned char remembered_room[remember_depth * sizeof(FrameRules)];
  auto* remembered = reinterpret_cast<FrameRules*>(remembered_room);
  int depth = 0;
  while (cursor.ok && cursor.at < cursor.end) {
    const std::uint8_t op = *cursor.at++;
    const std::uint8_t low = op & 0x3f;
    switch (op >> 6) {
      case 1:  // DW_CFA_advance_loc
        location += low * cie.code_align;
        if (location > pc) return true;
        continue;
      case 2:  // DW_CFA_offset
        set_rule(rules, low, Rule::offset, static_cast<std::int64_t>(cursor.uleb()) * cie.data_align);
        continue;
      case 3:  // DW_CFA_restore
        restore_rule(rules, low, initial);
        continue;
      default:
        break;
    }
    switch (op) {
      case 0x00: break;  // nop
      case 0x01: {       // set_loc
        location = cursor.pointer(cie.fde_encoding, 0);
        if (location > pc) return true;
        break;
      }
      case 0x02:
      case 0x03:
      case 0x04:  // advance_loc1, 2, 4
        location += (op == 0x02 ? cursor.fixed<std::uint8_t>()
                     : op == 0x03 ? cursor.fixed<std::uint16_t>() : cursor.fixed<std::uint32_t>()) * cie.code_align;
        if (location > pc) return true;
        break;
      case 0x05: {  // offset_extended
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::offset, static_cast<std::int64_t>(cursor.uleb()) * cie.data_align);
        break;
      }
      case 0x06: restore_rule(rules, cursor.uleb(), initial); break;
      case 0x07: set_rule(rules, cursor.uleb(), Rule::undefined, 0); break;
      case 0x08: set_rule(rules, cursor.uleb(), Rule::same, 0); break;
      case 0x09: {  // register
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::in_register, static_cast<std::int64_t>(cursor.uleb()));
        break;
      }
      case 0x0a:  // remember_state
        if (depth == remember_depth) return false;
        new (&remembered[depth++]) FrameRules(rules);
        break;
      case 0x0b:  // restore_state: the CFA rule too, as GCC's epilogues expect
        if (depth == 0) return false;
        rules = remembered[--depth];
        break;
      case 0x0c:  // def_cfa
        rules.cfa_register = static_cast<int>(cursor.uleb());
        rules.cfa_offset = static_cast<std::int64_t>(cursor.uleb());
        rules.cfa_is_expression = false;
        break;
      case 0x0d: rules.cfa_register = static_cast<int>(cursor.uleb()); rules.cfa_is_expression = false; break;
      case 0x0e: rules.cfa_offset = static_cast<std::int64_t>(cursor.uleb()); break;
      case 0x0f:  // def_cfa_expression
        rules.cfa_block = take_block(cursor);
        rules.cfa_is_expression = rules.cfa_block != nullptr;
        break;
      case 0x10: {  // expression
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::expression, 0, take_block(cursor));
        break;
      }
      case 0x11: {  // offset_extended_sf
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::offset, cursor.sleb() * cie.data_align);
        break;
      }
      case 0x12:  // def_cfa_sf
        rules.cfa_register = static_cast<int>(cursor.uleb());
        rules.cfa_offset = cursor.sleb() * cie.data_align;
        rules.cfa_is_expression = false;
        break;
      case 0x13: rules.cfa_offset = cursor.sleb() * cie.data_align; break;
      case 0x14: {  // val_offset
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::val_offset, static_cast<std::int64_t>(cursor.uleb()) * cie.data_align);
        break;
      }
      case 0x15: {  // val_offset_sf
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::val_offset, cursor.sleb() * cie.data_align);
        break;
      }
      case 0x16: {  // val_expression
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::val_expression, 0, take_block(cursor));
        break;
      }
      case 0x2e: cursor.uleb(); break;  // GNU_args_size
#if defined(__aarch64__)
      case 0x2d: rules.return_address_signed = !rules.return_address_signed; break;  // AARCH64_negate_ra_state
#endif
      case 0x2f: {                      // GNU_negative_offset_extended
        const std::uint64_t r = cursor.uleb();
        set_rule(rules, r, Rule::offset, -static_cast<std::int64_t>(cursor.uleb()) * cie.data_align);
        break;
      }
      default:
        return false;
    }
  }
  return cursor.ok;
}

// Reads the CIE at `p`. False: a version or augmentation it cannot follow.
SPANPROF_UNINSTRUMENTED inline bool parse_cie(const std::uint8_t* p, CommonInfo& cie) noexcept {
  const std::uint8_t* body = nullptr;
  const std::uint8_t* end = nullptr;
  if (!parse_entry_bounds(p, body, end)) return false;
  ByteCursor c{body, end};
  if (c.fixed<std::uint32_t>() != 0) return false;  // not a CIE
  const std::uint8_t version = c.fixed<std::uint8_t>();
  if (version != 1 && version != 3) return false;
  const char* augmentation = reinterpret_cast<const char*>(c.at);
  std::size_t aug_length = 0;
  while (c.take(1) && *c.at != 0) ++c.at, ++aug_length;
  if (!c.take(1)) return false;
  ++c.at;
  if (aug_length > 0 && augmentation[0] != 'z') return false;  // "eh" and other pre-'z' forms
  cie = CommonInfo{};
  cie.address = p;
  cie.code_align = c.uleb();
  cie.data_align = c.sleb();
  cie.return_register = version == 1 ? c.fixed<std::uint8_t>() : static_cast<int>(c.uleb());
  if (cie.return_register != return_address_column) return false;
  if (aug_length > 0) {
    cie.has_augmentation_data = true;
    const std::uint64_t data_length = c.uleb();
    const std::uint8_t* data_end = c.at + data_length;
    if (!c.take(data_length)) return false;
    for (std::size_t i = 1; i < aug_length && c.ok; ++i) {
      switch (augmentation[i]) {
        case 'R': cie.fde_encoding = c.fixed<std::uint8_t>(); break;
        case 'L': c.fixed<std::uint8_t>(); break;
        case 'P': {
          const std::uint8_t encoding = c.fixed<std::uint8_t>();
          ByteCursor skip{c.at, data_end};
          skip.pointer(encoding & 0x7f, 0);  // only its size matters
          if (!skip.ok) return false;
          c.at = skip.at;
          break;
        }
        case 'S': cie.signal_frame = true; break;
        case 'B': case 'G': break;  // AArch64 key / MTE: no data
        default: c.at = data_end; i = aug_length; break;  // unknown: the data length lets us skip it
      }
    }
    c.at = data_end;
  }
  if (!c.ok) return false;
  cie.instructions = c.at;
  cie.end = end;
  cie.initial.reset(cie.signal_frame);
  return run_instructions(ByteCursor{cie.instructions, cie.end}, cie, 0, ~std::uint64_t{0}, nullptr, cie.initial);
}

// One object's unwind index: where its .eh_frame_hdr binary search table is.
struct ObjectIndex {
  std::uint64_t start = 0, end = 0;       // the object's mapping
  const std::uint8_t* table = nullptr;    // pairs of int32 (initial location, FDE), relative to `header`
  const std::uint8_t* header = nullptr;   // .eh_frame_hdr
  std::uint64_t count = 0;
};

// The object mapped at `pc`, with its FDE search table. False: no object there
// (JIT code, an unmapped address) or no usable table (the walker then tries
// frame pointers).
SPANPROF_UNINSTRUMENTED inline bool find_object(std::uint64_t pc, ObjectIndex& out) noexcept {
  dl_find_object found{};
  if (::_dl_find_object(reinterpret_cast<void*>(pc), &found) != 0) return false;
  out = ObjectIndex{};
  out.start = reinterpret_cast<std::uint64_t>(found.dlfo_map_start);
  out.end = reinterpret_cast<std::uint64_t>(found.dlfo_map_end);
  const auto* header = static_cast<const std::uint8_t*>(found.dlfo_eh_frame);
  if (header == nullptr || header[0] != 1) return true;
  const std::uint8_t frame_pointer_encoding = header[1], count_encoding = header[2], table_encoding = header[3];
  // The table is usable only in its standard form: datarel sdata4 pairs.
  if (table_encoding != 0x3b || count_encoding == 0xff) return true;
  ByteCursor c{header + 4, header + 4 + 16};
  c.pointer(frame_pointer_encoding, reinterpret_cast<std::uint64_t>(header));
  const std::uint64_t count = c.pointer(count_encoding, reinterpret_cast<std::uint64_t>(header));
  if (!c.ok || count == 0 || count > (std::uint64_t{1} << 26)) return true;
  out.header = header;
  out.table = c.at;
  out.count = count;
  return true;
}

// Field `field` (0: initial location, 1: FDE address) of entry `i` of a search table.
SPANPROF_UNINSTRUMENTED inline std::uint64_t table_entry(const std::uint8_t* table, std::uint64_t i, int field,
                                                         std::uint64_t base) noexcept {
  std::int32_t v = 0;
  std::memcpy(&v, table + i * 8 + static_cast<std::uint64_t>(field) * 4, 4);
  return base + static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
}

// The rules at `pc` in `object`. `cie_cache` keeps the last CIE parsed (most FDEs
// of an object share one). False: no FDE covers pc, or it cannot be followed.
SPANPROF_UNINSTRUMENTED inline bool find_rules(const ObjectIndex& object, std::uint64_t pc, CommonInfo& cie_cache,
                                               FrameRules& rules) noexcept {
  if (object.table == nullptr) return false;
  const auto base = reinterpret_cast<std::uint64_t>(object.header);
  // The last entry whose initial location is at or below pc.
  std::uint64_t low = 0, high = object.count;
  while (high - low > 1) {
    const std::uint64_t mid = low + (high - low) / 2;
    if (table_entry(object.table, mid, 0, base) <= pc) low = mid;
    else high = mid;
  }
  if (table_entry(object.table, low, 0, base) > pc) return false;
  const auto* fde = reinterpret_cast<const std::uint8_t*>(table_entry(object.table, low, 1, base));
  const std::uint8_t* body = nullptr;
  const std::uint8_t* end = nullptr;
  if (!parse_entry_bounds(fde, body, end)) return false;
  ByteCursor c{body, end};
  const std::uint32_t cie_offset = c.fixed<std::uint32_t>();
  if (!c.ok || cie_offset == 0) return false;
  const std::uint8_t* cie_address = body - cie_offset;
  if (cie_cache.address != cie_address && !parse_cie(cie_address, cie_cache)) {
    cie_cache.address = nullptr;
    return false;
  }
  const std::uint64_t begin = c.pointer(cie_cache.fde_encoding, 0);
  const std::uint64_t range = c.pointer(cie_cache.fde_encoding & 0x0f, 0);
  if (!c.ok || pc < begin || pc - begin >= range) return false;
  if (cie_cache.has_augmentation_data) {
    const std::uint64_t length = c.uleb();
    if (!c.take(length)) return false;
    c.at += length;
  }
  rules = cie_cache.initial;
  return run_instructions(c, cie_cache, begin, pc, &cie_cache.initial, rules);
}

}  // namespace cfi
}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_HAS_CFI_WALKER

#endif  // SPANPROF_DETAIL_CAPTURE_CALL_FRAME_INFO_HPP_
