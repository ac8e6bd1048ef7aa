// The ELF symbolizer against this very test binary, libc, the vDSO and hostile
// files. The binary is linked without -rdynamic, so the static functions below
// exist only in .symtab: finding them proves .symtab is read, not just .dynsym.
#include "support/catch.hpp"
#include "support/command.hpp"
#include "support/test_helpers.hpp"

#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

using spanprof::CallbackSymbolizer;
using spanprof::ErrorCode;
using spanprof::Module;
using spanprof::ResolvedFrame;
using spanprof::detail::ElfSymbol;
using spanprof::detail::ElfSymbolizer;

// noclone: an IPA clone (".constprop.0") would put the sampled code under another name.
#if defined(__GNUC__) && !defined(__clang__)
#define TEST_NOINLINE __attribute__((noinline, noclone))
#else
#define TEST_NOINLINE __attribute__((noinline))
#endif

namespace {

using spanprof_test::TempDir;

volatile int g_sink = 0;

TEST_NOINLINE int spanprof_test_static_hot(int rounds) {
  unsigned acc = static_cast<unsigned>(rounds);  // unsigned: wraps without UB (UBSan build)
  for (int i = 0; i < rounds; ++i) acc = acc * 31u + static_cast<unsigned>(g_sink) + 0x5a17u;
  g_sink = static_cast<int>(acc & 0x7fffffffu);
  return static_cast<int>(acc & 0x7fffffffu);
}

TEST_NOINLINE std::uintptr_t return_address_of_caller() {
  return reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
}

// Returns an address in the middle of its own body, the way a sampled return address would be.
TEST_NOINLINE std::uintptr_t spanprof_test_caller(double scale) {
  g_sink = g_sink + 1;
  const std::uintptr_t inside = return_address_of_caller();
  g_sink = g_sink + static_cast<int>(scale);
  return inside;
}

std::uintptr_t address_of(int (*function)(int)) { return reinterpret_cast<std::uintptr_t>(function); }
std::uintptr_t address_of(std::uintptr_t (*function)(double)) { return reinterpret_cast<std::uintptr_t>(function); }

std::string real_path(const std::string& path) {
  std::unique_ptr<char, void (*)(void*)> resolved(::realpath(path.c_str(), nullptr), std::free);
  return resolved ? std::string(resolved.get()) : path;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(&bytes[0], static_cast<std::streamsize>(bytes.size()));
  return in ? bytes : std::string();
}

// Read once: the hostile-file cases each start from a copy of this binary.
const std::string& this_binary() {
  static const std::string bytes = read_whole_file("/proc/self/exe");
  return bytes;
}

void write_whole_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The build id as binutils sees it, computed independently of the code under test.
std::string readelf_build_id(const std::string& path) {
  const std::string command = "readelf -n '" + path + "' 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  ::pclose(pipe);
  const auto label = output.find("Build ID: ");
  if (label == std::string::npos) return {};
  const auto begin = label + std::strlen("Build ID: ");
  const auto end = output.find_first_not_of("0123456789abcdef", begin);
  return output.substr(begin, end - begin);
}

std::uintptr_t main_program_bias() {
  std::uintptr_t bias = 0;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        *static_cast<std::uintptr_t*>(data) = info->dlpi_addr;
        return 1;  // the main program comes first
      },
      &bias);
  return bias;
}

// First executable address of the object the dynamic loader knows as `name`.
std::uintptr_t executable_address_of_object(const std::string& name) {
  struct Search {
    std::string name;
    std::uintptr_t found = 0;
  } search{name, 0};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto& s = *static_cast<Search*>(data);
        if (info->dlpi_name == nullptr || s.name != info->dlpi_name) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& segment = info->dlpi_phdr[i];
          if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X) != 0 && segment.p_memsz != 0) {
            s.found = info->dlpi_addr + segment.p_vaddr;
            return 1;
          }
        }
        return 0;
      },
      &search);
  return search.found;
}


