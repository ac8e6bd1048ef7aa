// Internal. What one spanprof::start() makes of Options before anything runs. Each
// row of the settings table (settings.hpp) feeds its member into the plan, and
// start() builds the running configuration, the delivery threads and the default
// uploader and symbolizer from the plan alone. No field here has a default of its
// own: each is fed from Options, whose initializers are the defaults, and a test
// (tests/test_configuration.cpp) fails when a row of Options feeds nothing.
#ifndef SPANPROF_DETAIL_RUNTIME_START_PLAN_HPP_
#define SPANPROF_DETAIL_RUNTIME_START_PLAN_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/capture/sampler_settings.hpp>
#include <spanprof/detail/delivery/worker.hpp>
#include <spanprof/detail/runtime/running_config.hpp>
#include <spanprof/symbolization/elf_symbolizer.hpp>

#include <string>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

struct StartPlan {
  CaptureSettings capture;
  ContinuousSettings continuous;  // the process's continuous profile
  Worker::Config delivery;
  // The signal asked for (0: a free one is picked when the handler is installed).
  int signal_number{};
  // The default file uploader's directory, when delivery.uploaders is empty.
  std::string output_directory;
  // The default symbolizer's options, when delivery.symbolizer is null.
  ElfSymbolizerOptions symbolizer;
  std::string service_name;
  bool publish_process_context{};
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_RUNTIME_START_PLAN_HPP_
