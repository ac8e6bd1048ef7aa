// Walks a thread's stack from a signal's context or from the current function,
// taking no lock and allocating nothing: safe in the sample signal handler and
// inside the allocator's hooks, whatever the interrupted thread holds.
//
// Why it is shaped like this (see docs/host-safety.md, "Stack walks"):
//  * gperftools' walker (libunwind on Debian) takes the loader lock and a mutex of
//    its own for every frame: a handler that interrupted a thread holding one of
//    them waited for the other, and the host hung (the dlopen test, 3 runs in 91).
//    This walker follows the call frame information (detail/capture/call_frame_info.hpp),
//    which needs neither, so -O2 code without frame pointers unwinds exactly.
//  * Every stack read is checked: between the interrupted stack pointer and the
//    top of the thread's stack a read is a plain load; anywhere else (a fiber's
//    stack, an alternate signal stack) it goes through process_vm_readv, which
//    fails instead of faulting on an unmapped address.
//  * Where an object has no unwind information (JIT code), one frame-pointer step,
//    checked against the stack pointer.
//  * Each step must move up the stack (or cross a signal frame), so a corrupt
//    stack ends the walk instead of looping.
#ifndef SPANPROF_DETAIL_CAPTURE_STACK_WALKER_HPP_
#define SPANPROF_DETAIL_CAPTURE_STACK_WALKER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/base/loader_lock_gate.hpp>
#include <spanprof/detail/capture/call_frame_info.hpp>
#include <spanprof/detail/capture/rules_cache.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if !SPANPROF_HAS_CFI_WALKER
#include <gperftools/profiler.h>
#endif

#include <gnu/libc-version.h>
#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#if SPANPROF_HAS_CFI_WALKER

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The most frames a walk returns (Options::max_stack_depth is at most 256; the
// heap hooks walk a few more, their own and the allocator's, and drop them).
inline constexpr int max_walk_depth = 256;

// The top (highest address, exclusive) of the calling thread's stack; 0 when
// unknown. Not async-signal-safe (it may allocate): called when a thread's
// sampler or heap log is made, and kept.
inline std::uint64_t this_thread_stack_top() noexcept {
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) != 0) return 0;
  void* address = nullptr;
  std::size_t size = 0;
  const int failed = ::pthread_attr_getstack(&attr, &address, &size);
  ::pthread_attr_destroy(&attr);
  return failed != 0 ? 0 : reinterpret_cast<std::uint64_t>(address) + size;
}

// Reads the words of one stack walk.
class StackReader {
 public:
  // The range [sp, top) is mapped when sp lies below a known top of the thread's
  // own stack: those reads are plain loads.
  SPANPROF_UNINSTRUMENTED StackReader(std::uint64_t sp, std::uint64_t stack_top) noexcept
      : direct_low_(sp),
        direct_high_(stack_top != 0 && sp < stack_top && stack_top - sp < (1ull << 32) ? stack_top : 0) {}

  SPANPROF_UNINSTRUMENTED bool read(std::uint64_t address, std::uint64_t& out) noexcept {
    if (address >= direct_low_ && address < direct_high_ && direct_high_ - address >= 8) {
      out = load(address);
      return true;
    }
    return read_checked(address, out);
  }

 private:
  // Another frame's stack slots: an instrumented load would report them as
  // outside the objects the sanitizer knows.
  SPANPROF_UNINSTRUMENTED static std::uint64_t load(std::uint64_t address) noexcept {
    // Not memcpy: a sanitizer's memcpy checks the range even when called from here.
    return *reinterpret_cast<const volatile std::uint64_t*>(address);
  }

  SPANPROF_UNINSTRUMENTED bool read_checked(std::uint64_t address, std::uint64_t& out) noexcept {
    if (address < 4096 || checked_reads_ >= max_checked_reads) return false;
    ++checked_reads_;
    if (pid_ == 0) pid_ = ::getpid();
    iovec local{&out, sizeof out};
    iovec remote{reinterpret_cast<void*>(address), sizeof out};
    return ::syscall(SYS_process_vm_readv, pid_, &local, 1, &remote, 1, 0) == static_cast<long>(sizeof out);
  }

