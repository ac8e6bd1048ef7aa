// The default Symbolizer: reads the ELF symbol tables of the objects loaded in
// this process, in-process and without external tools.
//
// This header finds the loaded objects (under the loader lock, without
// allocating) and keeps what it learned: the objects, their symbols, resolved
// addresses. Reading one ELF image is detail/symbolization/elf_reader.hpp's job, naming
// a function detail/symbolization/symbol_names.hpp's.
#ifndef SPANPROF_SYMBOLIZATION_ELF_SYMBOLIZER_HPP_
#define SPANPROF_SYMBOLIZATION_ELF_SYMBOLIZER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/base/error.hpp>
#include <spanprof/detail/base/loader_lock_gate.hpp>
#include <spanprof/detail/symbolization/elf_reader.hpp>
#include <spanprof/detail/symbolization/object_symbols.hpp>
#include <spanprof/detail/symbolization/shared_source_lines.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <elf.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <thread>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN

// How the default symbolizer reads the objects of the process.
struct ElfSymbolizerOptions {
  // False: names from the symbol tables only, DWARF never read.
  bool source_lines = true;
  // For an object under /lib, /usr/lib, /lib64 or /usr/lib64 (other than the
  // program): its DWARF is a distribution's debug file, compressed, and inflated
  // whole even for its line tables alone, for the few frames a profile holds.
  SystemLibraryLines system_library_lines = detail::default_system_library_lines;
  // What the process's sources of lines may keep together (sections read or
  // inflated, and what was learned of them). Past it, the objects looked up least
  // recently lose their lines for good and keep their names (Stats::source_lines_dropped).
  std::uint64_t source_lines_max_bytes = detail::default_source_lines_max_bytes;
  // Where separate debug files are looked up, in order, by build id
  // (DIR/.build-id/ab/cdef....debug) and by .gnu_debuglink name (DIR/<object's directory>/NAME).
  std::vector<std::string> debug_directories{detail::default_debug_directory};
};

namespace detail {

// Objects are found with dl_iterate_phdr; each executable PT_LOAD segment is a
// Module. Symbols are read the first time an address lands in an object, so a
// process pays only for the libraries it is actually sampled in. One instance
// serves one thread; it takes no locks.
class ElfSymbolizer final : public Symbolizer {
 public:
  ElfSymbolizer() = default;
  explicit ElfSymbolizer(ElfSymbolizerOptions options) noexcept : options_(std::move(options)) {}
  ElfSymbolizer(const ElfSymbolizer&) = delete;
  ElfSymbolizer& operator=(const ElfSymbolizer&) = delete;

  ResolvedFrame resolve(std::uintptr_t address) noexcept override {
    SPANPROF_TRY {
      if (!scanned_) rescan();
      if (const auto cached = cache_.find(address); cached != cache_.end()) return cached->second;
      const Range* range = find_range(address);
      if (range == nullptr) {
        // Probably a library dlopen'ed since the last scan. Rescanning costs a walk
        // over all loaded objects, so garbage addresses may not trigger it often.
        const auto now = std::chrono::steady_clock::now();
        if (now - last_scan_ < std::chrono::seconds(1)) return {};
        rescan();
        range = find_range(address);
        if (range == nullptr) return {};
      }
      ResolvedFrame frame;
      frame.module = range->module;
      LoadedObject& object = *range->object;
      if (object.state == LoadedObject::State::unloaded) load_symbols(object);
#if SPANPROF_WITH_LIBDW
      if (!object.dwarf_opened && options_.source_lines && object.memory_image == nullptr) {
        object.dwarf_opened = true;
        open_source_lines(object);
      }
#endif
      object.symbols.resolve(address - object.bias, range->module->start - object.bias, frame);
#if SPANPROF_WITH_LIBDW
      if (++lookups_ % lookups_between_bound_checks == 0) SourceLinesCache::process().check_bound();
#endif
      if (cache_.size() >= max_cached_addresses) cache_.clear();
      cache_.emplace(address, frame);
      return frame;
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "ELF symbolizer failed internally (out of memory?)");
      return {};
    }
  }

  void refresh() noexcept override {
    SPANPROF_TRY {
      rescan();
      // Callers were told views die here, so objects kept alive for them can go.
      retired_.clear();
    } SPANPROF_CATCH_ALL {
      report_error(ErrorCode::internal, "ELF symbolizer failed to rescan loaded objects (out of memory?)");
    }
  }

