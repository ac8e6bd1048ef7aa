// Turns a RawProfile (bare program counters) into a symbolized Profile: one
// Location per distinct address, one Function per distinct name, one Mapping per
// loaded segment, and every sample tied to its span's record.
#ifndef SPANPROF_DETAIL_PROFILE_PROFILE_BUILDER_HPP_
#define SPANPROF_DETAIL_PROFILE_PROFILE_BUILDER_HPP_

#include <spanprof/detail/base/index_table.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>
#include <spanprof/symbolization/symbolizer.hpp>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

class ProfileBuilder {
 public:
  explicit ProfileBuilder(Symbolizer& symbolizer) noexcept : symbolizer_(symbolizer) {}

  // One sample to build: its frames (innermost first), values, and its span
  // (1-based index into the records given to build()).
  struct Sample {
    const std::vector<std::uintptr_t>* frames;
    const std::vector<std::int64_t>* values;
    std::uint32_t span;
    ThreadState thread_state;  // a wall sample's thread_state label; unknown: none
    const std::vector<Label>* labels;  // its own labels (a lock sample's), or null
  };

  // One span's profile, its samples as recorded (profile_batch.hpp merges repeats).
  Profile build(const RawProfile& raw, const std::vector<std::string>& comments) {
    std::vector<Sample> samples;
    samples.reserve(raw.samples.size());
    for (const RawSample& sample : raw.samples)
      samples.push_back({&sample.frames, &sample.values, 1, sample.thread_state, &sample.labels});
    return build(raw, samples, {static_cast<const SpanRecord&>(raw)}, comments);
  }

