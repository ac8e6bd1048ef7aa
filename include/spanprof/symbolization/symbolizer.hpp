// Symbolization: turning sampled program counters into function names, source
// lines and inlined frames, and the pprof mapping they came from.
//
// A Symbolizer runs on the background thread that encodes profiles, never on a
// request thread, so implementations may read files and allocate freely. They
// must still never throw: a bad object file costs its names, not the profile.
#ifndef SPANPROF_SYMBOLIZATION_SYMBOLIZER_HPP_
#define SPANPROF_SYMBOLIZATION_SYMBOLIZER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

SPANPROF_NAMESPACE_BEGIN

// One executable segment of a loaded object; becomes one pprof Mapping.
struct Module {
  std::uintptr_t start = 0;  // runtime address range [start, limit)
  std::uintptr_t limit = 0;
  std::uint64_t file_offset = 0;  // p_offset of the segment
  std::string path;      // absolute path of the object file ("/proc/self/exe" resolved to the real path)
  std::string build_id;  // lowercase hex of NT_GNU_BUILD_ID, empty if none
  // OpenTelemetry's file id (process.executable.build_id.htlhash), set once the
  // object's file has been read; empty until then or when unreadable.
  std::string htl_hash{};
};

// A function the compiler inlined at an address, and where in it the address is.
struct InlinedFrame {
  std::string_view function{};     // demangled name
  std::string_view system_name{};  // mangled, when known
  std::string_view file{};         // source file of the line below; empty when unknown
  std::int64_t line = 0;         // 0: unknown
  std::int64_t start_line = 0;   // the function's first line; 0: unknown
};

// What an address is: its object, its function, and (with debug information) its
// source line and the functions inlined there. A symbolizer that knows only names
// (CallbackSymbolizer over a symbol table) leaves the rest empty.
struct ResolvedFrame {
  const Module* module = nullptr;  // nullptr: address in no known module
  std::string_view function;       // demangled name; empty when unknown
  std::string_view system_name;    // name as in the symbol table (mangled)
  // Where the address is in `function`: its own line, or, when functions were
  // inlined there, the line of the call into the outermost of them. (Initialized
  // here, so that a symbolizer's ResolvedFrame{module, name, mangled} stays free of
  // -Wmissing-field-initializers.)
  std::string_view file{};
  std::int64_t line = 0;
  std::int64_t start_line = 0;
  // The inlined functions at the address, innermost first (inlined[0] is where
  // the instruction is); `inlined_count` of them. Valid as the views above.
  const InlinedFrame* inlined = nullptr;
  std::size_t inlined_count = 0;
};

// Small on purpose so tests and exotic deployments (JITs, pre-symbolized stacks)
// can plug in their own. Implementations are used from one background thread.
class Symbolizer {
 public:
  virtual ~Symbolizer() = default;
  // The views and the module pointer stay valid until refresh().
  virtual ResolvedFrame resolve(std::uintptr_t address) noexcept = 0;
  // Re-reads the set of loaded objects, e.g. after dlopen.
  virtual void refresh() noexcept {}
};

// Adapts a plain function; the callback owns the storage its views point into.
class CallbackSymbolizer final : public Symbolizer {
 public:
  using Callback = std::function<ResolvedFrame(std::uintptr_t)>;

  explicit CallbackSymbolizer(Callback callback) noexcept : callback_(std::move(callback)) {}

  ResolvedFrame resolve(std::uintptr_t address) noexcept override {
    if (!callback_) return {};
    SPANPROF_TRY {
      return callback_(address);
    } SPANPROF_CATCH_ALL {
      // User code threw; the frame stays unnamed rather than the profile being lost.
      report_error(ErrorCode::internal, "symbolizer callback threw an exception");
      return {};
    }
  }

 private:
  Callback callback_;
};

// How much of a system library's DWARF the default symbolizer reads.
enum class SystemLibraryLines {
  none,               // names from its symbol tables only
  line_tables,        // each frame's file and line, no inlined frames
  inlined_functions,  // lines and inlined frames, all of its DWARF read, as the program's
};

constexpr std::string_view to_string(SystemLibraryLines lines) noexcept {
  switch (lines) {
    case SystemLibraryLines::none: return "none";
    case SystemLibraryLines::line_tables: return "line_tables";
    case SystemLibraryLines::inlined_functions: return "inlined_functions";
  }
  return "unknown";
}

// The default, make_elf_symbolizer(), reads the ELF symbol tables of the objects
// loaded in this process: symbolization/elf_symbolizer.hpp. Its defaults, which
// Options (runtime/options.hpp) states through them:
namespace detail {
// A system library's lines cost a process more than the program's: its debug
// file's line tables inflated, and indexed, for a few frames (docs/source-lines.md).
inline constexpr SystemLibraryLines default_system_library_lines = SystemLibraryLines::none;
// Where distributions put separate debug files (GDB's debug-file-directory).
inline constexpr const char* default_debug_directory = "/usr/lib/debug";
// What the process's sources of lines may keep (docs/source-lines.md).
inline constexpr std::uint64_t default_source_lines_max_bytes = std::uint64_t{64} << 20;
}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SYMBOLIZATION_SYMBOLIZER_HPP_