  static constexpr int max_checked_reads = 256;
  std::uint64_t direct_low_;
  std::uint64_t direct_high_;
  int checked_reads_ = 0;
  pid_t pid_ = 0;
};

namespace cfi {

// The value stack of a DWARF expression; every operation fails rather than
// under- or overflow it.
struct ExpressionStack {
  std::uint64_t value[16];
  int top = 0;

  SPANPROF_UNINSTRUMENTED bool push(std::uint64_t v) noexcept {
    if (top == 16) return false;
    value[top++] = v;
    return true;
  }
  SPANPROF_UNINSTRUMENTED bool has(int n) const noexcept { return top >= n; }
  SPANPROF_UNINSTRUMENTED std::uint64_t& at(int from_top) noexcept { return value[top - 1 - from_top]; }
};

// Pops b and a, pushes a `op` b. False: not a binary operation unwind tables use.
SPANPROF_UNINSTRUMENTED inline bool apply_binary(std::uint8_t op, ExpressionStack& e) noexcept {
  if (!e.has(2)) return false;
  const std::uint64_t b = e.at(0), a = e.at(1);
  const auto sa = static_cast<std::int64_t>(a), sb = static_cast<std::int64_t>(b);
  std::uint64_t v = 0;
  switch (op) {
    case 0x1a: v = a & b; break;
    case 0x1c: v = a - b; break;
    case 0x1e: v = a * b; break;
    case 0x21: v = a | b; break;
    case 0x22: v = a + b; break;
    case 0x24: v = b < 64 ? a << b : 0; break;
    case 0x25: v = b < 64 ? a >> b : 0; break;
    case 0x27: v = a ^ b; break;
    case 0x29: v = a == b; break;
    case 0x2a: v = sa >= sb; break;
    case 0x2b: v = sa > sb; break;
    case 0x2c: v = sa <= sb; break;
    case 0x2d: v = sa < sb; break;
    case 0x2e: v = a != b; break;
    default: return false;
  }
  --e.top;
  e.at(0) = v;
  return true;
}

// A DWARF expression of a CFA or register rule (`block` points at its length),
// with the CFA pushed first for a register rule. Only what unwind tables use:
// constants, registers, dereference, stack and arithmetic operations.
SPANPROF_UNINSTRUMENTED inline bool evaluate(const std::uint8_t* block, const Registers& regs, StackReader& reader,
                                             bool push_cfa, std::uint64_t cfa, std::uint64_t& result) noexcept {
  ByteCursor length_cursor{block, block + 10};
  const std::uint64_t length = length_cursor.uleb();
  if (!length_cursor.ok || length > 256) return false;
  ByteCursor c{length_cursor.at, length_cursor.at + length};
  ExpressionStack e;
  if (push_cfa) e.push(cfa);
  while (c.ok && c.at < c.end) {
    const std::uint8_t op = *c.at++;
    bool ok = true;
    if (op >= 0x30 && op <= 0x4f) {  // lit0..lit31
      ok = e.push(op - 0x30u);
    } else if ((op >= 0x70 && op <= 0x8f) || op == 0x92) {  // breg0..breg31, bregx
      const std::uint64_t r = op == 0x92 ? c.uleb() : op - 0x70u;
      const std::int64_t offset = c.sleb();
      ok = r < register_count && regs.has(static_cast<int>(r)) &&
           e.push(regs.value[r] + static_cast<std::uint64_t>(offset));
    } else {
      switch (op) {
        case 0x06: ok = e.has(1) && reader.read(e.at(0), e.at(0)); break;  // deref
        case 0x08: ok = e.push(c.fixed<std::uint8_t>()); break;
        case 0x09: ok = e.push(static_cast<std::uint64_t>(c.fixed<std::int8_t>())); break;
        case 0x0a: ok = e.push(c.fixed<std::uint16_t>()); break;
        case 0x0b: ok = e.push(static_cast<std::uint64_t>(c.fixed<std::int16_t>())); break;
        case 0x0c: ok = e.push(c.fixed<std::uint32_t>()); break;
        case 0x0d: ok = e.push(static_cast<std::uint64_t>(c.fixed<std::int32_t>())); break;
        case 0x0e:
        case 0x0f: ok = e.push(c.fixed<std::uint64_t>()); break;
        case 0x10: ok = e.push(c.uleb()); break;
        case 0x11: ok = e.push(static_cast<std::uint64_t>(c.sleb())); break;
        case 0x12: ok = e.has(1) && e.push(e.at(0)); break;  // dup
        case 0x13:  // drop
          if ((ok = e.has(1))) --e.top;
          break;
        case 0x14: ok = e.has(2) && e.push(e.at(1)); break;  // over
        case 0x16:                                           // swap
          if ((ok = e.has(2))) {
            const std::uint64_t t = e.at(0);
            e.at(0) = e.at(1);
            e.at(1) = t;
          }
          break;
        case 0x23:  // plus_uconst
          if ((ok = e.has(1))) e.at(0) += c.uleb();
          break;
        case 0x96: break;  // nop
        default: ok = apply_binary(op, e); break;
      }
    }
    if (!ok) return false;
  }
  if (!c.ok || !e.has(1)) return false;
  result = e.at(0);
  return true;
}

// One step from `regs` (a frame at regs[pc_register]) to its caller's registers.
enum class Step : std::uint8_t { done, outermost, failed };

SPANPROF_UNINSTRUMENTED inline Step step_with_rules(const FrameRules& rules, const Registers& regs, StackReader& reader,
                            Registers& caller) noexcept {
  std::uint64_t cfa = 0;
  if (rules.cfa_is_expression) {
    if (!evaluate(rules.cfa_block, regs, reader, false, 0, cfa)) return Step::failed;
  } else {
    if (!regs.has(rules.cfa_register)) return Step::failed;
    cfa = regs.value[rules.cfa_register] + static_cast<std::uint64_t>(rules.cfa_offset);
  }
  caller.known = 0;
  caller.set(sp_register, cfa);
  for (int slot = 0; slot < tracked_count; ++slot) {
    const int r = tracked_registers[slot];
    const RegisterRule& rule = rules.reg[slot];
    std::uint64_t v = 0;
    switch (rule.rule) {
      case Rule::same:
        // x86-64: a return address must come from somewhere; aarch64: a leaf
        // function (or a prologue) still has it in the link register.
        if (r == return_address_column && !return_address_in_register) return Step::failed;
        if (regs.has(r)) caller.set(r, regs.value[r]);
        break;
      case Rule::undefined:
        if (r == return_address_column) return Step::outermost;  // _start, clone: the stack ends here
        break;
      case Rule::offset:
        if (reader.read(cfa + static_cast<std::uint64_t>(rule.n), v)) caller.set(r, v);
        break;
      case Rule::val_offset:
        caller.set(r, cfa + static_cast<std::uint64_t>(rule.n));
        break;
      case Rule::in_register:
        if (rule.n >= 0 && rule.n < register_count && regs.has(static_cast<int>(rule.n)))
          caller.set(r, regs.value[rule.n]);
        break;
      case Rule::expression:
        if (rule.block != nullptr && evaluate(rule.block, regs, reader, true, cfa, v) && reader.read(v, v))
          caller.set(r, v);
        break;
      case Rule::val_expression:
        if (rule.block != nullptr && evaluate(rule.block, regs, reader, true, cfa, v)) caller.set(r, v);
        break;
    }
  }
  if (!caller.has(return_address_column)) return Step::failed;
  const std::uint64_t return_address = caller.value[return_address_column];
  caller.set(pc_register, rules.return_address_signed ? strip_pointer_authentication(return_address) : return_address);
  return Step::done;
}

// No unwind information: the frame-pointer convention, if the frame pointer
// points into the stack above the stack pointer. The frame pointer holds the
// address of the frame record: the caller's frame pointer, then the return
// address (x86-64: pushed by the call; aarch64: stored by the prologue with x30,
// the record at the bottom of the frame, so the caller's sp is only a bound).
SPANPROF_UNINSTRUMENTED inline Step step_with_frame_pointer(const Registers& regs, StackReader& reader,
                                                             Registers& caller) noexcept {
  if (!regs.has(fp_register) || !regs.has(sp_register)) return Step::failed;
  const std::uint64_t fp = regs.value[fp_register];
  if (fp < regs.value[sp_register] || (fp & 7) != 0) return Step::failed;
  std::uint64_t saved_fp = 0, return_address = 0;
  if (!reader.read(fp, saved_fp) || !reader.read(fp + 8, return_address)) return Step::failed;
  return_address = strip_pointer_authentication(return_address);
  caller.known = 0;
  caller.set(sp_register, fp + 16);
  caller.set(fp_register, saved_fp);
  caller.set(return_address_column, return_address);
  caller.set(pc_register, return_address);
  return Step::done;
}

// aarch64: the interrupted pc lies in a known object but no unwind entry covers
// it: a PLT stub (linkers write none for them there) or a frameless trampoline,
// entered by a branch-and-link and not yet returned. The return address is still
// in x30 and the stack pointer the caller's. (The frame record would name the
// caller's caller, and from a stub nothing valid after it.)
SPANPROF_UNINSTRUMENTED inline Step step_with_link_register(const Registers& regs, Registers& caller) noexcept {
  if (!return_address_in_register || !regs.has(return_address_column) || !regs.has(sp_register))
    return Step::failed;
  caller = regs;
  caller.set(pc_register, strip_pointer_authentication(regs.value[return_address_column]));
  return Step::done;
}

}  // namespace cfi