// Collects error reports while alive, then restores the default handler.
struct CapturedErrors {
  std::vector<std::pair<ErrorCode, std::string>> errors;
  CapturedErrors() {
    spanprof::set_error_handler(
        [this](const spanprof::Error& error) { errors.emplace_back(error.code, std::string(error.message)); });
  }
  ~CapturedErrors() { spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{}); }
  std::size_t count_mentioning(const std::string& text) const {
    std::size_t n = 0;
    for (const auto& error : errors) {
      if (error.first == ErrorCode::symbolization_failed && error.second.find(text) != std::string::npos) ++n;
    }
    return n;
  }
};

template <typename T>
T read_at(const std::string& bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

template <typename T>
void write_at(std::string& bytes, std::size_t offset, const T& value) {
  std::memcpy(&bytes[offset], &value, sizeof value);
}

// Index of the first section of `type` in an ELF64 image held in memory.
std::size_t find_section(const std::string& elf, std::uint32_t type) {
  const auto header = read_at<Elf64_Ehdr>(elf, 0);
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    if (read_at<Elf64_Shdr>(elf, header.e_shoff + i * sizeof(Elf64_Shdr)).sh_type == type) return i;
  }
  return static_cast<std::size_t>(-1);
}

bool loads(const std::string& path, std::string& error) {
  std::vector<ElfSymbol> symbols;
  const spanprof::Status read = spanprof::detail::load_elf_function_symbols(path, 0, symbols);
  error = read.message();
  return read.is_ok();
}

// Functions named the way GCC names the copies it makes (IPA-CP, IPA-SRA, split
// cold parts): an asm label makes the name exact whatever the optimization level.
extern "C" TEST_NOINLINE int spanprof_test_cloned_plain(int rounds) asm("spanprof_test_cloned_plain.constprop.0");
extern "C" TEST_NOINLINE int spanprof_test_cloned_plain(int rounds) { return spanprof_test_static_hot(rounds) + 1; }
extern "C" TEST_NOINLINE int spanprof_test_cloned_cxx(int rounds) asm("_Z24spanprof_test_cloned_cxxi.isra.0");
extern "C" TEST_NOINLINE int spanprof_test_cloned_cxx(int rounds) { return spanprof_test_static_hot(rounds) + 2; }

}  // namespace

TEST_CASE("compiler clone suffixes are stripped: one function, one name", "[symbolizer]") {
  using spanprof::detail::strip_clone_suffixes;
  CHECK(strip_clone_suffixes("compute_prices(int) [clone .constprop.0]") == "compute_prices(int)");
  CHECK(strip_clone_suffixes("f(int) [clone .isra.0] [clone .cold]") == "f(int)");
  CHECK(strip_clone_suffixes("compute.constprop.0") == "compute");
  CHECK(strip_clone_suffixes("compute.part.3") == "compute");
  CHECK(strip_clone_suffixes("compute.isra.0.cold") == "compute");
  CHECK(strip_clone_suffixes("main.cold") == "main");
  CHECK(strip_clone_suffixes("helper.lto_priv.0") == "helper");
  CHECK(strip_clone_suffixes("x.llvm.1234567890") == "x");
  // Names that only look alike stay whole.
  CHECK(strip_clone_suffixes("sha256") == "sha256");
  CHECK(strip_clone_suffixes("operator[](unsigned long)") == "operator[](unsigned long)");
  CHECK(strip_clone_suffixes("a.b") == "a.b");
  CHECK(strip_clone_suffixes(".cold") == ".cold");
  CHECK(strip_clone_suffixes("") == "");

  REQUIRE(spanprof_test_cloned_plain(2) != 0);
  REQUIRE(spanprof_test_cloned_cxx(2) != 0);
  ElfSymbolizer symbolizer;
  const ResolvedFrame plain = symbolizer.resolve(address_of(&spanprof_test_cloned_plain));
  CHECK(plain.function == "spanprof_test_cloned_plain");
  CHECK(plain.system_name == "spanprof_test_cloned_plain.constprop.0");  // the symbol as it is, for tools
  const ResolvedFrame cxx = symbolizer.resolve(address_of(&spanprof_test_cloned_cxx));
  CHECK(cxx.function == "spanprof_test_cloned_cxx(int)");
}

