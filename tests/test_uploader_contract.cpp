// The uploader contract, from the side of someone who writes one: a class with
// one hook (do_send), written as the README shows, that misbehaves the ways real
// ones do — it throws, it fails for a while, it hangs. What is checked is what the
// host would see: nothing escapes into it, a shutdown keeps its deadline, and
// every profile that could be kept reaches the uploaders that work.
#include "support/catch.hpp"
#include "support/collector.hpp"

#include <spanprof/profile/pprof_encoder.hpp>
#include <spanprof/spanprof.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using spanprof_test::span_number;

// A named namespace: the suites are compiled in unity batches.
namespace uploader_contract {

SPANPROF_TEST_HOT_FUNCTION(contract_work)

enum class Misbehaviour { throws, fails_four_times, hangs };

class MisbehavingUploader final : public spanprof::Uploader {
 public:
  explicit MisbehavingUploader(Misbehaviour misbehaviour) : Uploader("misbehaving"), misbehaviour_(misbehaviour) {}

  std::atomic<int> sends{0}, flushes{0};
  std::atomic<bool> hang_ended{false};
  std::set<std::string> delivered() {
    std::lock_guard<std::mutex> lock(mutex_);
    return delivered_;
  }

 protected:
  spanprof::UploadResult do_send(const spanprof::EncodedProfile& profile, std::string_view payload,
                                 const spanprof::UploadContext& context) override {
    const int attempt = ++sends;
    switch (misbehaviour_) {
      case Misbehaviour::throws:
        throw std::runtime_error("broker exploded");
      case Misbehaviour::fails_four_times:
        if (attempt <= 4) return spanprof::UploadResult::retryable("broker not ready");
        break;
      case Misbehaviour::hangs:
        while (!context.cancel_requested())
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        hang_ended = true;
        return spanprof::UploadResult::retryable("gave up: shutting down");
    }
    if (payload.empty()) return spanprof::UploadResult::permanent("empty payload");
    std::lock_guard<std::mutex> lock(mutex_);
    delivered_.insert(profile.record.span.span_id.to_hex());  // per span: the record's own ids
    return spanprof::UploadResult::ok();
  }

  spanprof::UploadResult do_flush() override {
    ++flushes;
    return spanprof::UploadResult::ok();
  }

 private:
  const Misbehaviour misbehaviour_;
  std::mutex mutex_;
  std::set<std::string> delivered_;
};

struct ErrorLog {
  std::mutex mutex;
  std::vector<std::string> lines;
  bool mentions(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& line : lines)
      if (line.find(text) != std::string::npos) return true;
    return false;
  }
};

spanprof::Options options_with(std::vector<std::shared_ptr<spanprof::Uploader>> uploaders) {
  spanprof::Options options(spanprof::ignore_environment);
  options.frequency_hz = 500;
  // One profile per span, counted, on the default source (test_outage.cpp).
  options.retry.max_attempts = 2;
  options.retry.initial_backoff = std::chrono::milliseconds(10);
  options.retry.max_backoff = std::chrono::milliseconds(40);
  options.uploaders = std::move(uploaders);
  return options;
}

void profile_contract_spans(unsigned first, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    spanprof::ScopedProfile guard(spanprof::NamedSpan{span_number(first + i), "contract"});
    contract_work(0.02);
  }
}

std::set<std::string> span_ids(unsigned first, unsigned n) {
  std::set<std::string> out;
  for (unsigned i = 0; i < n; ++i) out.insert(span_number(first + i).span_id.to_hex());
  return out;
}

}  // namespace uploader_contract

using namespace uploader_contract;  // NOLINT: the names below are this file's

TEST_CASE("an uploader that throws: the host never sees it, the other uploaders get every profile",
          "[uploader]") {
  auto errors = std::make_shared<ErrorLog>();
  spanprof::set_error_handler([errors](const spanprof::Error& error) {
    std::lock_guard<std::mutex> lock(errors->mutex);
    errors->lines.emplace_back(error.message);
  });
  auto thrower = std::make_shared<MisbehavingUploader>(Misbehaviour::throws);
  std::mutex mutex;
  std::set<std::string> kept;
  auto keeper = std::make_shared<spanprof::CallbackUploader>([&](const spanprof::EncodedProfile& profile, std::string_view) {
    std::lock_guard<std::mutex> lock(mutex);
    kept.insert(profile.record.span.span_id.to_hex());
    return spanprof::UploadResult::ok();
  });
  spanprof::start(options_with({thrower, keeper}));
  const auto before = spanprof::stats();
  profile_contract_spans(3100, 3);
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  const auto after = spanprof::stats();
  spanprof::shutdown(std::chrono::seconds(2));
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});

  CHECK(kept == span_ids(3100, 3));
  CHECK(thrower->sends == 3);  // a throw is permanent: not retried
  CHECK(thrower->flushes >= 1);
  CHECK(after.upload_failures - before.upload_failures == 3);
  CHECK(errors->mentions("misbehaving: uploader threw: broker exploded"));
}

