// The OpenTelemetry integration against a real opentelemetry-cpp SDK: spans from
// its tracer, exported to its in-memory exporter, profiled by spanprof.
#include "support/catch.hpp"
#include "support/collector.hpp"

#include <spanprof/opentelemetry.hpp>

#include <opentelemetry/exporters/memory/in_memory_span_data.h>
#include <opentelemetry/exporters/memory/in_memory_span_exporter_factory.h>
#include <opentelemetry/sdk/trace/simple_processor_factory.h>
#include <opentelemetry/sdk/trace/tracer_provider.h>
#include <opentelemetry/sdk/trace/tracer_provider_factory.h>
#include <opentelemetry/trace/provider.h>
#include <opentelemetry/trace/scope.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace api = opentelemetry::trace;
namespace nostd = opentelemetry::nostd;
namespace sdktrace = opentelemetry::sdk::trace;
using opentelemetry::exporter::memory::InMemorySpanData;
using spanprof_test::Collector;

SPANPROF_TEST_HOT_FUNCTION(otel_checkout_work)
SPANPROF_TEST_HOT_FUNCTION(otel_child_work)
SPANPROF_TEST_HOT_FUNCTION(otel_small_work)

// An SDK tracer provider whose finished spans land in memory.
struct Sdk {
  std::shared_ptr<InMemorySpanData> spans;
  nostd::shared_ptr<api::TracerProvider> provider;

  explicit Sdk(std::size_t buffer = 64) {
    auto exporter = opentelemetry::exporter::memory::InMemorySpanExporterFactory::Create(spans, buffer);
    auto processor = sdktrace::SimpleSpanProcessorFactory::Create(std::move(exporter));
    std::shared_ptr<sdktrace::TracerProvider> sdk = sdktrace::TracerProviderFactory::Create(std::move(processor));
    provider = nostd::shared_ptr<api::TracerProvider>(sdk);
  }
  nostd::shared_ptr<api::Tracer> tracer() { return provider->GetTracer("spanprof-test"); }
};

std::string hex_of(const api::SpanId& id) {
  char out[16];
  id.ToLowerBase16(nostd::span<char, 16>(out, 16));
  return std::string(out, 16);
}
std::string hex_of(const api::TraceId& id) {
  char out[32];
  id.ToLowerBase16(nostd::span<char, 32>(out, 32));
  return std::string(out, 32);
}

// The value of a string label every sample of the profile carries (empty if not all do).
std::string common_label(const spanprof::Profile& profile, const std::string& key) {
  std::string value;
  for (const auto& sample : profile.samples) {
    const auto labels = pprof_test::labels_of(sample);
    const auto it = labels.find(key);
    if (it == labels.end() || (!value.empty() && value != it->second)) return {};
    value = it->second;
  }
  return value;
}

std::string profile_id_of(const sdktrace::SpanData& span) {
  const auto& attributes = span.GetAttributes();
  const auto it = attributes.find(std::string(spanprof::otel::profile_id_attribute));
  if (it == attributes.end()) return {};
  const auto* text = nostd::get_if<std::string>(&it->second);
  return text ? *text : std::string("(not a string)");
}

spanprof::Options options_at(int hz) {
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = hz;
  options.queue_capacity = 100000;
  return options;
}

std::optional<spanprof_test::CollectedProfile> cpu_profile_for(Collector& collector, const std::string& span_id) {
  for (const auto& p : collector.profiles())
    if (p.meta.record.span.span_id.to_hex() == span_id && p.meta.record.kind == spanprof::ProfileKind::cpu) return p;
  return std::nullopt;
}

}  // namespace

