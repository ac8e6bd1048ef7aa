// A symbol name from an object file, as the ELF symbolizer shows it: demangled
// (demangle_symbol), then without the suffixes compilers give cloned functions
// (strip_clone_suffixes). A hostile file chooses these names freely.
//
// Invariants: a name that is not a mangled C++ name comes back unchanged from the
// demangler; stripping only cuts (the result is a non-empty prefix of a non-empty
// name) and is idempotent, so one function never splits into two entries of a
// flame graph. The demangler's exponential output on names made for it is a known
// issue (fuzz_support.hpp, README.md): such names skip demangle_symbol().
#include "fuzz_support.hpp"

#include <spanprof/detail/symbolization/symbol_names.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

void fuzz_one(std::string_view bytes) {
  // Symbol names end at the first NUL of the string table.
  const std::string name(bytes.substr(0, bytes.find('\0')));

  const std::string demangled =
      spanprof_fuzz::demangler_may_explode(name) ? name : spanprof::detail::demangle_symbol(name);
  if (name.rfind("_Z", 0) != 0) SPANPROF_FUZZ_CHECK(demangled == name);

  for (const std::string* text : {&name, &demangled}) {
    const std::string stripped = spanprof::detail::strip_clone_suffixes(*text);
    SPANPROF_FUZZ_CHECK(text->compare(0, stripped.size(), stripped) == 0);
    SPANPROF_FUZZ_CHECK(!stripped.empty() || text->empty());
    SPANPROF_FUZZ_CHECK(spanprof::detail::strip_clone_suffixes(stripped) == stripped);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