  // For diagnostics and tests: the executable segments known since the last
  // scan (the first resolve() performs the first scan).
  std::vector<Module> modules() const {
    std::vector<Module> result;
    for (const auto& range : ranges_) result.push_back(*range.module);
    return result;
  }

 private:
  // Bounds memory in a process whose code is large and sampled for days; refilling is cheap.
  static constexpr std::size_t max_cached_addresses = std::size_t{1} << 20;
  // A process that dlopens and dlcloses plugins all day, with nobody calling
  // refresh(), must not keep every symbol table it ever read.
  static constexpr std::size_t max_retired_objects = 32;
  // What the sources of lines keep grows with the addresses asked of them, a
  // little each: summed up this often, as the bound's first check is at each open.
  static constexpr std::uint64_t lookups_between_bound_checks = 4096;

  struct LoadedObject {
    enum class State { unloaded, loaded, failed };
    std::string loader_name;  // dlpi_name; with the bias, identifies the object across rescans
    std::uintptr_t bias = 0;
    std::string open_path;    // what to read: the file, or /proc/self/exe for the main program
    std::string display_path; // Module::path, also the key for "reported once"
    const unsigned char* memory_image = nullptr;  // the vDSO has no file; its image is read in place
    std::size_t memory_image_size = 0;
    std::string build_id;     // from the in-memory notes: what is really running
    std::vector<Module> modules;  // never resized after a scan: frames point into it
    State state = State::unloaded;
    ObjectSymbols symbols;  // at the object's own addresses
    bool dwarf_opened = false;  // at the first address that needs its DWARF
  };

  struct Range {
    std::uintptr_t start;
    std::uintptr_t limit;
    const Module* module;
    LoadedObject* object;
  };

  // What dl_iterate_phdr showed, processed after the loader lock is released.
  struct ScannedObject {
    std::string loader_name;
    std::uintptr_t bias = 0;
    bool is_main_program = false;
    const unsigned char* memory_image = nullptr;
    std::size_t memory_image_size = 0;
    std::string build_id;
    std::vector<Module> modules;  // path still empty
  };

  // The same, as the loader callback copies it: into room reserved before the
  // scan, so that under the loader lock nothing allocates and nothing waits. A
  // thread whose sample signal arrived inside malloc holds the allocator's lock
  // while its handler's stack walker (libunwind) waits for the loader lock; a
  // callback that allocated under that lock closed the circle (64 threads under
  // CPU and heap profiling deadlocked).
  struct CopiedSegment {
    std::uintptr_t start = 0;
    std::uintptr_t limit = 0;
    std::uint64_t file_offset = 0;
  };
  struct CopiedObject {
    std::size_t name_at = 0;  // in ScanState::names
    std::size_t name_size = 0;
    std::uintptr_t bias = 0;
    bool is_main_program = false;
    const unsigned char* memory_image = nullptr;
    std::size_t memory_image_size = 0;
    unsigned char build_id[64] = {};
    std::size_t build_id_size = 0;
    std::size_t first_segment = 0;  // in ScanState::segments
    std::size_t segment_count = 0;
  };

  struct ScanState {
    // Filled only within their reserved capacity; what would not fit is counted,
    // and the scan runs again with that much room.
    std::vector<CopiedObject> objects;
    std::vector<CopiedSegment> segments;
    std::string names;
    std::size_t objects_wanted = 0;
    std::size_t segments_wanted = 0;
    std::size_t names_wanted = 0;
    std::uintptr_t vdso_header = 0;
    std::uintptr_t page_size = 4096;
    bool first = true;

    bool fits() const noexcept {
      return objects_wanted <= objects.capacity() && segments_wanted <= segments.capacity() &&
             names_wanted <= names.capacity();
    }
  };

