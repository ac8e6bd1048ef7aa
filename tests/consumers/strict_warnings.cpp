// A user translation unit built with every warning a strict project turns on
// (-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror), under g++ and clang++,
// C++17 and C++20. It touches every public header and instantiates the templates a
// user instantiates, so a warning anywhere in spanprof fails the build.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/allocation_hooks.hpp>
#include <spanprof/spanprof.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace strict {

struct Span {
  spanprof::SpanContext context;
  std::string name;
  bool error = false;
};

class CountingUploader final : public spanprof::Uploader {
 public:
  CountingUploader() : Uploader("counting") {}
  int uploads = 0;

 protected:
  spanprof::UploadResult do_send(const spanprof::EncodedProfile& profile, std::string_view,
                                 const spanprof::UploadContext&) override {
    uploads += profile.sample_count > 0 ? 1 : 0;
    return spanprof::UploadResult::ok();
  }
};

}  // namespace strict

template <>
struct spanprof::span_adapter<strict::Span> {
  static spanprof::SpanContext context(const strict::Span& span) noexcept { return span.context; }
  static std::string_view name(const strict::Span& span) noexcept { return span.name; }
  static bool failed(const strict::Span& span) noexcept { return span.error; }
};

int strict_main() {
  spanprof::Options options;
  options.profiles = spanprof::cpu | spanprof::heap;
  options.head_sampler = std::make_shared<spanprof::AllOfSampler>(std::vector<std::shared_ptr<spanprof::HeadSampler>>{
      std::make_shared<spanprof::ParentSampledSampler>(), std::make_shared<spanprof::TraceIdRatioSampler>(0.5),
      std::make_shared<spanprof::RateLimitingSampler>(10.0, 2.0),
      std::make_shared<spanprof::CallbackSampler>([](const spanprof::SpanContext&, std::string_view) { return true; })});
  options.tail_policy = std::make_shared<spanprof::CallbackTailPolicy>(
      [](const spanprof::SpanOutcome& outcome) { return spanprof::TailDecision::keep_as(outcome.error ? spanprof::ProfileReason::error : spanprof::ProfileReason::sampled); });
  options.symbolizer = std::make_shared<spanprof::CallbackSymbolizer>([](std::uintptr_t) { return spanprof::ResolvedFrame{}; });
  auto counting = std::make_shared<strict::CountingUploader>();
  options.uploaders = {counting, std::make_shared<spanprof::FileUploader>("profiles")};
#if SPANPROF_WITH_CURL
  spanprof::PyroscopeOptions pyroscope;
  pyroscope.server_address = "http://127.0.0.1:4040";
  options.uploaders.push_back(std::make_shared<spanprof::PyroscopeUploader>(pyroscope));
  spanprof::OtlpOptions otlp;
  otlp.endpoint = "http://127.0.0.1:4318";
  options.uploaders.push_back(std::make_shared<spanprof::OtlpUploader>(otlp));
#endif
  spanprof::set_error_handler([](const spanprof::Error& error) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(error.message.size()), error.message.data());
  });
  const spanprof::StartResult result = spanprof::start(options);
  for (const spanprof::ConfigurationProblem& problem : result.problems) std::puts(problem.message.c_str());

  const spanprof::TraceparentParse parsed = spanprof::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  char header[55];
  spanprof::format_traceparent(parsed.context, header);
  const strict::Span span{parsed.context, "GET /strict", false};
  {
    spanprof::ScopedProfile guard(span);
    spanprof::ScopedProfile nested(spanprof::NamedSpan{parsed.context, "nested"}, spanprof::cpu);
    spanprof::ScopedProfile by_context(parsed.context, "by context", spanprof::heap);
    guard.set_error();
  }
  spanprof::flush(std::chrono::seconds(1));
  const spanprof::Stats stats = spanprof::stats();
  std::printf("%s%llu %d\n", spanprof::describe(options).c_str(), static_cast<unsigned long long>(stats.guards_opened),
              counting->uploads);
  return spanprof::shutdown() ? 0 : 1;
}
