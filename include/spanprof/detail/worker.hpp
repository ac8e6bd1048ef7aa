// The background half of the pipeline: a bounded queue fed by request threads and
// one thread that symbolizes, encodes and uploads. Request threads never wait for
// it: when the queue is full the newest profile is dropped and counted.
#ifndef SPANPROF_DETAIL_WORKER_HPP_
#define SPANPROF_DETAIL_WORKER_HPP_

#include <spanprof/config.hpp>
#include <spanprof/detail/gzip.hpp>
#include <spanprof/detail/legacy_cpu_profile.hpp>
#include <spanprof/detail/legacy_heap_profile.hpp>
#include <spanprof/detail/profile_builder.hpp>
#include <spanprof/error.hpp>
#include <spanprof/pprof_encoder.hpp>
#include <spanprof/profile.hpp>
#include <spanprof/symbolizer.hpp>
#include <spanprof/uploader.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// What a request thread hands over: the span's identity and timing, plus one of
// the packed sample records copied out of its thread's log (sampling engines), the
// path of a gperftools CPU profile file or the text of a gperftools heap profile
// (classic engines).
struct PendingProfile {
  RawProfile profile;
  std::vector<std::uint64_t> packed_samples;
  std::string legacy_file;
  std::string legacy_heap_text;
};

// An allocation of `size` bytes is sampled with probability 1 - exp(-size/interval);
// dividing by that probability makes the expected totals exact (Go's
// scaleHeapSample). Returns the number of allocations one sample stands for.
inline double heap_sample_scale(double size, double interval) noexcept {
  if (interval <= 1 || size <= 0) return 1.0;
  const double probability = -std::expm1(-size / interval);
  return probability > 0 ? 1.0 / probability : 1.0;
}

// Unpacks [size, live, depth, pc...] records into heap samples with scaled values
// {alloc_objects, alloc_space, inuse_objects, inuse_space}.
inline void unpack_heap_samples(const std::vector<std::uint64_t>& words, RawProfile& profile) {
  std::size_t i = 0;
  const double interval = static_cast<double>(profile.heap_interval_bytes);
  while (i + 3 <= words.size()) {
    const double size = static_cast<double>(words[i]);
    const bool live = words[i + 1] != 0;
    const std::uint64_t depth = words[i + 2];
    if (depth == 0 || depth > words.size() - i - 3) break;
    const double scale = heap_sample_scale(size, interval);
    const auto objects = static_cast<std::int64_t>(std::llround(scale));
    const auto bytes = static_cast<std::int64_t>(std::llround(scale * size));
    RawSample sample;
    sample.values = {objects, bytes, live ? objects : 0, live ? bytes : 0};
    sample.frames.assign(words.begin() + static_cast<std::ptrdiff_t>(i + 3),
                         words.begin() + static_cast<std::ptrdiff_t>(i + 3 + depth));
    profile.samples.push_back(std::move(sample));
    i += 3 + depth;
  }
}

// Unpacks [weight, depth, pc...] records; stops at the first malformed record.
inline void unpack_samples(const std::vector<std::uint64_t>& words, RawProfile& profile) {
  std::size_t i = 0;
  while (i + 2 <= words.size()) {
    const std::uint64_t weight = words[i];
    const std::uint64_t depth = words[i + 1];
    if (depth == 0 || depth > words.size() - i - 2) break;
    RawSample sample;
    sample.values = {static_cast<std::int64_t>(weight), static_cast<std::int64_t>(weight) * profile.period_ns};
    sample.frames.assign(words.begin() + static_cast<std::ptrdiff_t>(i + 2),
                         words.begin() + static_cast<std::ptrdiff_t>(i + 2 + depth));
    profile.samples.push_back(std::move(sample));
    i += 2 + depth;
  }
}