  static int scan_one(dl_phdr_info* info, std::size_t, void* data) noexcept {
    auto& state = *static_cast<ScanState*>(data);
    const bool first = state.first;
    state.first = false;
    CopiedObject object;
    const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
    object.name_size = std::strlen(name);
    object.bias = static_cast<std::uintptr_t>(info->dlpi_addr);
    object.is_main_program = first && object.name_size == 0;
    std::size_t executable = 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& segment = info->dlpi_phdr[i];
      if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X) != 0 && segment.p_memsz != 0) ++executable;
    }
    const bool room = state.objects.size() < state.objects.capacity() &&
                      state.segments.capacity() - state.segments.size() >= executable &&
                      state.names.capacity() - state.names.size() >= object.name_size;
    state.objects_wanted += 1;
    state.segments_wanted += executable;
    state.names_wanted += object.name_size;
    if (!room) return 0;  // counted: the next scan has room for it
    object.first_segment = state.segments.size();
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& segment = info->dlpi_phdr[i];
      const std::uintptr_t start = object.bias + segment.p_vaddr;
      if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X) != 0 && segment.p_memsz != 0) {
        state.segments.push_back(CopiedSegment{start, start + segment.p_memsz, segment.p_offset});
        ++object.segment_count;
      }
      if (segment.p_type == PT_LOAD && state.vdso_header != 0 && state.vdso_header >= start &&
          state.vdso_header - start < segment.p_memsz) {
        // The vDSO's section headers sit past p_filesz but inside the last mapped
        // page, and whole pages are always mapped.
        const std::uintptr_t end = start + segment.p_memsz;
        const std::uintptr_t mapped_end = (end + state.page_size - 1) / state.page_size * state.page_size;
        object.memory_image = reinterpret_cast<const unsigned char*>(state.vdso_header);
        object.memory_image_size = mapped_end - state.vdso_header;
      }
      // Notes are read here, under the loader lock, so a concurrent dlclose cannot unmap them.
      if (segment.p_type == PT_NOTE && object.build_id_size == 0) {
        const auto [bytes, length] = find_gnu_build_id_bytes(reinterpret_cast<const unsigned char*>(start),
                                                             static_cast<std::size_t>(segment.p_filesz), segment.p_align);
        object.build_id_size = std::min(length, sizeof object.build_id);
        if (bytes != nullptr) std::memcpy(object.build_id, bytes, object.build_id_size);
      }
    }
    object.name_at = state.names.size();
    state.names.append(name, object.name_size);
    state.objects.push_back(object);
    return 0;
  }

  // Every loaded object with executable code and a file (or image) to read it from.
  static std::vector<ScannedObject> scan_loaded_objects() {
    ScanState state;
    state.vdso_header = static_cast<std::uintptr_t>(::getauxval(AT_SYSINFO_EHDR));
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0) state.page_size = static_cast<std::uintptr_t>(page);
    std::size_t objects = 64, segments = 128, names = 8192;
    for (int attempt = 0;; ++attempt) {
      state.objects.clear();
      state.segments.clear();
      state.names.clear();
      state.objects.reserve(objects);
      state.segments.reserve(segments);
      state.names.reserve(names);
      state.objects_wanted = state.segments_wanted = state.names_wanted = 0;
      state.first = true;
      // Not while a fork is under way (detail/base/loader_lock_gate.hpp): wait it out.
      while (!loader_lock_gate().enter()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ::dl_iterate_phdr(&ElfSymbolizer::scan_one, &state);
      loader_lock_gate().leave();
      // Objects loaded between two scans: a few attempts with room to spare, then
      // whatever fitted (the next rescan finds the rest).
      if (state.fits() || attempt == 3) break;
      objects = state.objects_wanted * 2;
      segments = state.segments_wanted * 2;
      names = state.names_wanted * 2;
    }
    std::vector<ScannedObject> scanned;
    scanned.reserve(state.objects.size());
    for (const CopiedObject& copied : state.objects) {
      const bool has_source =
          copied.is_main_program || copied.memory_image != nullptr || copied.name_size != 0;
      if (copied.segment_count == 0 || !has_source) continue;
      ScannedObject object;
      object.loader_name = state.names.substr(copied.name_at, copied.name_size);
      object.bias = copied.bias;
      object.is_main_program = copied.is_main_program;
      object.memory_image = copied.memory_image;
      object.memory_image_size = copied.memory_image_size;
      object.build_id = hex_lowercase(copied.build_id, copied.build_id_size);
      for (std::size_t i = 0; i < copied.segment_count; ++i) {
        const CopiedSegment& segment = state.segments[copied.first_segment + i];
        Module module;
        module.start = segment.start;
        module.limit = segment.limit;
        module.file_offset = segment.file_offset;
        object.modules.push_back(std::move(module));
      }
      scanned.push_back(std::move(object));
    }
    return scanned;
  }

  static std::string real_path_of(const char* path) {
    std::unique_ptr<char, void (*)(void*)> resolved(::realpath(path, nullptr), std::free);
    return resolved ? std::string(resolved.get()) : std::string(path);
  }

  void rescan() {
    scanned_ = true;
    last_scan_ = std::chrono::steady_clock::now();
    std::vector<ScannedObject> scanned_objects = scan_loaded_objects();

    std::vector<std::unique_ptr<LoadedObject>> next;
    next.reserve(scanned_objects.size());
    for (auto& scanned : scanned_objects) {
      const auto same = std::find_if(objects_.begin(), objects_.end(), [&](const auto& existing) {
        return existing && existing->loader_name == scanned.loader_name && existing->bias == scanned.bias &&
               existing->build_id == scanned.build_id && existing->modules.size() == scanned.modules.size() &&
               existing->modules.front().start == scanned.modules.front().start;
      });
      if (same != objects_.end()) {
        next.push_back(std::move(*same));
        continue;
      }
      auto object = std::make_unique<LoadedObject>();
      object->loader_name = std::move(scanned.loader_name);
      object->bias = scanned.bias;
      object->memory_image = scanned.memory_image;
      object->memory_image_size = scanned.memory_image_size;
      object->build_id = std::move(scanned.build_id);
      if (object->memory_image != nullptr) {
        object->display_path = "[vdso]";  // what /proc/self/maps calls it
      } else if (scanned.is_main_program) {
        // Reading through /proc/self/exe still works when the binary was replaced or deleted.
        object->open_path = "/proc/self/exe";
        object->display_path = real_path_of("/proc/self/exe");
      } else {
        object->open_path = object->loader_name;
        object->display_path = real_path_of(object->loader_name.c_str());
      }
      object->modules = std::move(scanned.modules);
      for (auto& module : object->modules) {
        module.path = object->display_path;
        module.build_id = object->build_id;
      }
      next.push_back(std::move(object));
    }

    bool unloaded_any = false;
    for (auto& old : objects_) {
      if (!old) continue;
      unloaded_any = true;
      retired_.push_back(std::move(old));
    }
    objects_ = std::move(next);
    if (retired_.size() > max_retired_objects) {
      retired_.erase(retired_.begin(), retired_.end() - static_cast<std::ptrdiff_t>(max_retired_objects));
    }
    // Cached frames of an unloaded object would name whatever is mapped there next.
    if (unloaded_any) cache_.clear();

    ranges_.clear();
    for (const auto& object : objects_) {
      for (const auto& module : object->modules) {
        ranges_.push_back(Range{module.start, module.limit, &module, object.get()});
      }
    }
    std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  }

  const Range* find_range(std::uintptr_t address) const noexcept {
    const auto after = std::upper_bound(ranges_.begin(), ranges_.end(), address,
                                        [](std::uintptr_t a, const Range& r) { return a < r.start; });
    if (after == ranges_.begin()) return nullptr;
    const Range& candidate = *(after - 1);
    return address < candidate.limit ? &candidate : nullptr;
  }

