// The name of a function as a user reads it in a profile, from the name in a
// symbol table: demangled, and without the suffixes compilers give the copies they
// make of a function. Kept apart from reading symbol tables
// (detail/symbolization/elf_reader.hpp): a name is shown the same way whatever read it,
// and the functions here take a hostile file's names, so they are fuzzed alone.
#ifndef SPANPROF_DETAIL_SYMBOLIZATION_SYMBOL_NAMES_HPP_
#define SPANPROF_DETAIL_SYMBOLIZATION_SYMBOL_NAMES_HPP_

#include <spanprof/config.hpp>

#include <cxxabi.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

SPANPROF_NAMESPACE_BEGIN

namespace detail {

// The demangled form of a C++ symbol name, or the name itself when it is not a
// mangled C++ name. Clone suffixes (".cold", ".isra.0") come out as "[clone ...]"
// (strip_clone_suffixes removes them).
inline std::string demangle_symbol(const std::string& name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return name;
  // The demangler recurses over the name; an absurd one from a hostile file is
  // not worth the stack.
  constexpr std::size_t max_demangled_input = 16 * 1024;
  if (name.size() > max_demangled_input) return name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                   std::free);
  if (status != 0 || demangled == nullptr) return name;
  return std::string(demangled.get());
}

// The name a function is known by, without the suffixes GCC and Clang give the
// copies they make of it: " [clone .constprop.0]" in a demangled C++ name,
// ".constprop.0", ".isra.0", ".part.0", ".cold", ".lto_priv.0", ".localalias",
// ".llvm.123" on a plain one. Without this one function splits into several
// entries in a flame graph (pprof strips them; Pyroscope and Grafana do not).
inline std::string strip_clone_suffixes(std::string name) {
  for (;;) {
    constexpr std::string_view clone = " [clone ";
    if (name.size() > clone.size() && name.back() == ']') {
      const std::size_t at = name.rfind(clone);
      if (at != std::string::npos && at > 0) {
        name.resize(at);
        continue;
      }
    }
    // ".<suffix>" or ".<suffix>.<digits>" at the end of a plain symbol name.
    std::size_t end = name.size();
    while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
    if (end < name.size() && end > 0 && name[end - 1] == '.') --end;  // a ".N" after the suffix
    else end = name.size();
    bool stripped = false;
    for (const std::string_view suffix : {".constprop", ".isra", ".part", ".cold", ".lto_priv", ".localalias",
                                          ".clone", ".llvm", ".specialized"}) {
      if (end > suffix.size() && std::string_view(name).substr(end - suffix.size(), suffix.size()) == suffix) {
        name.resize(end - suffix.size());
        stripped = true;
        break;
      }
    }
    if (!stripped) return name;
  }
}

}  // namespace detail

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_SYMBOLIZATION_SYMBOL_NAMES_HPP_