// The guard over the shared_ptr StartSpan returns, given the span's name or not
// (the OTel API cannot read a name back: without one there is no span_name label).
TEST_CASE("a guard over the shared_ptr StartSpan returns: labels are the SDK span's ids", "[opentelemetry]") {
  Collector collector(options_at(500));
  Sdk sdk;
  auto tracer = sdk.tracer();
  for (const bool named : {true, false}) {
    INFO((named ? "ScopedProfile guard(span, name)" : "ScopedProfile guard(span)"));
    auto span = tracer->StartSpan("POST /checkout");
    if (named) {
      spanprof::ScopedProfile guard(span, "POST /checkout");
      CHECK(guard.active());
      otel_checkout_work(0.05);
    } else {
      spanprof::ScopedProfile guard(span);
      CHECK(guard.active());
      otel_checkout_work(0.05);
    }
    span->End();

    const std::string span_id = hex_of(span->GetContext().span_id());
    const auto profile = cpu_profile_for(collector, span_id);
    REQUIRE(profile);
    CHECK(common_label(profile->decoded, "span_id") == span_id);
    CHECK(common_label(profile->decoded, "trace_id") == hex_of(span->GetContext().trace_id()));
    CHECK(common_label(profile->decoded, "span_name") == (named ? "POST /checkout" : ""));
    CHECK(spanprof_test::share_of_leaf(profile->decoded, "otel_checkout_work") > 0.8);

    const auto exported = sdk.spans->GetSpans();
    REQUIRE(exported.size() == 1);
    CHECK(profile_id_of(*exported[0]) == span_id);  // the profile's span_id label
  }
}

TEST_CASE("Span&, SpanContext and the active span are accepted too", "[opentelemetry]") {
  Collector collector(options_at(500));
  Sdk sdk;
  auto tracer = sdk.tracer();
  auto span = tracer->StartSpan("by reference");
  {
    spanprof::ScopedProfile guard(*span, "by reference");
    otel_small_work(0.03);
  }
  const api::SpanContext context = span->GetContext();
  {
    spanprof::ScopedProfile guard(context, "by context", spanprof::cpu);
    otel_small_work(0.03);
  }
  {
    auto scope = api::Tracer::WithActiveSpan(span);
    spanprof::otel::ScopedCurrentSpanProfile guard("active");
    CHECK(guard.active());
    otel_small_work(0.03);
  }
  span->End();
  std::set<std::string> names;
  for (const auto& p : collector.profiles()) {
    CHECK(p.meta.record.span.span_id.to_hex() == hex_of(context.span_id()));
    names.insert(p.meta.record.span_name);
  }
  CHECK(names == std::set<std::string>{"by reference", "by context", "active"});
}

TEST_CASE("nested OpenTelemetry spans give nested profiles", "[opentelemetry]") {
  Collector collector(options_at(1000));
  Sdk sdk;
  auto tracer = sdk.tracer();
  auto parent = tracer->StartSpan("parent");
  std::string child_id;
  {
    spanprof::ScopedProfile outer(parent, "parent");
    otel_checkout_work(0.04);
    auto scope = api::Tracer::WithActiveSpan(parent);
    auto child = tracer->StartSpan("child");
    child_id = hex_of(child->GetContext().span_id());
    {
      spanprof::ScopedProfile inner(child, "child");
      otel_child_work(0.04);
    }
    child->End();
  }
  parent->End();
  const auto outer = cpu_profile_for(collector, hex_of(parent->GetContext().span_id()));
  const auto inner = cpu_profile_for(collector, child_id);
  REQUIRE(outer);
  REQUIRE(inner);
  // The parent's profile holds its own work and its child's, as its time does.
  CHECK(spanprof_test::share_of_leaf(outer->decoded, "otel_checkout_work") > 0.3);
  CHECK(spanprof_test::share_of_leaf(outer->decoded, "otel_child_work") > 0.3);
  INFO(spanprof_test::leaf_summary(inner->decoded));
  CHECK(spanprof_test::share_of_leaf(inner->decoded, "otel_child_work") > 0.8);
  CHECK(common_label(inner->decoded, "span_id") == child_id);
}