#if SPANPROF_WITH_LIBDW
  void open_source_lines(LoadedObject& object) {
    SourceLinesDepth depth = SourceLinesDepth::inlined_functions;
    if (is_system_library(object.open_path)) {
      if (options_.system_library_lines == SystemLibraryLines::none) return;
      if (options_.system_library_lines == SystemLibraryLines::line_tables) depth = SourceLinesDepth::line_tables;
    }
    object.symbols.set_source_lines(SourceLinesCache::process().open(
        object.open_path, object.build_id, options_.debug_directories, depth, options_.source_lines_max_bytes));
  }

  static bool is_system_library(const std::string& path) noexcept {
    for (const char* directory : {"/lib/", "/usr/lib/", "/lib64/", "/usr/lib64/"})
      if (path.compare(0, std::strlen(directory), directory) == 0) return true;
    return false;
  }
#endif

  void load_symbols(LoadedObject& object) {
    object.state = LoadedObject::State::failed;  // until proven otherwise
    // A path is reported once per build: a fixed file reloaded later gets its chance.
    const std::string failure_key = object.display_path + '\n' + object.build_id;
    if (failed_objects_.count(failure_key) != 0) return;

    std::vector<ElfSymbol> symbols;
    ElfImageInfo info;
    Status read;
    std::string htl_hash;
    if (object.memory_image != nullptr) {
      const ElfMemoryBytes image(object.memory_image, object.memory_image_size);
      read = load_elf_symbols_from(image, 0, true, symbols, info);
      htl_hash = elf_htl_hash(image);
    } else {
      ElfFileBytes file;
      read = file.open(object.open_path);
      if (read) read = load_elf_symbols_from(file, 0, true, symbols, info);
      if (read) htl_hash = elf_htl_hash(file);
      if (read && !object.build_id.empty() && !info.build_id.empty() && info.build_id != object.build_id) {
        // Its symbols would be confidently wrong.
        read = elf_failure("build id " + info.build_id + " on disk differs from the loaded " + object.build_id +
                           " (file replaced since it was loaded?)");
      }
    }
    for (Module& module : object.modules) module.htl_hash = htl_hash;
    if (!read) {
      failed_objects_.insert(failure_key);
      report_error(ErrorCode::symbolization_failed,
                   "cannot read symbols from " + object.display_path + ": " + read.message());
      return;
    }
    if (!info.has_symtab) add_separate_debug_symbols(object, info, options_.debug_directories, symbols);
    finalize_elf_symbols(symbols);
    object.symbols.set_symbols(std::move(symbols));
    object.state = LoadedObject::State::loaded;
  }

  // Distributions strip .symtab (static and internal functions) into debug
  // packages keyed by build id. Such a file is optional, so its absence or
  // damage is silent: .dynsym still names the exported functions.
  static void add_separate_debug_symbols(const LoadedObject& object, const ElfImageInfo& info,
                                         const std::vector<std::string>& debug_directories,
                                         std::vector<ElfSymbol>& symbols) {
    const std::string& build_id = !object.build_id.empty() ? object.build_id : info.build_id;
    for (const std::string& directory : debug_directories) {
      const std::string path = build_id_debug_path(build_id, directory);
      if (path.empty()) return;
      ElfFileBytes file;
      if (!file.open(path)) continue;
      std::vector<ElfSymbol> debug_symbols;
      ElfImageInfo debug_info;
      if (!load_elf_symbols_from(file, 0, false, debug_symbols, debug_info)) continue;
      if (!debug_info.build_id.empty() && debug_info.build_id != build_id) continue;
      symbols.insert(symbols.end(), std::make_move_iterator(debug_symbols.begin()),
                     std::make_move_iterator(debug_symbols.end()));
      return;
    }
  }

  std::vector<std::unique_ptr<LoadedObject>> objects_;
  // Unloaded since the last refresh(); frames handed out earlier may still point
  // into them. Only the newest max_retired_objects are kept, so frames of an
  // unloaded object outlive at most that many further unloads.
  std::vector<std::unique_ptr<LoadedObject>> retired_;
  std::vector<Range> ranges_;  // sorted by start
  std::unordered_map<std::uintptr_t, ResolvedFrame> cache_;
  std::unordered_set<std::string> failed_objects_;  // display path + build id, already reported
  ElfSymbolizerOptions options_;
