// Profile the requests that throw. The tail policy keeps a profile only when the
// span failed: an exception left the guard's scope, or the handler called
// guard.set_error() for a failure it handled itself. Everything else is discarded
// at the guard, before any symbolization, encoding or upload.
#define SPANPROF_IMPLEMENTATION  // this file compiles spanprof's runtime (once per program)
#include <spanprof/spanprof.hpp>

#include "example_support.hpp"

#include <cstdio>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

__attribute__((noinline)) std::uint64_t validate_order(int items, std::int64_t cpu_ns) {
  const std::int64_t end = example::thread_cpu_ns() + cpu_ns;
  std::uint64_t h = 1469598103934665603ull;
  while (example::thread_cpu_ns() < end)
    for (int i = 0; i < 20000; ++i) h = (h ^ static_cast<std::uint64_t>(items + i)) * 1099511628211ull;
  if (items > 90) throw std::invalid_argument("too many items in one order");
  return h;
}

// A failure the handler turns into a response itself: nothing is thrown, so it
// marks the span.
__attribute__((noinline)) bool charge_card(spanprof::ScopedProfile& guard, int items) {
  const std::int64_t end = example::thread_cpu_ns() + 10'000'000;
  volatile double x = 1;
  while (example::thread_cpu_ns() < end) x = x * 1.0000001;
  if (items % 29 == 0) {
    guard.set_error();
    return false;
  }
  return true;
}

std::string handle_order(const spanprof::SpanContext& span, int items) {
  spanprof::ScopedProfile guard(spanprof::NamedSpan{span, "POST /orders"});
  validate_order(items, 10'000'000);
  return charge_card(guard, items) ? "201 Created" : "402 Payment Required";
}

}  // namespace

int main() {
  spanprof::Options options;
  auto files = std::make_shared<spanprof::FileUploader>(options.output_directory);
  if (!std::getenv("SPANPROF_FREQUENCY")) options.frequency_hz = 500;
  options.tail_policy = std::make_shared<spanprof::KeepErroredSpans>();
  std::mutex mutex;
  std::vector<std::string> kept;
  options.uploaders = {files, std::make_shared<spanprof::CallbackUploader>(
                                  [&](const spanprof::EncodedProfile& p, std::string_view) {
                                    std::lock_guard<std::mutex> lock(mutex);
                                    kept.push_back("span " + p.record.span.span_id.to_hex() + "  profile_reason=" +
                                                   std::string(spanprof::to_string(p.record.reason)) + "  " +
                                                   std::to_string(p.sample_count) + " samples  " +
                                                   spanprof::FileUploader::file_name_for(p));
                                    return spanprof::UploadResult::ok();
                                  },
                                  "summary")};
  spanprof::start(options);

  std::mt19937_64 rng(5);
  int thrown = 0, declined = 0;
  for (int request = 0; request < 60; ++request) {
    const int items = static_cast<int>(rng() % 100);
    try {
      if (handle_order(example::random_span(rng), items) != "201 Created") ++declined;
    } catch (const std::invalid_argument&) {
      ++thrown;  // the server answers 400; the profile was already kept
    }
  }
  spanprof::flush();
  std::printf("requests: 60, threw: %d, card declined (set_error): %d, profiles kept: %zu\n", thrown, declined,
              kept.size());
  for (const auto& line : kept) std::printf("%s\n", line.c_str());
  std::printf("files in %s\n", files->directory().c_str());
  spanprof::shutdown();
  return kept.size() == static_cast<std::size_t>(thrown + declined) ? 0 : 1;
}
