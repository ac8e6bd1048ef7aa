// A host that profiles at 1 kHz into its own uploader, then loads a plugin that
// opens a guard (profiling_plugin.cpp). Prints what reached the host's uploader
// from the plugin's span; test_plugins.cpp reads it.
//   plugin_host <plugin.so>
// Header-only, each compiles the runtime (its one source file); against the
// compiled library, neither does (SPANPROF_IMPLEMENTATION is then ignored).
#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>

#include <atomic>
#include <cstdio>

#include <dlfcn.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::atomic<int> profiles{0};
  std::atomic<long long> period_ns{0}, samples{0};
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = 1000;
  options.uploaders.push_back(std::make_shared<spanprof::CallbackUploader>([&](const spanprof::EncodedProfile& p, std::string_view) {
    if (p.record.span_name == "plugin work") {
      ++profiles;
      period_ns = p.record.period_ns;
      samples += static_cast<long long>(p.sample_count);
    }
    return spanprof::UploadResult::ok();
  }));
  if (!spanprof::start(options)) return 3;
  void* plugin = ::dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", ::dlerror());
    return 4;
  }
  using Work = double (*)();
  const auto work = reinterpret_cast<Work>(::dlsym(plugin, "spanprof_test_plugin_work"));
  if (work == nullptr) return 5;
  std::printf("work: %f\n", work());
  spanprof::flush(std::chrono::seconds(10));
  spanprof::shutdown();
  std::printf("plugin profiles at the host: %d, period %lld ns, samples %lld\n", profiles.load(), period_ns.load(),
              samples.load());
  return 0;
}