// Walks from `regs` (regs[pc_register] is the first frame's exact PC). Writes up to
// `max_depth` PCs into `frames`, innermost first: the first exact, the others
// return addresses. Returns how many. `cache`, when given, is the calling thread's
// memo of the rules at return addresses (the sample handler's; see RulesCache).
// `from_address`, when given, is an address in some frame's locals on this stack:
// the frames below that one (called from it) are passed over, and the walk's
// first frame is that frame, at its call instruction (its return address - 1).
// 0, or an address off this stack: every frame.
SPANPROF_UNINSTRUMENTED inline int walk_stack(cfi::Registers regs, std::uint64_t stack_top, void** frames,
                                              int max_depth, cfi::RulesCache* cache = nullptr,
                                              std::uint64_t from_address = 0) noexcept {
  using namespace cfi;
  if (max_depth <= 0 || !regs.has(pc_register) || !regs.has(sp_register)) return 0;
  // A frame's call frame address (its caller's stack pointer) lies above every
  // local of the frame and at or below every local of its callers.
  bool passing_over = from_address > regs.value[sp_register] && from_address < stack_top;
  int passed = 0;
  StackReader reader(regs.value[sp_register], stack_top);
  ObjectIndex object;      // the last object looked up: most callers share it
  CommonInfo cie;          // the last CIE parsed
  bool exact = true;       // regs[pc_register] is an interrupted instruction, not a return address
  bool level_step = false;  // the last step left the stack pointer where it was
  int depth = 0;
  frames[depth++] = reinterpret_cast<void*>(regs.value[pc_register]);
  while (depth < max_depth) {
    const std::uint64_t pc = regs.value[pc_register];
    // A return address may be one past the function's end (a call to a noreturn
    // function): its call instruction is what belongs to the frame.
    const std::uint64_t lookup = exact ? pc : pc - 1;
    bool have_object = lookup >= object.start && lookup < object.end;
    if (!have_object) have_object = find_object(lookup, object);
    FrameRules rules;
    Registers caller;
    Step step = Step::failed;
    bool signal_frame = false;
    if (have_object && cache != nullptr && cache->find(lookup, object.header, rules)) {
      step = step_with_rules(rules, regs, reader, caller);
      signal_frame = rules.signal_frame;
    } else if (have_object && find_rules(object, lookup, cie, rules)) {
      // The interrupted instruction varies from sample to sample; its callers do not.
      if (cache != nullptr && !exact) cache->store(lookup, object.header, rules);
      step = step_with_rules(rules, regs, reader, caller);
      signal_frame = rules.signal_frame;
    } else if (exact && have_object && return_address_in_register) {
      step = step_with_link_register(regs, caller);
    } else {
      step = step_with_frame_pointer(regs, reader, caller);
    }
    if (step != Step::done) break;
    const std::uint64_t next_pc = caller.value[pc_register];
    const std::uint64_t next_sp = caller.has(sp_register) ? caller.value[sp_register] : 0;
    // Up the stack at every step, except across a signal frame (which may come
    // from an alternate signal stack), and but from a function that has not moved
    // the stack pointer (aarch64: a leaf function, its return address in x30),
    // once: from there the caller must move up.
    const bool level = next_sp == regs.value[sp_register] && next_pc != pc && !level_step;
    if (next_pc < 4096 || next_sp == 0 || (!signal_frame && next_sp <= regs.value[sp_register] && !level)) break;
    level_step = level;
    if (passing_over && next_sp <= from_address && ++passed < max_walk_depth) {
      frames[0] = reinterpret_cast<void*>(next_pc - 1);  // the caller, at its call
      regs = caller;
      exact = signal_frame;
      continue;
    }
    passing_over = false;
    frames[depth++] = reinterpret_cast<void*>(next_pc);
    regs = caller;
    exact = signal_frame;
  }
  return depth;
}