TEST_CASE("only a span whose profile was kept carries pyroscope.profile.id", "[opentelemetry]") {
  spanprof::Options options = options_at(500);
  options.tail_policy = std::make_shared<spanprof::CallbackTailPolicy>([](const spanprof::SpanOutcome& outcome) {
    return outcome.span_name == "keep" ? spanprof::TailDecision::keep_as(spanprof::ProfileReason::slow)
                                       : spanprof::TailDecision::discard();
  });
  Collector collector(options);
  Sdk sdk;
  auto tracer = sdk.tracer();
  for (const char* name : {"keep", "discard"}) {
    auto span = tracer->StartSpan(name);
    {
      spanprof::ScopedProfile guard(span, name);
      otel_small_work(0.04);
    }
    span->End();
  }
  spanprof::flush();
  std::map<std::string, std::string> profile_id;
  std::map<std::string, std::string> span_id;
  for (const auto& span : sdk.spans->GetSpans()) {
    profile_id[std::string(span->GetName())] = profile_id_of(*span);
    span_id[std::string(span->GetName())] = hex_of(span->GetSpanId());
  }
  REQUIRE(span_id.size() == 2);
  REQUIRE_FALSE(span_id["keep"].empty());
  CHECK(profile_id["keep"] == span_id["keep"]);
  CHECK(profile_id["discard"].empty());
  const auto profiles = collector.profiles();
  REQUIRE(profiles.size() == 1);
  CHECK(profiles[0].meta.record.span.span_id.to_hex() == span_id["keep"]);
  CHECK(common_label(profiles[0].decoded, "span_id") == profile_id["keep"]);
}

TEST_CASE("errors recorded on the span reach the tail policy", "[opentelemetry]") {
  spanprof::Options options = options_at(500);
  options.tail_policy = std::make_shared<spanprof::KeepErroredSpans>();
  Collector collector(options);
  Sdk sdk;
  auto tracer = sdk.tracer();

  auto failed = tracer->StartSpan("failed");
  {
    spanprof::ScopedProfile guard(failed, "failed");
    otel_small_work(0.03);
    spanprof::otel::record_error(*failed, "card declined");
  }
  failed->End();

  auto threw = tracer->StartSpan("threw");
  try {
    spanprof::ScopedProfile guard(threw, "threw");
    otel_small_work(0.03);
    throw std::runtime_error("inventory unavailable");
  } catch (const std::exception& e) {
    spanprof::otel::record_exception(*threw, e);
  }
  threw->End();

  auto fine = tracer->StartSpan("fine");
  {
    spanprof::ScopedProfile guard(fine, "fine");
    otel_small_work(0.03);
    fine->SetStatus(api::StatusCode::kOk);
  }
  fine->End();

  std::set<std::string> kept;
  for (const auto& p : collector.profiles()) {
    kept.insert(p.meta.record.span_name);
    CHECK(p.meta.record.reason == spanprof::ProfileReason::error);
  }
  CHECK(kept == std::set<std::string>{"failed", "threw"});
  for (const auto& span : sdk.spans->GetSpans()) {
    const std::string name(span->GetName());
    if (name == "fine") continue;
    CHECK(span->GetStatus() == api::StatusCode::kError);
    CHECK_FALSE(profile_id_of(*span).empty());
  }
}

TEST_CASE("zero-code mode profiles root spans from StartSpan to End", "[opentelemetry]") {
  Collector collector(options_at(1000));
  Sdk sdk;
  auto provider = spanprof::otel::ProfilingTracerProvider::wrap(sdk.provider);
  auto tracer = provider->GetTracer("zero-code");
  auto root = tracer->StartSpan("GET /root");
  std::string child_id;
  {
    auto scope = api::Tracer::WithActiveSpan(root);
    otel_checkout_work(0.04);
    auto child = tracer->StartSpan("child");  // not a root: not profiled by default
    child_id = hex_of(child->GetContext().span_id());
    otel_child_work(0.02);
    child->SetStatus(api::StatusCode::kError);
    child->End();
  }
  root->End();
  const std::string root_id = hex_of(root->GetContext().span_id());
  const auto profile = cpu_profile_for(collector, root_id);
  REQUIRE(profile);
  CHECK(profile->meta.record.span_name == "GET /root");
  CHECK(common_label(profile->decoded, "span_name") == "GET /root");
  CHECK_FALSE(cpu_profile_for(collector, child_id));
  bool root_linked = false;
  for (const auto& span : sdk.spans->GetSpans()) {
    if (std::string(span->GetName()) == "GET /root") root_linked = profile_id_of(*span) == root_id;
    if (std::string(span->GetName()) == "child") CHECK(span->GetStatus() == api::StatusCode::kError);  // forwarded
  }
  CHECK(root_linked);
}