#if SPANPROF_WITH_LIBDW
  std::uint64_t lookups_ = 0;  // addresses resolved, not from the cache
#endif
  bool scanned_ = false;
  std::chrono::steady_clock::time_point last_scan_{};
};

}  // namespace detail

// The default symbolizer: reads the ELF symbol tables of the objects loaded in
// this process (and of their separate debug files), and, built with libdw
// (SPANPROF_WITH_LIBDW), their DWARF for source lines and inlined functions unless
// `options.source_lines` is false. Returns nullptr only when even this small
// allocation fails.
inline std::unique_ptr<Symbolizer> make_elf_symbolizer(ElfSymbolizerOptions options) noexcept {
  SPANPROF_TRY {
    return std::make_unique<detail::ElfSymbolizer>(std::move(options));
  } SPANPROF_CATCH_ALL {
    return nullptr;
  }
}

inline std::unique_ptr<Symbolizer> make_elf_symbolizer(bool source_lines = true) noexcept {
  SPANPROF_TRY {
    ElfSymbolizerOptions options;
    options.source_lines = source_lines;
    return make_elf_symbolizer(std::move(options));
  } SPANPROF_CATCH_ALL {
    return nullptr;
  }
}

SPANPROF_NAMESPACE_END

#endif  // SPANPROF_SYMBOLIZATION_ELF_SYMBOLIZER_HPP_