TEST_CASE("an uploader that fails for a while: retried, spooled, then every profile delivered once",
          "[uploader]") {
  const std::string spool = "/tmp/spanprof-contract-spool-" + std::to_string(::getpid());
  std::system(("rm -rf " + spool).c_str());
  spanprof::set_error_handler({});
  auto flaky = std::make_shared<MisbehavingUploader>(Misbehaviour::fails_four_times);
  spanprof::Options options = options_with({flaky});
  options.spool_directory = spool;
  spanprof::start(options);
  const auto before = spanprof::stats();
  profile_contract_spans(3200, 3);
  REQUIRE(spanprof::flush(std::chrono::seconds(10)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  // The sender removes a spooled file once its send returned: the last delivery
  // is seen a moment before its file is gone.
  while ((flaky->delivered().size() < 3 || spanprof::stats().spool_pending != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    spanprof::flush(std::chrono::seconds(1));  // re-sends what is due from the spool
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto after = spanprof::stats();
  spanprof::shutdown(std::chrono::seconds(2));
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
  std::system(("rm -rf " + spool).c_str());

  CHECK(flaky->delivered() == span_ids(3200, 3));
  CHECK(after.upload_failures - before.upload_failures == 0);
  CHECK(after.profiles_spooled - before.profiles_spooled >= 1);
  CHECK(after.spool_pending == 0);
}

TEST_CASE("an uploader that hangs: request threads never wait, shutdown keeps its deadline", "[uploader]") {
  spanprof::set_error_handler({});
  auto hanger = std::make_shared<MisbehavingUploader>(Misbehaviour::hangs);
  spanprof::start(options_with({hanger}));
  const auto before = spanprof::stats();
  profile_contract_spans(3300, 4);  // the first send hangs; the rest wait in the queue
  const auto start = std::chrono::steady_clock::now();
  const spanprof::Status stopped = spanprof::shutdown(std::chrono::milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK_FALSE(stopped);  // the caller learns it, from the call itself
  CHECK(stopped.code() == spanprof::ErrorCode::timed_out);
  CHECK(stopped.message() == "shutdown: profiles still pending after 300 ms");
  // The abandoned call sees the cancellation and returns; its failure is reported
  // late. On a busy machine the merger may also count what it held after
  // shutdown() returned (it waits 200 ms for it): the counts settle, then add up.
  // A span whose samples all came late (TSan delivers a signal at the thread's next
  // intercepted call) has no profile, and is counted as such.
  auto profiled = [&](const spanprof::Stats& now) { return now.profiles_enqueued - before.profiles_enqueued; };
  auto without_samples = [&](const spanprof::Stats& now) {
    return now.spans_without_samples - before.spans_without_samples;
  };
  auto settled = [&](const spanprof::Stats& now) {
    return profiled(now) + without_samples(now) == 4 &&
           (now.profiles_dropped - before.profiles_dropped) + (now.upload_failures - before.upload_failures) ==
               profiled(now);
  };
  auto after = spanprof::stats();
  for (int i = 0; i < 600 && !(hanger->hang_ended && settled(after)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    after = spanprof::stats();
  }
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});

  CHECK(took < std::chrono::seconds(3));
  CHECK(hanger->hang_ended);
  CHECK(hanger->delivered().empty());
  // Every span is accounted for: none delivered, each profile dropped or failed, counted.
  INFO(without_samples(after) << " of 4 spans without a sample");
  CHECK(profiled(after) + without_samples(after) == 4);
  CHECK(profiled(after) >= 3);
  CHECK((after.profiles_dropped - before.profiles_dropped) + (after.upload_failures - before.upload_failures) ==
        profiled(after));
}

// ---- time is the clock's: windows and backoff without sleeping through them -----------

TEST_CASE("a batched window closes when the clock passes its end, not on the wall clock", "[uploader][clock]") {
  auto clock = std::make_shared<spanprof::ManualClock>();
  std::mutex mutex;
  std::set<std::string> received;
  std::atomic<int> windows{0};
  auto batched = std::make_shared<spanprof::CallbackUploader>(
      [&](const spanprof::EncodedProfile&, std::string_view, const spanprof::UploadContext& context) {
        std::lock_guard<std::mutex> lock(mutex);
        if (context.profile != nullptr)
          for (const spanprof::SpanRecord& span : context.profile->spans) received.insert(span.span.span_id.to_hex());
        ++windows;
        return spanprof::UploadResult::ok();
      },
      "windows", spanprof::Delivery::batched(std::chrono::seconds(10)));
  spanprof::Options options = options_with({batched});
  options.clock = clock;
  spanprof::start(options);
  profile_contract_spans(3400, 3);
  // Real time passes, the merger looks twice: on the clock the window is still open.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  CHECK(windows == 0);
  clock->advance(std::int64_t{10} * 1'000'000'000);
  for (int i = 0; i < 500 && windows == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  spanprof::shutdown(std::chrono::seconds(2));
  CHECK(windows == 1);
  std::lock_guard<std::mutex> lock(mutex);
  CHECK(received == span_ids(3400, 3));
}

TEST_CASE("a backoff of minutes ends when the clock says so: spooled profiles delivered, none lost",
          "[uploader][clock]") {
  const std::string spool = "/tmp/spanprof-contract-clock-" + std::to_string(::getpid());
  std::system(("rm -rf " + spool).c_str());
  spanprof::set_error_handler({});
  auto clock = std::make_shared<spanprof::ManualClock>();
  auto flaky = std::make_shared<MisbehavingUploader>(Misbehaviour::fails_four_times);
  spanprof::Options options = options_with({flaky});
  options.clock = clock;
  options.spool_directory = spool;
  options.retry.initial_backoff = std::chrono::minutes(1);  // slept for real, this test would take an hour
  options.retry.max_backoff = std::chrono::minutes(10);
  spanprof::start(options);
  const auto before = spanprof::stats();
  profile_contract_spans(3500, 3);
  for (int i = 0; i < 2000 && flaky->delivered().size() < 3; ++i) {
    clock->advance(std::int64_t{60} * 1'000'000'000);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto after = spanprof::stats();
  spanprof::shutdown(std::chrono::seconds(2));
  spanprof::set_error_handler(spanprof::RateLimitedStderrHandler{});
  std::system(("rm -rf " + spool).c_str());

  CHECK(flaky->delivered() == span_ids(3500, 3));
  CHECK(after.upload_retries - before.upload_retries >= 1);
  CHECK(after.upload_failures - before.upload_failures == 0);
}

TEST_CASE("upload() hands a callback the record, the pprof's bytes and the profile they came from", "[uploader]") {
  spanprof::Profile profile;
  profile.sample_types = {{"samples", "count"}, {"cpu", "nanoseconds"}};
  profile.period_type = {"cpu", "nanoseconds"};
  profile.period = 10'000'000;
  profile.functions.push_back({1, "checkout::price_cart", "", ""});
  profile.locations.push_back({1, 0, 0x401000, 1});
  spanprof::Sample sample;
  sample.location_ids = {1};
  sample.values = {3, 30'000'000};
  profile.samples.push_back(sample);
  std::string pprof;
  REQUIRE(spanprof::encode_pprof_gzip(profile, pprof));

  spanprof::EncodedProfile encoded;
  encoded.record.span = span_number(4242);
  encoded.record.span_name = "POST /checkout";
  encoded.sample_count = 1;
  std::string seen_bytes, seen_name;
  const spanprof::Profile* seen_profile = nullptr;
  spanprof::CallbackUploader uploader(
      [&](const spanprof::EncodedProfile& p, std::string_view pprof_gzip, const spanprof::UploadContext& context) {
        seen_name = p.record.span_name;
        seen_bytes.assign(pprof_gzip.data(), pprof_gzip.size());
        seen_profile = context.profile;
        return spanprof::UploadResult::ok();
      });
  REQUIRE(uploader.upload(encoded, spanprof::EncodeInput{&profile, pprof}));
  CHECK(seen_name == "POST /checkout");
  CHECK(seen_bytes == pprof);
  CHECK(seen_profile == &profile);

  pprof_test::DecodedPprof decoded;
  std::string error;
  REQUIRE(pprof_test::decode_pprof(seen_bytes, decoded, error));
  REQUIRE(decoded.profile.samples.size() == 1);
  CHECK(decoded.profile.samples[0].values.at(1) == 30'000'000);
}