TEST_CASE("zero-code mode honours the head sampler and span names", "[opentelemetry]") {
  spanprof::Options options = options_at(1000);
  options.head_sampler = std::make_shared<spanprof::CallbackSampler>(
      [](const spanprof::SpanContext&, std::string_view name) { return name != "GET /health"; });
  Collector collector(options);
  Sdk sdk;
  spanprof::otel::ProfilingTracerOptions select;
  select.spans = spanprof::otel::ProfilingTracerOptions::Spans::named;
  select.span_names = {"GET /*"};
  auto tracer = spanprof::otel::ProfilingTracerProvider::wrap(sdk.provider, select)->GetTracer("named");
  for (const char* name : {"GET /health", "GET /items", "POST /items"}) {
    auto span = tracer->StartSpan(name);
    otel_small_work(0.03);
    span->End();
  }
  std::set<std::string> profiled;
  for (const auto& p : collector.profiles()) profiled.insert(p.meta.record.span_name);
  CHECK(profiled == std::set<std::string>{"GET /items"});
  CHECK(spanprof::stats().head_declined >= 1);
}

TEST_CASE("zero-code mode: 8 threads x 1000 spans, nested, some ending elsewhere", "[opentelemetry]") {
  spanprof::Options options = options_at(4000);
  options.thread_buffer_bytes = 4 << 20;
  Collector collector(options);
  Sdk sdk(20000);
  spanprof::otel::ProfilingTracerOptions select;
  select.spans = spanprof::otel::ProfilingTracerOptions::Spans::all;
  auto tracer = spanprof::otel::ProfilingTracerProvider::wrap(sdk.provider, select)->GetTracer("stress");
  const spanprof::Stats before = spanprof::stats();

  // Spans handed to this thread are ended here, not where they started.
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<nostd::shared_ptr<api::Span>> to_end;
  bool done = false;
  std::thread finisher([&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      ready.wait(lock, [&] { return done || !to_end.empty(); });
      if (to_end.empty() && done) return;
      auto span = std::move(to_end.front());
      to_end.pop_front();
      lock.unlock();
      span->End();
      span = nullptr;
      lock.lock();
    }
  });

  constexpr int threads = 8, spans_per_thread = 1000;
  std::atomic<int> ended_elsewhere{0}, out_of_order{0};
  std::set<std::string> not_ended_in_order;  // linked at End(), delivered later: may have no samples
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < spans_per_thread / 2; ++i) {
        auto root = tracer->StartSpan("root " + std::to_string(t));
        auto scope = api::Tracer::WithActiveSpan(root);
        auto child = tracer->StartSpan("child " + std::to_string(t));
        otel_small_work(0.0004);
        if (i % 10 == 3 || i % 10 == 7) {
          std::lock_guard<std::mutex> lock(mutex);
          not_ended_in_order.insert(hex_of(root->GetContext().span_id()));
        }
        if (i % 10 == 3) {
          // Out of order: the root ends before its child.
          root->End();
          ++out_of_order;
          child->End();
        } else if (i % 10 == 7) {
          child->End();
          std::lock_guard<std::mutex> lock(mutex);
          to_end.push_back(root);  // ended on the finisher thread
          ++ended_elsewhere;
          ready.notify_one();
        } else {
          child->End();
          root->End();
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  ready.notify_one();
  finisher.join();
  REQUIRE(spanprof::flush(std::chrono::seconds(60)));

  const spanprof::Stats after = spanprof::stats();
  const auto started = after.profiles_started - before.profiles_started;
  const auto kept = after.kept_sampled - before.kept_sampled;
  const auto discarded = after.discarded_explicitly - before.discarded_explicitly;
  const auto elsewhere = after.otel_spans_ended_elsewhere - before.otel_spans_ended_elsewhere;
  CHECK(started == threads * spans_per_thread);                  // every span was profiled
  CHECK(elsewhere == static_cast<std::uint64_t>(ended_elsewhere + out_of_order));
  CHECK(discarded == 0);                                          // those too are delivered
  CHECK(kept + discarded == started);                             // every request delivered once

  // Every profile's labels match its span; every linked span has its profile.
  const auto exported = sdk.spans->GetSpans();
  CHECK(exported.size() == threads * spans_per_thread);
  std::map<std::string, const sdktrace::SpanData*> by_id;
  for (const auto& span : exported) by_id[hex_of(span->GetSpanId())] = span.get();
  std::set<std::string> profiled_ids;
  int mismatched = 0;
  for (const auto& p : collector.profiles()) {
    const std::string id = p.meta.record.span.span_id.to_hex();
    profiled_ids.insert(id);
    const auto it = by_id.find(id);
    if (it == by_id.end() || common_label(p.decoded, "span_name") != std::string(it->second->GetName()) ||
        common_label(p.decoded, "trace_id") != hex_of(it->second->GetTraceId()) ||
        common_label(p.decoded, "span_id") != id)
      ++mismatched;
  }
  CHECK(mismatched == 0);
  CHECK_FALSE(profiled_ids.empty());
  WARN("spans " << started << ", kept " << kept << ", ended elsewhere " << elsewhere << ", profiles with samples "
                << profiled_ids.size());
  std::set<std::string> linked_ids;
  for (const auto& span : exported) {
    const std::string link = profile_id_of(*span);
    if (!link.empty()) {
      CHECK(link == hex_of(span->GetSpanId()));
      linked_ids.insert(link);
    }
  }
  // Every profile is linked; a span linked without one ended elsewhere or out of
  // order, linked at End() before its fragment closed, and took no sample.
  for (const auto& id : profiled_ids) CHECK(linked_ids.count(id) == 1);
  for (const auto& id : linked_ids)
    if (profiled_ids.count(id) == 0) CHECK(not_ended_in_order.count(id) == 1);
}

// The thread that started the span stays idle until the test has checked: its
// fragment is still open there, and flush() must deliver the profile all the same.
TEST_CASE("zero-code mode: a span that ends on another thread gets one profile and its link, while its first thread "
          "idles", "[opentelemetry]") {
  Collector collector(options_at(1000));
  Sdk sdk;
  auto tracer = spanprof::otel::ProfilingTracerProvider::wrap(sdk.provider)->GetTracer("elsewhere");
  const spanprof::Stats before = spanprof::stats();
  nostd::shared_ptr<api::Span> span;
  std::mutex mutex;
  std::condition_variable changed;
  int phase = 0;
  std::thread starter([&] {
    auto started = tracer->StartSpan("GET /handed-over");
    otel_checkout_work(0.12);
    std::unique_lock<std::mutex> lock(mutex);
    span = started;
    phase = 1;
    changed.notify_all();
    changed.wait(lock, [&] { return phase == 2; });
    lock.unlock();
    // Only now does the thread go on: its next span frees the handed-over one's slot.
    auto next = tracer->StartSpan("GET /next");
    otel_small_work(0.02);
    next->End();
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return phase == 1; });
  }
  span->End();  // on this thread
  const std::string id = hex_of(span->GetContext().span_id());
  const bool flushed = static_cast<bool>(spanprof::flush(std::chrono::seconds(10)));
  std::vector<spanprof_test::CollectedProfile> mine;
  for (auto& p : collector.profiles())
    if (p.meta.record.span.span_id.to_hex() == id) mine.push_back(p);
  {
    std::lock_guard<std::mutex> lock(mutex);
    phase = 2;
  }
  changed.notify_all();
  starter.join();
  CHECK(flushed);

  REQUIRE(mine.size() == 1);
  CHECK(mine.front().meta.record.span_name == "GET /handed-over");
  CHECK(spanprof_test::share_on_stack(mine.front().decoded, "otel_checkout_work") > 0.8);
  bool linked = false;
  for (const auto& exported : sdk.spans->GetSpans())
    if (hex_of(exported->GetSpanId()) == id) linked = profile_id_of(*exported) == id;
  CHECK(linked);
  CHECK(spanprof::stats().otel_spans_ended_elsewhere - before.otel_spans_ended_elsewhere == 1);
  // The next span on the starting thread made its own profile, nothing more of this one.
  spanprof::flush(std::chrono::seconds(10));
  int of_this_span = 0;
  for (const auto& p : collector.profiles()) of_this_span += p.meta.record.span.span_id.to_hex() == id;
  CHECK(of_this_span == 1);
}