// The objects a system call's own frames lie in: the C library (its wrappers) and
// the vDSO (whose functions make the call themselves for the clocks they cannot
// read in user space, a thread's CPU clock among them).
class SystemCallObjects {
 public:
  // Made on first use, which a thread's sampler makes (never the handler).
  static const SystemCallObjects& process() noexcept {
    static const SystemCallObjects objects;
    return objects;
  }
  SPANPROF_UNINSTRUMENTED bool hold(std::uint64_t pc) const noexcept {
    for (const cfi::ObjectIndex& object : objects_)
      if (pc >= object.start && pc < object.end) return true;
    return false;
  }

 private:
  SystemCallObjects() noexcept {
    // A string in the C library's own data: a function's address may be a stub in
    // the program (a canonical PLT entry of a non-PIE program).
    const void* libc = ::gnu_get_libc_version();
    const void* vdso = reinterpret_cast<const void*>(::getauxval(AT_SYSINFO_EHDR));
    for (int i = 0; i < 2; ++i) {
      const void* in = i == 0 ? libc : vdso;
      if (in != nullptr) cfi::find_object(reinterpret_cast<std::uint64_t>(in), objects_[i]);
    }
  }
  cfi::ObjectIndex objects_[2];
};

// A walk that starts at a system call, without the call's own frames: the first
// frame is the caller's, at its call (return address - 1), as walk_stack's
// `from_address` makes it. For a tick whose points passed before the call: the
// CPU was the caller's. Returns the new depth; the walk unchanged when it does not
// start in a call's objects, or never leaves them.
SPANPROF_UNINSTRUMENTED inline int pass_over_system_call(void** frames, int depth,
                                                         const SystemCallObjects& objects) noexcept {
  const auto pc_of = [frames](int i) { return reinterpret_cast<std::uint64_t>(frames[i]); };
  if (depth < 2 || !objects.hold(pc_of(0))) return depth;
  int caller = 1;
  while (caller < depth && objects.hold(pc_of(caller) - 1)) ++caller;
  if (caller == depth) return depth;
  frames[0] = reinterpret_cast<void*>(pc_of(caller) - 1);
  for (int i = caller + 1; i < depth; ++i) frames[i - caller] = frames[i];
  return depth - caller;
}