struct WorkerCounters {
  std::atomic<std::uint64_t> enqueued{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> uploaded{0};
  std::atomic<std::uint64_t> upload_failures{0};
};

class Worker {
 public:
  struct Config {
    std::size_t capacity = 256;
    std::vector<std::shared_ptr<Uploader>> uploaders;
    std::shared_ptr<Symbolizer> symbolizer;
    std::vector<std::string> comments;  // written into every profile
  };

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { stop(std::chrono::milliseconds(2000)); }

  bool start(Config config) noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    if (running_) return true;
    config_ = std::move(config);
    stopping_ = false;
    try {
      shared_ = std::make_shared<Shared>();
      thread_ = std::thread([this, shared = shared_] { run(shared); });
    } catch (...) {
      report_error(ErrorCode::internal, "cannot start the spanprof worker thread");
      return false;
    }
    running_ = true;
    return true;
  }

  // Called from request threads; O(1) under a lock the worker holds only to pop.
  bool submit(std::unique_ptr<PendingProfile> pending) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (running_ && !stopping_ && queue_.size() < config_.capacity) {
        try {
          queue_.push_back(std::move(pending));
          counters_.enqueued.fetch_add(1, std::memory_order_relaxed);
        } catch (...) {
          pending.reset();
        }
        if (!pending) {
          wake_.notify_one();
          return true;
        }
      }
    }
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    if (pending && !pending->legacy_file.empty()) ::unlink(pending->legacy_file.c_str());
    report_error(ErrorCode::queue_full, "a finished profile was dropped: the hand-off queue is full or stopped");
    return false;
  }

  // Waits until every profile handed over so far is processed, or the deadline.
  bool flush(std::chrono::milliseconds timeout) noexcept {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_.wait_until(lock, deadline, [this] { return !running_ || (queue_.empty() && in_flight_ == 0); });
  }

  // Drains what it can before the deadline, then stops. A worker stuck in an
  // upload past the deadline is left behind (detached) rather than waited for.
  bool stop(std::chrono::milliseconds timeout) noexcept {
    const bool drained = flush(timeout);
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!running_) return drained;
      stopping_ = true;
      running_ = false;
      shared_->stop = true;
      for (auto& pending : queue_)
        if (pending && !pending->legacy_file.empty()) ::unlink(pending->legacy_file.c_str());
      counters_.dropped.fetch_add(queue_.size(), std::memory_order_relaxed);
      queue_.clear();
      thread = std::move(thread_);
    }
    wake_.notify_all();
    if (thread.joinable()) {
      if (drained) thread.join();
      else thread.detach();
    }
    return drained;
  }

  const WorkerCounters& counters() const noexcept { return counters_; }

 private:
  struct Shared {
    std::atomic<bool> stop{false};
  };

  void run(std::shared_ptr<Shared> shared) noexcept {
    std::unique_ptr<ProfileBuilder> builder;
    Config config;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      config = config_;
    }
    if (config.symbolizer) builder = std::make_unique<ProfileBuilder>(*config.symbolizer);
    for (;;) {
      std::unique_ptr<PendingProfile> pending;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return shared->stop.load() || !queue_.empty(); });
        if (shared->stop.load()) return;
        pending = std::move(queue_.front());
        queue_.pop_front();
        ++in_flight_;
      }
      process(*pending, builder.get(), config);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --in_flight_;
      }
      idle_.notify_all();
    }
  }

  void process(PendingProfile& pending, ProfileBuilder* builder, const Config& config) noexcept {
    try {
      RawProfile& raw = pending.profile;
      if (!pending.legacy_file.empty()) {
        if (!read_legacy_file(pending.legacy_file, raw)) return;
      } else if (!pending.legacy_heap_text.empty()) {
        if (!read_legacy_heap_text(pending.legacy_heap_text, raw)) return;
      } else if (raw.kind == ProfileKind::heap) {
        unpack_heap_samples(pending.packed_samples, raw);
      } else {
        unpack_samples(pending.packed_samples, raw);
      }
      pending.packed_samples = {};
      pending.legacy_heap_text = {};
      if (raw.samples.empty() || !builder) return;
      const Profile profile = builder->build(raw, config.comments);
      EncodedProfile encoded;
      std::string error;
      if (!encode_pprof_gzip(profile, encoded.pprof_gzip, error)) {
        report_error(ErrorCode::encoding_failed, error);
        return;
      }
      encoded.kind = raw.kind;
      encoded.span = raw.span;
      encoded.span_name = raw.span_name;
      encoded.start_unix_ns = raw.start_unix_ns;
      encoded.duration_ns = raw.duration_ns;
      encoded.period_ns = raw.period_ns;
      encoded.heap_interval_bytes = raw.heap_interval_bytes;
      encoded.sample_count = raw.samples.size();
      encoded.engine = raw.engine;
      encoded.reason = raw.reason;
      encoded.profile = &profile;
      bool all_ok = true;
      for (const auto& uploader : config.uploaders) {
        if (!uploader) continue;
        const UploadResult result = uploader->upload(encoded);
        if (!result.succeeded()) {
          all_ok = false;
          counters_.upload_failures.fetch_add(1, std::memory_order_relaxed);
          const std::string message = std::string(uploader->name()) + ": " + result.message;
          report_error(ErrorCode::upload_failed, message);
        }
      }
      if (all_ok) counters_.uploaded.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      report_error(ErrorCode::internal, e.what());
    } catch (...) {
      report_error(ErrorCode::internal, "unknown exception while processing a profile");
    }
  }

  static bool read_legacy_heap_text(const std::string& text, RawProfile& raw) {
    LegacyHeapProfile legacy;
    std::string error;
    if (!parse_legacy_heap_profile(text, legacy, error)) {
      report_error(ErrorCode::profiler_failed, "unreadable gperftools heap profile: " + error);
      return false;
    }
    raw.heap_interval_bytes = legacy.sample_period;
    raw.samples = std::move(legacy.samples);
    if (raw.heap_interval_bytes > 0) {
      // A sampled gperftools profile (heap_v2/<period>): scale each bucket by the
      // probability of its average allocation size, as pprof does for these files.
      for (RawSample& sample : raw.samples) {
        for (std::size_t pair = 0; pair + 1 < sample.values.size(); pair += 2) {
          const std::int64_t count = sample.values[pair];
          if (count <= 0) continue;
          const double scale = heap_sample_scale(static_cast<double>(sample.values[pair + 1]) / count,
                                                 static_cast<double>(raw.heap_interval_bytes));
          sample.values[pair] = std::llround(count * scale);
          sample.values[pair + 1] = std::llround(static_cast<double>(sample.values[pair + 1]) * scale);
        }
      }
    }
    return true;
  }

  static bool read_legacy_file(const std::string& path, RawProfile& raw) {
    constexpr std::size_t max_file_bytes = 256u << 20;
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        report_error(ErrorCode::profiler_failed, "cannot read gperftools profile " + path);
        return false;
      }
      in.seekg(0, std::ios::end);
      const auto size = static_cast<std::streamoff>(in.tellg());
      if (size < 0 || static_cast<std::size_t>(size) > max_file_bytes) {
        ::unlink(path.c_str());
        report_error(ErrorCode::profiler_failed, "gperftools profile too large or unreadable: " + path);
        return false;
      }
      in.seekg(0, std::ios::beg);
      bytes.resize(static_cast<std::size_t>(size));
      in.read(bytes.data(), size);
    }
    ::unlink(path.c_str());
    LegacyCpuProfile legacy;
    std::string error;
    if (!parse_legacy_cpu_profile(bytes, legacy, error)) {
      report_error(ErrorCode::profiler_failed, "unreadable gperftools profile: " + error);
      return false;
    }
    raw.period_ns = legacy.period_us * 1000;
    raw.samples = std::move(legacy.samples);
    return true;
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::unique_ptr<PendingProfile>> queue_;
  std::size_t in_flight_ = 0;
  bool running_ = false;
  bool stopping_ = false;
  Config config_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  WorkerCounters counters_;
};

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_WORKER_HPP_