TEST_CASE("a static function only in .symtab resolves to its demangled name", "[symbolizer]") {
  REQUIRE(spanprof_test_static_hot(3) != 0);  // keep it alive and called
  ElfSymbolizer symbolizer;
  const ResolvedFrame frame = symbolizer.resolve(address_of(&spanprof_test_static_hot));

  CHECK(frame.function == "(anonymous namespace)::spanprof_test_static_hot(int)");
  CHECK(frame.system_name == "_ZN12_GLOBAL__N_124spanprof_test_static_hotEi");
  REQUIRE(frame.module != nullptr);
  CHECK(frame.module->path == real_path("/proc/self/exe"));
  CHECK(frame.module->start <= address_of(&spanprof_test_static_hot));
  CHECK(address_of(&spanprof_test_static_hot) < frame.module->limit);
}

TEST_CASE("an address inside a function body resolves to that function", "[symbolizer]") {
  const std::uintptr_t start = address_of(&spanprof_test_caller);
  const std::uintptr_t inside = spanprof_test_caller(2.0);
  REQUIRE(inside > start);

  ElfSymbolizer symbolizer;
  const ResolvedFrame frame = symbolizer.resolve(inside);
  CHECK(frame.function == "(anonymous namespace)::spanprof_test_caller(double)");
  CHECK(symbolizer.resolve(start).function == frame.function);

  SECTION("repeated lookups are served from the cache with the same storage") {
    const ResolvedFrame again = symbolizer.resolve(inside);
    CHECK(again.function.data() == frame.function.data());
    CHECK(again.module == frame.module);
  }
  SECTION("refresh keeps resolving") {
    symbolizer.refresh();
    CHECK(symbolizer.resolve(inside).function == "(anonymous namespace)::spanprof_test_caller(double)");
  }
}

TEST_CASE("the main program's module carries the build id readelf reports", "[symbolizer]") {
  // Not "/proc/self/exe": in readelf's process that names readelf.
  const std::string expected = readelf_build_id(real_path("/proc/self/exe"));
  if (expected.empty()) {
    WARN("readelf unavailable or the test binary has no build id; skipped");
    return;
  }
  ElfSymbolizer symbolizer;
  const ResolvedFrame frame = symbolizer.resolve(address_of(&spanprof_test_static_hot));
  REQUIRE(frame.module != nullptr);
  CHECK(frame.module->build_id == expected);
  CHECK(frame.module->file_offset <= frame.module->start - main_program_bias());
}