// The registers a signal interrupted.
SPANPROF_UNINSTRUMENTED inline cfi::Registers registers_from_ucontext(const void* ucontext) noexcept {
  const auto& m = static_cast<const ucontext_t*>(ucontext)->uc_mcontext;
  cfi::Registers regs;
#if defined(__x86_64__)
  // glibc's gregs index of each DWARF register, 0 .. 16.
  constexpr int greg_of[cfi::register_count] = {REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI,
                                                REG_RBP, REG_RSP, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                                REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
  for (int r = 0; r < cfi::register_count; ++r) regs.set(r, static_cast<std::uint64_t>(m.gregs[greg_of[r]]));
#else
  for (int r = 0; r <= cfi::x30; ++r) regs.set(r, m.regs[r]);
  regs.set(cfi::sp, m.sp);
  regs.set(cfi::pc, m.pc);
#endif
  return regs;
}

// The registers at this point of the calling function (inlined into it): the
// stack pointer, the callee-saved registers and the address of an instruction
// here, which is all the call frame information of this frame refers to.
SPANPROF_ALWAYS_INLINE inline void capture_registers_here(cfi::Registers& regs) noexcept {
#if defined(__x86_64__)
  std::uint64_t raw[8];
  __asm__ volatile(
      "movq %%rsp, 0(%0)\n\t"
      "movq %%rbp, 8(%0)\n\t"
      "movq %%rbx, 16(%0)\n\t"
      "movq %%r12, 24(%0)\n\t"
      "movq %%r13, 32(%0)\n\t"
      "movq %%r14, 40(%0)\n\t"
      "movq %%r15, 48(%0)\n\t"
      "leaq 0(%%rip), %%rax\n\t"
      "movq %%rax, 56(%0)\n\t"
      :
      : "r"(raw)
      : "rax", "memory");
  regs.known = 0;
  regs.set(cfi::rsp, raw[0]);
  regs.set(cfi::rbp, raw[1]);
  regs.set(cfi::rbx, raw[2]);
  regs.set(12, raw[3]);
  regs.set(13, raw[4]);
  regs.set(14, raw[5]);
  regs.set(15, raw[6]);
  regs.set(cfi::rip, raw[7]);
#else
  std::uint64_t raw[14];  // sp, x19-x28, x29, x30, pc
  __asm__ volatile(
      "mov x9, sp\n\t"
      "str x9, [%0, #0]\n\t"
      "stp x19, x20, [%0, #8]\n\t"
      "stp x21, x22, [%0, #24]\n\t"
      "stp x23, x24, [%0, #40]\n\t"
      "stp x25, x26, [%0, #56]\n\t"
      "stp x27, x28, [%0, #72]\n\t"
      "stp x29, x30, [%0, #88]\n\t"
      "adr x9, .\n\t"
      "str x9, [%0, #104]\n\t"
      :
      : "r"(raw)
      : "x9", "memory");
  regs.known = 0;
  regs.set(cfi::sp, raw[0]);
  for (int r = 19; r <= cfi::x30; ++r) regs.set(r, raw[r - 18]);
  regs.set(cfi::pc, raw[13]);
#endif
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#else  // !SPANPROF_HAS_CFI_WALKER

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// Where spanprof's own walker does not run: the signal handler's walk of the
// interrupted stack with gperftools' unwinder, into `trace` (at most `max_depth`
// frames, the interrupted PC first).
inline int walk_with_gperftools(const void* ucontext, void** trace, int max_depth) noexcept {
  // gperftools' unwinder. Depending on the unwind method the trace begins with
  // this handler and the kernel's signal trampoline (libunwind) or directly at
  // the interrupted instruction (frame pointers): find the interrupted PC in the
  // first frames and start there. The walk takes the loader lock: not while a
  // fork is under way (detail/base/loader_lock_gate.hpp).
  constexpr int handler_frames_searched = 8;
  void* raw[max_stack_depth_limit + handler_frames_searched];
  if (!loader_lock_gate().enter()) return 0;
  const int n = ProfilerGetStackTrace(raw, max_depth + handler_frames_searched, 0, ucontext);
  loader_lock_gate().leave();
  const std::uintptr_t pc = interrupted_pc(ucontext);
  int first = -1;
  for (int i = 0; i < n && i < handler_frames_searched; ++i) {
    if (reinterpret_cast<std::uintptr_t>(raw[i]) == pc) {
      first = i;
      break;
    }
  }
  // PC not in the trace (an unwinder that stops at the signal frame): keep the
  // PC alone rather than a stack that starts inside spanprof.
  const int callers_from = first >= 0 ? first + 1 : n;
  int depth = 1 + std::max(0, n - callers_from);
  if (depth > max_depth) depth = max_depth;
  trace[0] = reinterpret_cast<void*>(pc);
  for (int i = 1; i < depth; ++i) trace[i] = raw[callers_from + i - 1];
  return depth;
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_HAS_CFI_WALKER

#endif  // SPANPROF_DETAIL_CAPTURE_STACK_WALKER_HPP_