  // A profile of `header`'s kind, period and time span holding `samples`, each
  // belonging to one of `spans`.
  Profile build(const SpanRecord& header, const std::vector<Sample>& samples, std::vector<SpanRecord> spans,
                const std::vector<std::string>& comments) {
    // Cleared first: a build that threw half-way left entries of its own profile.
    locations_.clear();
    functions_.clear();
    mappings_.clear();
    Profile profile;
    if (header.kind == ProfileKind::cpu) {
      profile.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
      profile.period_type = {"cpu", "nanoseconds"};
      profile.default_sample_type = "cpu";
      profile.period = header.period_ns;
    } else if (header.kind == ProfileKind::wall) {
      // Pyroscope's and Grafana's wall profile type: wall:wall:nanoseconds:wall:nanoseconds.
      profile.sample_types = {{"samples", "count"}, {"wall", "nanoseconds"}};
      profile.period_type = {"wall", "nanoseconds"};
      profile.default_sample_type = "wall";
      profile.period = header.period_ns;
    } else if (header.kind == ProfileKind::lock) {
      // The names of Go's mutex and block profiles, which pprof, Pyroscope and
      // Grafana recognise; every wait is recorded, so one sample is one contention.
      profile.sample_types = {{"contentions", "count"}, {"delay", "nanoseconds"}};
      profile.period_type = {"contentions", "count"};
      profile.default_sample_type = "delay";
      profile.period = 1;
    } else {
      // The names and order Go's heap profiles use, which pprof, Pyroscope and
      // Grafana recognise. A span's question is "what did it allocate", so that is
      // the default view.
      profile.sample_types = {
          {"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
      profile.period_type = {"space", "bytes"};
      profile.default_sample_type = "alloc_space";
      profile.period = header.heap_interval_bytes;
    }
    profile.time_nanos = header.start_unix_ns;
    profile.duration_nanos = header.duration_ns;
    profile.comments = comments;
    if (spans.size() == 1 && spans.front().time.measured()) profile.comments.push_back(time_split_comment(spans.front().time));
    profile.spans = std::move(spans);

    profile.samples.reserve(samples.size());
    for (const Sample& in : samples) {
      spanprof::Sample sample;
      sample.values = *in.values;
      sample.span = in.span;
      if (in.thread_state != ThreadState::unknown) {
        Label state;
        state.key = detail::thread_state_label;
        state.str = std::string(to_string(in.thread_state));
        sample.labels.push_back(std::move(state));
      }
      if (in.labels != nullptr) add_own_labels(*in.labels, sample.labels);
      sample.location_ids.reserve(in.frames->size());
      for (std::size_t i = 0; i < in.frames->size(); ++i) {
        // Callers' frames hold return addresses, which may already belong to the
        // next function (a call as a function's last instruction): look up the
        // call instruction instead, as pprof and debuggers do.
        const std::uintptr_t pc = (*in.frames)[i];
        // Heap and lock frames are all return addresses (the first the call into the
        // allocator or the lock).
        const bool exact = i == 0 && header.kind != ProfileKind::heap && header.kind != ProfileKind::lock;
        const std::uintptr_t address = (exact || pc == 0) ? pc : pc - 1;
        sample.location_ids.push_back(location_for(address, profile));
      }
      profile.samples.push_back(std::move(sample));
    }
    put_main_executable_first(profile);
    return profile;
  }

 private:
  // pprof tools take the first mapping for the program ("File:" in go tool pprof,
  // the binary its symbolizer looks for); samples meet the vDSO or libc first.
  static void put_main_executable_first(Profile& profile) {
    // Never destroyed: a sender that outlived a stop past its deadline may still
    // build a profile while the process runs its exit-time destructors.
    static const std::string& executable = *new std::string([] {
      std::string path;
      if (char* real = ::realpath("/proc/self/exe", nullptr)) {
        path = real;
        std::free(real);
      }
      return path;
    }());
    if (executable.empty()) return;
    for (std::size_t i = 1; i < profile.mappings.size(); ++i) {
      if (profile.mappings[i].filename != executable) continue;
      const std::uint64_t first = 1, found = i + 1;
      std::swap(profile.mappings[0], profile.mappings[i]);
      profile.mappings[0].id = first;
      profile.mappings[i].id = found;
      for (Location& location : profile.locations) {
        if (location.mapping_id == first) location.mapping_id = found;
        else if (location.mapping_id == found) location.mapping_id = first;
      }
      return;
    }
  }

  // A sample's own labels, the holder_frame addresses of a lock sample named: as
  // holder_function and holder_location, the first of the frames (inlined ones
  // included, innermost first) outside the standard library and the C library, so
  // that they say whose code held the lock, whether std::mutex::unlock was inlined
  // there or not.
  void add_own_labels(const std::vector<Label>& labels, std::vector<Label>& out) {
    std::string_view function, file;
    std::int64_t line = 0;
    bool found = false;
    const auto consider = [&](std::string_view name, std::string_view name_file, std::int64_t name_line) {
      if (found || name.empty()) return;
      function = name;
      file = name_file;
      line = name_line;
      found = !is_library_function(name);
    };
    for (const Label& label : labels) {
      if (label.key != holder_frame_label) {
        out.push_back(label);
        continue;
      }
      if (found || !label.is_num || label.num == 0) continue;
      const ResolvedFrame frame = symbolizer_.resolve(static_cast<std::uintptr_t>(label.num) - 1);
      for (std::size_t i = 0; i < frame.inlined_count; ++i)
        consider(frame.inlined[i].function, frame.inlined[i].file, frame.inlined[i].line);
      consider(frame.function.empty() ? frame.system_name : frame.function, frame.file, frame.line);
    }
    if (function.empty()) return;
    Label& function_label = out.emplace_back();
    function_label.key = holder_function_label;
    function_label.str = std::string(function);
    if (file.empty()) return;
    Label& location_label = out.emplace_back();
    location_label.key = holder_location_label;
    location_label.str = std::string(file);
    if (line != 0) location_label.str += ':' + std::to_string(line);
  }

  std::uint64_t location_for(std::uintptr_t address, Profile& profile) {
    const std::uint64_t mixed = static_cast<std::uint64_t>(address) * 0x9E3779B97F4A7C15ull;
    const auto hash = static_cast<std::size_t>(mixed ^ (mixed >> 32));  // the table indexes by the low bits
    const std::size_t found =
        locations_.find(hash, [&](std::size_t position) { return profile.locations[position].address == address; });
    if (found != IndexTable::none) return profile.locations[found].id;
    const ResolvedFrame frame = symbolizer_.resolve(address);
    Location location;
    location.id = profile.locations.size() + 1;
    location.address = address;
    if (frame.module) location.mapping_id = mapping_for(*frame.module, profile);
    if (!frame.function.empty() || !frame.system_name.empty()) {
      location.function_id = function_for(frame.function, frame.system_name, frame.file, frame.start_line, profile);
      location.line = frame.line;
      for (std::size_t i = own_inlined_frames(frame); i < frame.inlined_count; ++i) {
        const InlinedFrame& inlined = frame.inlined[i];
        if (inlined.function.empty() && inlined.system_name.empty()) continue;
        location.inlined.push_back(
            {function_for(inlined.function, inlined.system_name, inlined.file, inlined.start_line, profile),
             inlined.line});
      }
      if (location.mapping_id != 0) {
        Mapping& mapping = profile.mappings[location.mapping_id - 1];
        mapping.has_functions = true;
        // Set from what a symbolizer gave: a profile never claims lines it has not.
        if (!frame.file.empty()) mapping.has_filenames = true;
        if (frame.line != 0) mapping.has_line_numbers = true;
        if (!location.inlined.empty()) mapping.has_inline_frames = true;
      }
    }
    profile.locations.push_back(std::move(location));
    locations_.insert(hash, profile.locations.size() - 1);
    return profile.locations.back().id;
  }

  // spanprof's own code inlined into a caller's (the guard's open and close): the
  // innermost inlined frames at `frame` that are spanprof's, when the function
  // they are in is not. They are left out, so such an address is shown as the line
  // of the caller that opened or closed the guard: a tick a span takes at its close
  // is walked from there (ThreadStackSampler::settle_close_edge), and spanprof's
  // frames in a user's profile would say nothing about the user's code.
  static std::size_t own_inlined_frames(const ResolvedFrame& frame) noexcept {
    const auto ours = [](std::string_view name) { return name.rfind("spanprof::", 0) == 0; };
    if (ours(frame.function)) return 0;
    std::size_t count = 0;
    while (count < frame.inlined_count && ours(frame.inlined[count].function)) ++count;
    return count;
  }

  std::uint64_t mapping_for(const Module& module, Profile& profile) {
    if (auto it = mappings_.find(&module); it != mappings_.end()) return it->second;
    Mapping mapping;
    mapping.id = profile.mappings.size() + 1;
    mapping.memory_start = module.start;
    mapping.memory_limit = module.limit;
    mapping.file_offset = module.file_offset;
    mapping.filename = module.path;
    mapping.build_id = module.build_id;
    mapping.htl_hash = module.htl_hash;
    profile.mappings.push_back(mapping);
    mappings_.emplace(&module, mapping.id);
    return mapping.id;
  }

  // One Function per name and file: two static functions of one name in two files
  // stay apart.
  std::uint64_t function_for(std::string_view function_name, std::string_view system_name, std::string_view file,
                             std::int64_t start_line, Profile& profile) {
    const std::string_view name = function_name.empty() ? system_name : function_name;
    const std::size_t name_hash = std::hash<std::string_view>{}(name);
    const std::size_t hash = name_hash ^ (std::hash<std::string_view>{}(file) + 0x9E3779B97F4A7C15ull +
                                          (name_hash << 6) + (name_hash >> 2));
    const std::size_t found = functions_.find(hash, [&](std::size_t position) {
      const Function& known = profile.functions[position];
      return known.name == name && known.filename == file;
    });
    if (found != IndexTable::none) return profile.functions[found].id;
    Function function;
    function.id = profile.functions.size() + 1;
    function.name = std::string(name);
    function.system_name = std::string(system_name.empty() ? function_name : system_name);
    function.filename = std::string(file);
    function.start_line = start_line;
    profile.functions.push_back(std::move(function));
    functions_.insert(hash, profile.functions.size() - 1);
    return profile.functions.back().id;
  }

  Symbolizer& symbolizer_;
  IndexTable locations_;  // positions in the profile's locations
  IndexTable functions_;  // positions in the profile's functions
  std::unordered_map<const Module*, std::uint64_t> mappings_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_PROFILE_PROFILE_BUILDER_HPP_