TEST_CASE("SHA-256 and OpenTelemetry's file id give their reference values", "[symbolizer]") {
  const auto hex = [](const spanprof::detail::Sha256::Digest& d) { return spanprof::detail::hex_lowercase(d.data(), d.size()); };
  spanprof::detail::Sha256 abc;
  abc.update("abc", 3);
  CHECK(hex(abc.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Two blocks, and a message that ends where its length must go to the next block.
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  spanprof::detail::Sha256 long_message;
  long_message.update(two_blocks.data(), two_blocks.size());
  CHECK(hex(long_message.finish()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // The OpenTelemetry eBPF profiler's own test of its file id (libpf/fileid_test.go).
  const unsigned char elf_start[] = {0x7f, 'E', 'L', 'F', 0x00, 0x01, 0x02, 0x03, 0x04};
  CHECK(spanprof::detail::elf_htl_hash(spanprof::detail::ElfMemoryBytes(elf_start, sizeof elf_start)) ==
        "caf6e5907166ac76eef618e5f7f59cd9");
}

TEST_CASE("the main program's module carries OpenTelemetry's file id of its file", "[symbolizer]") {
  // Computed by coreutils from the file, as the OpenTelemetry eBPF profiler defines it.
  const std::string exe = real_path("/proc/self/exe");
  const auto expected = spanprof_test::capture_command(
      "f='" + exe + "'; { head -c 4096 \"$f\"; tail -c 4096 \"$f\"; "
      "printf '%016x' $(stat -c %s \"$f\") | xxd -r -p 2>/dev/null || "
      "python3 -c 'import sys; sys.stdout.buffer.write(int(sys.argv[1]).to_bytes(8, \"big\"))' $(stat -c %s \"$f\"); } "
      "| sha256sum | cut -c1-32");
  REQUIRE(expected.exit_code == 0);
  ElfSymbolizer symbolizer;
  const ResolvedFrame frame = symbolizer.resolve(address_of(&spanprof_test_static_hot));
  REQUIRE(frame.module != nullptr);
  CHECK(frame.module->htl_hash + "\n" == expected.output);
}

TEST_CASE("libc functions resolve with a libc module", "[symbolizer]") {
  // dlsym on libc's own handle skips the executable's PLT and sanitizer interceptors.
  void* libc = ::dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libc == nullptr) {
    WARN("libc.so.6 is not loaded under that name; skipped");
    return;
  }
  ElfSymbolizer symbolizer;

  SECTION("write, exported through .dynsym under several aliases") {
    const auto write_address = reinterpret_cast<std::uintptr_t>(::dlsym(libc, "write"));
    REQUIRE(write_address != 0);
    const ResolvedFrame frame = symbolizer.resolve(write_address + 1);
    REQUIRE(frame.module != nullptr);
    CHECK(frame.module->path.find("libc") != std::string::npos);
    CHECK(frame.module->path.front() == '/');
    CHECK(frame.function == "write");  // preferred over its alias __write
    CHECK(frame.module->build_id == readelf_build_id(frame.module->path));
  }
  SECTION("strlen, an IFUNC whose chosen implementation is only in the debug file") {
    const auto strlen_address = reinterpret_cast<std::uintptr_t>(::dlsym(libc, "strlen"));
    REQUIRE(strlen_address != 0);
    const ResolvedFrame frame = symbolizer.resolve(strlen_address);
    REQUIRE(frame.module != nullptr);
    CHECK(frame.module->path.find("libc") != std::string::npos);
    const std::string& id = frame.module->build_id;
    const std::string debug_file = "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
    if (id.size() > 2 && ::access(debug_file.c_str(), R_OK) == 0) {
      CHECK(frame.function.find("strlen") != std::string_view::npos);
    } else {
      WARN("no separate debug file for libc; __strlen_<isa> is unnamed without it");
    }
  }
  ::dlclose(libc);
}

TEST_CASE("addresses outside every module resolve to nothing", "[symbolizer]") {
  ElfSymbolizer symbolizer;
  for (const std::uintptr_t address : {std::uintptr_t{0}, std::uintptr_t{0x10}, ~std::uintptr_t{0}}) {
    const ResolvedFrame frame = symbolizer.resolve(address);
    CHECK(frame.module == nullptr);
    CHECK(frame.function.empty());
    CHECK(frame.system_name.empty());
  }
}

TEST_CASE("vDSO functions are named from memory", "[symbolizer]") {
  if (::getauxval(AT_SYSINFO_EHDR) == 0) {
    WARN("no vDSO in this process; skipped");
    return;
  }
  ElfSymbolizer symbolizer;
  symbolizer.resolve(0x10);  // triggers the initial scan
  bool named = false;
  for (const Module& module : symbolizer.modules()) {
    if (module.path != "[vdso]") continue;
    for (std::uintptr_t address = module.start; address < module.limit && !named; address += 4) {
      const auto name = symbolizer.resolve(address).function;
      named = name.find("clock_gettime") != std::string_view::npos ||
              name.find("gettimeofday") != std::string_view::npos;
    }
  }
  CHECK(named);
}

TEST_CASE("make_elf_symbolizer gives a working default", "[symbolizer]") {
  const auto symbolizer = spanprof::make_elf_symbolizer();
  REQUIRE(symbolizer != nullptr);
  CHECK(symbolizer->resolve(address_of(&spanprof_test_static_hot)).function ==
        "(anonymous namespace)::spanprof_test_static_hot(int)");
}

TEST_CASE("CallbackSymbolizer forwards to its callback", "[symbolizer]") {
  static const Module module{0x1000, 0x2000, 0, "/opt/jit", "abcd"};
  std::vector<std::uintptr_t> asked;
  CallbackSymbolizer symbolizer([&](std::uintptr_t address) {
    asked.push_back(address);
    return ResolvedFrame{&module, "jit_function(int)", "_Z12jit_functioni"};
  });
  const ResolvedFrame frame = symbolizer.resolve(0x1234);
  CHECK(asked == std::vector<std::uintptr_t>{0x1234});
  CHECK(frame.module == &module);
  CHECK(frame.function == "jit_function(int)");
  CHECK(frame.system_name == "_Z12jit_functioni");

  SECTION("a throwing callback is contained") {
    CapturedErrors captured;
    const auto before = spanprof::error_count(ErrorCode::internal);
    CallbackSymbolizer throwing([](std::uintptr_t) -> ResolvedFrame { throw 42; });
    CHECK(throwing.resolve(1).module == nullptr);
    CHECK(spanprof::error_count(ErrorCode::internal) == before + 1);
  }
  SECTION("an empty callback resolves nothing") {
    CallbackSymbolizer empty{CallbackSymbolizer::Callback{}};
    CHECK(empty.resolve(1).module == nullptr);
  }
}

TEST_CASE("the loader reads this binary's own symbols at runtime addresses", "[symbolizer][elf]") {
  std::vector<ElfSymbol> symbols;
  REQUIRE(spanprof::detail::load_elf_function_symbols("/proc/self/exe", main_program_bias(), symbols));
  bool found = false;
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (i != 0) REQUIRE(symbols[i - 1].address < symbols[i].address);
    if (symbols[i].name == "_ZN12_GLOBAL__N_124spanprof_test_static_hotEi") {
      found = true;
      CHECK(symbols[i].address == address_of(&spanprof_test_static_hot));
      CHECK(symbols[i].size > 0);
    }
  }
  CHECK(found);
}

TEST_CASE("hostile files are rejected with a reason and without crashing", "[symbolizer][elf]") {
  TempDir dir;
  const std::string& real = this_binary();
  REQUIRE(real.size() > sizeof(Elf64_Ehdr));
  std::string error;

  SECTION("missing file") {
    CHECK_FALSE(loads(dir.sub("does_not_exist"), error));
    CHECK(error.find("cannot open") != std::string::npos);
  }
  SECTION("empty file") {
    write_whole_file(dir.sub("empty"), "");
    CHECK_FALSE(loads(dir.sub("empty"), error));
    CHECK_FALSE(error.empty());
  }
  SECTION("a directory") {
    CHECK_FALSE(loads(dir.path(), error));
    CHECK_FALSE(error.empty());
  }
  SECTION("random bytes") {
    std::mt19937 random(42);
    std::string noise(8192, '\0');
    for (auto& byte : noise) byte = static_cast<char>(random());
    write_whole_file(dir.sub("noise"), noise);
    CHECK_FALSE(loads(dir.sub("noise"), error));
    CHECK(error.find("not an ELF") != std::string::npos);
  }
  SECTION("a real ELF truncated at half its length") {
    write_whole_file(dir.sub("half"), real.substr(0, real.size() / 2));
    CHECK_FALSE(loads(dir.sub("half"), error));
    CHECK(error.find("beyond the end") != std::string::npos);
  }
  SECTION("section header table offset past the end of the file") {
    std::string bad = real;
    auto header = read_at<Elf64_Ehdr>(bad, 0);
    header.e_shoff = bad.size() + 4096;
    write_at(bad, 0, header);
    write_whole_file(dir.sub("shoff"), bad);
    CHECK_FALSE(loads(dir.sub("shoff"), error));
    CHECK(error.find("beyond the end") != std::string::npos);
  }
  SECTION("section header offset chosen to overflow offset + size") {
    std::string bad = real;
    auto header = read_at<Elf64_Ehdr>(bad, 0);
    header.e_shoff = ~std::uint64_t{0} - 8;
    write_at(bad, 0, header);
    write_whole_file(dir.sub("overflow"), bad);
    CHECK_FALSE(loads(dir.sub("overflow"), error));
  }
  SECTION(".symtab contents past the end of the file") {
    std::string bad = real;
    const auto header = read_at<Elf64_Ehdr>(bad, 0);
    const std::size_t index = find_section(bad, SHT_SYMTAB);
    REQUIRE(index != static_cast<std::size_t>(-1));
    const std::size_t at = header.e_shoff + index * sizeof(Elf64_Shdr);
    auto section = read_at<Elf64_Shdr>(bad, at);
    section.sh_offset = bad.size() - section.sh_size / 2;
    write_at(bad, at, section);
    write_whole_file(dir.sub("symtab"), bad);
    CHECK_FALSE(loads(dir.sub("symtab"), error));
    CHECK(error.find(".symtab") != std::string::npos);
  }
  SECTION(".symtab linked to a section that does not exist") {
    std::string bad = real;
    const auto header = read_at<Elf64_Ehdr>(bad, 0);
    const std::size_t index = find_section(bad, SHT_SYMTAB);
    REQUIRE(index != static_cast<std::size_t>(-1));
    const std::size_t at = header.e_shoff + index * sizeof(Elf64_Shdr);
    auto section = read_at<Elf64_Shdr>(bad, at);
    section.sh_link = 60000;
    write_at(bad, at, section);
    write_whole_file(dir.sub("link"), bad);
    CHECK_FALSE(loads(dir.sub("link"), error));
  }
  SECTION("a 32-bit ELF") {
    std::string bad = real.substr(0, 4096);
    bad[EI_CLASS] = ELFCLASS32;
    write_whole_file(dir.sub("elf32"), bad);
    CHECK_FALSE(loads(dir.sub("elf32"), error));
    CHECK(error.find("64-bit") != std::string::npos);
  }
}

TEST_CASE("randomly corrupted headers never crash the loader", "[symbolizer][elf]") {
  // Runs under AddressSanitizer in CI, which turns any stray read into a failure.
  const std::string& real = this_binary();
  const auto header = read_at<Elf64_Ehdr>(real, 0);
  REQUIRE(header.e_shoff + std::size_t{header.e_shnum} * sizeof(Elf64_Shdr) <= real.size());
  std::mt19937 random(7);
  std::string bad = real;
  for (int round = 0; round < 100; ++round) {
    std::vector<std::pair<std::size_t, char>> undo;
    for (int flips = 0; flips < 8; ++flips) {
      // Aim at the ELF header and the section header table, where the offsets live.
      const bool in_elf_header = random() % 4 == 0;
      const std::size_t offset = in_elf_header
                                     ? random() % sizeof(Elf64_Ehdr)
                                     : header.e_shoff + random() % (std::size_t{header.e_shnum} * sizeof(Elf64_Shdr));
      undo.emplace_back(offset, bad[offset]);
      bad[offset] = static_cast<char>(random());
    }
    const spanprof::detail::ElfMemoryBytes bytes(bad.data(), bad.size());
    std::vector<ElfSymbol> symbols;
    spanprof::detail::ElfImageInfo info;
    const spanprof::Status read = spanprof::detail::load_elf_symbols_from(bytes, 0, true, symbols, info);
    CHECK((read || !read.message().empty()));
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) bad[it->first] = it->second;
  }
}

TEST_CASE("a loaded library whose file went bad is reported once and resolved to its module",
          "[symbolizer]") {
  void* original = ::dlopen("libdl.so.2", RTLD_LAZY);
  link_map* map = nullptr;
  if (original == nullptr || ::dlinfo(original, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    WARN("libdl.so.2 unavailable; skipped");
    if (original != nullptr) ::dlclose(original);
    return;
  }
  const std::string library = read_whole_file(map->l_name);
  ::dlclose(original);
  REQUIRE(!library.empty());

  TempDir dir;
  const std::string garbage_path = real_path(dir.path()) + "/libspanprof_garbage.so";
  const std::string replaced_path = real_path(dir.path()) + "/libspanprof_replaced.so";
  write_whole_file(garbage_path, library);
  write_whole_file(replaced_path, library);
  void* garbage = ::dlopen(garbage_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* replaced = ::dlopen(replaced_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (garbage == nullptr || replaced == nullptr) {
    WARN("cannot dlopen from the temporary directory (noexec?); skipped");
    if (garbage != nullptr) ::dlclose(garbage);
    if (replaced != nullptr) ::dlclose(replaced);
    return;
  }
  // New inodes at the same paths: the loaded mappings keep the old contents.
  ::unlink(garbage_path.c_str());
  write_whole_file(garbage_path, std::string(4096, 'x'));
  ::unlink(replaced_path.c_str());
  write_whole_file(replaced_path, this_binary());

  const std::uintptr_t garbage_address = executable_address_of_object(garbage_path);
  const std::uintptr_t replaced_address = executable_address_of_object(replaced_path);
  REQUIRE(garbage_address != 0);
  REQUIRE(replaced_address != 0);

  {
    CapturedErrors captured;
    ElfSymbolizer symbolizer;
    for (int pass = 0; pass < 2; ++pass) {
      for (const std::uintptr_t address : {garbage_address, garbage_address + 1, replaced_address}) {
        const ResolvedFrame frame = symbolizer.resolve(address);
        REQUIRE(frame.module != nullptr);
        CHECK(frame.function.empty());
        CHECK((frame.module->path == garbage_path || frame.module->path == replaced_path));
      }
      symbolizer.refresh();
    }
    CHECK(captured.count_mentioning(garbage_path) == 1);
    CHECK(captured.count_mentioning("not an ELF") == 1);
    CHECK(captured.count_mentioning(replaced_path) == 1);
    CHECK(captured.count_mentioning("differs") == 1);
  }
  ::dlclose(garbage);
  ::dlclose(replaced);
}

TEST_CASE("symbol lookup honours sizes and aliases", "[symbolizer][elf]") {
  const auto symbol = [](std::uintptr_t address, std::uint64_t size, const char* name, std::uint8_t binding) {
    ElfSymbol s;
    s.address = address;
    s.size = size;
    s.name = name;
    s.binding = binding;
    return s;
  };
  std::vector<ElfSymbol> symbols = {
      symbol(0x3000, 0x10, "c", STB_GLOBAL),     symbol(0x1000, 0x10, "__libc_write", STB_GLOBAL),
      symbol(0x1000, 0, "__write", STB_WEAK),    symbol(0x1000, 0x10, "write", STB_WEAK),
      symbol(0x2000, 0, "unsized", STB_LOCAL),
  };
  spanprof::detail::finalize_elf_symbols(symbols);
  REQUIRE(symbols.size() == 3);
  CHECK(symbols[0].name == "write");
  CHECK(symbols[0].size == 0x10);

  const auto name_at = [&](std::uintptr_t address, std::uintptr_t region_start = 0) -> std::string {
    const std::size_t index = spanprof::detail::find_elf_symbol(symbols, address, region_start);
    return index == static_cast<std::size_t>(-1) ? "" : symbols[index].name;
  };
  CHECK(name_at(0x0fff) == "");
  CHECK(name_at(0x1000) == "write");
  CHECK(name_at(0x100f) == "write");
  CHECK(name_at(0x1010) == "");  // past write's size, before the next symbol
  CHECK(name_at(0x2000) == "unsized");
  CHECK(name_at(0x2fff) == "unsized");  // an unsized symbol reaches to the next one
  CHECK(name_at(0x2fff, 0x2800) == "");  // but not back across a segment start
  CHECK(name_at(0x3000) == "c");
  CHECK(name_at(0x3010) == "");
}