TEST_CASE("a spanprof::RequestProfile over an OpenTelemetry span: fragments on two threads, one profile with its ids",
          "[opentelemetry][requests]") {
  Collector collector(options_at(1000));
  Sdk sdk;
  auto tracer = sdk.provider->GetTracer("requests");
  auto span = tracer->StartSpan("GET /orders");
  spanprof::RequestProfile request(span, "GET /orders");
  std::thread(spanprof::bind(request, [] { otel_checkout_work(0.05); })).join();
  std::thread(spanprof::bind(request, [] { otel_child_work(0.05); })).join();
  request.end();
  span->End();
  const auto profile = cpu_profile_for(collector, hex_of(span->GetContext().span_id()));
  REQUIRE(profile);
  CHECK(common_label(profile->decoded, "trace_id") == hex_of(span->GetContext().trace_id()));
  CHECK(spanprof_test::share_on_stack(profile->decoded, "otel_checkout_work") > 0.2);
  CHECK(spanprof_test::share_on_stack(profile->decoded, "otel_child_work") > 0.2);
}

// The continuous profile (Options::continuous) labels a sample with the span's
// local root: exactly those spans carry pyroscope.profile.id, with no span profile
// kept (the head sampler profiles none), so Grafana links them to the window.
TEST_CASE("continuous: pyroscope.profile.id on exactly the spans whose ids label the window's samples",
          "[opentelemetry][continuous]") {
  spanprof::Options options = options_at(500);
  options.continuous = true;
  options.head_sampler = std::make_shared<spanprof::NeverSampler>();
  Collector collector(options);
  Sdk sdk;
  auto tracer = sdk.tracer();
  auto root = tracer->StartSpan("POST /checkout");
  std::string child_id;
  {
    spanprof::ScopedProfile guard(root, "POST /checkout");
    api::StartSpanOptions child_of_root;
    child_of_root.parent = root->GetContext();
    auto child = tracer->StartSpan("price", child_of_root);
    {
      spanprof::ScopedProfile inner(child, "price");
      otel_checkout_work(0.1);
    }
    child_id = hex_of(child->GetContext().span_id());
    child->End();
  }
  root->End();
  auto idle = tracer->StartSpan("GET /health");
  {
    spanprof::ScopedProfile guard(idle, "GET /health");  // runs no CPU: no sample
  }
  idle->End();
  const std::string root_id = hex_of(root->GetContext().span_id());
  std::map<std::string, std::string> linked;  // span id -> its profile id attribute
  for (const auto& span : sdk.spans->GetSpans()) linked[hex_of(span->GetSpanId())] = profile_id_of(*span);
  CHECK(linked[root_id] == root_id);  // labels the window's samples
  CHECK(linked[child_id].empty());    // its samples carry its local root
  CHECK(linked[hex_of(idle->GetContext().span_id())].empty());
  bool root_in_window = false;
  for (const auto& profile : collector.profiles()) {
    CHECK(profile.meta.record.reason == spanprof::ProfileReason::continuous);  // no span profile kept
    for (const auto& sample : profile.decoded.samples)
      root_in_window = root_in_window || pprof_test::labels_of(sample)["span_id"] == root_id;
  }
  CHECK(root_in_window);
}
