// What a guard hands to the background worker when its span closes, and how the
// worker turns it into a RawProfile. The request thread only copies bytes out of
// its log (or names a gperftools file); all parsing happens off the request path.
#ifndef SPANPROF_DETAIL_CAPTURE_CAPTURED_PROFILE_HPP_
#define SPANPROF_DETAIL_CAPTURE_CAPTURED_PROFILE_HPP_

#include <spanprof/base/error.hpp>
#include <spanprof/detail/capture/gperftools_cpu_profile.hpp>
#include <spanprof/detail/capture/gperftools_heap_profile.hpp>
#include <spanprof/detail/capture/sample_records.hpp>
#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// The span's identity and timing, plus exactly one of: packed records copied out
// of its thread's log (sampling engines, sample_records.hpp), the path of a
// gperftools CPU profile file, or the text of a gperftools heap profile (classic
// engines).
struct CapturedProfile {
  RawProfile profile;
  std::vector<std::uint64_t> packed_samples;
  std::string gperftools_cpu_file;  // deleted once read, or when the profile is dropped
  std::string gperftools_heap_text;
  const char* engine = "";          // a literal: naming the engine allocates nothing on the request thread
  CapturedProfile* next = nullptr;  // the hand-off list, or the pool's spare list
};

// A dropped hand-off must not leave its gperftools file behind.
inline void discard_captured_profile(CapturedProfile& captured) noexcept {
  if (!captured.gperftools_cpu_file.empty()) ::unlink(captured.gperftools_cpu_file.c_str());
}

inline bool read_gperftools_heap_text(const std::string& text, RawProfile& raw) {
  LegacyHeapProfile legacy;
  if (const Status parsed = parse_legacy_heap_profile(text, legacy); !parsed) {
    report_error(ErrorCode::profiler_failed, "unreadable gperftools heap profile: " + parsed.message());
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
        const double scale = heap_sample_scale(static_cast<double>(sample.values[pair + 1]) / static_cast<double>(count),
                                               static_cast<double>(raw.heap_interval_bytes));
        sample.values[pair] = rounded_count(static_cast<double>(count) * scale);
        sample.values[pair + 1] = rounded_count(static_cast<double>(sample.values[pair + 1]) * scale);
      }
    }
  }
  return true;
}

inline bool read_gperftools_cpu_file(const std::string& path, RawProfile& raw) {
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
  if (const Status parsed = parse_legacy_cpu_profile(bytes, legacy); !parsed) {
    report_error(ErrorCode::profiler_failed, "unreadable gperftools profile: " + parsed.message());
    return false;
  }
  raw.period_ns = legacy.period_us * 1000;
  raw.samples = std::move(legacy.samples);
  return true;
}

// Fills captured.profile.samples from what the guard handed over and releases the
// packed form. False when nothing could be read (reported).
inline bool unpack_captured_profile(CapturedProfile& captured) {
  RawProfile& raw = captured.profile;
  raw.engine = captured.engine;
  bool ok = true;
  if (!captured.gperftools_cpu_file.empty()) {
    ok = read_gperftools_cpu_file(captured.gperftools_cpu_file, raw);
  } else if (!captured.gperftools_heap_text.empty()) {
    ok = read_gperftools_heap_text(captured.gperftools_heap_text, raw);
  } else if (raw.kind == ProfileKind::heap) {
    read_heap_handoff_records(captured.packed_samples, raw);
  } else if (raw.kind == ProfileKind::lock) {
    read_lock_records(captured.packed_samples.data(), captured.packed_samples.size(), raw);
  } else {
    read_stack_records(captured.packed_samples.data(), captured.packed_samples.size(), raw);
  }
  captured.packed_samples.clear();  // its capacity is kept for the record's next use
  captured.gperftools_heap_text = {};
  return ok;
}

// Recycled hand-off records, so that a closing guard allocates nothing once warm.
//
// Why: a record the request thread allocates and the worker frees makes glibc's
// free() take the request thread's arena lock from the worker; a closing guard that
// meets the worker there waits on a futex, and its tail latency is the worker's.
//
// The worker gives each processed record back with its buffers' capacity; a request
// thread takes the whole spare list at once (an exchange: no ABA, no lock) into a
// cache of its own, and uses it up before taking again. Records beyond
// max_spare_records, and buffers beyond max_recycled_words, are freed instead, so
// what the pool holds stays bounded.
class CapturedProfilePool {
 public:
  static constexpr std::size_t max_spare_records = 256;
  static constexpr std::size_t max_recycled_words = 8192;  // 64 KiB of packed samples

  // A cleared record: recycled when one is spare, else new. May throw std::bad_alloc.
  std::unique_ptr<CapturedProfile> acquire() {
    ThreadCache& cache = thread_cache();
    if (cache.head == nullptr && !cache.retired) {
      cache.head = spare_.exchange(nullptr, std::memory_order_acquire);
      if (cache.head != nullptr) thread_cache_owner();  // frees what is left at thread exit
    }
    if (CapturedProfile* record = cache.head) {
      cache.head = record->next;
      record->next = nullptr;
      idle_.fetch_sub(1, std::memory_order_relaxed);
      return std::unique_ptr<CapturedProfile>(record);
    }
    return std::make_unique<CapturedProfile>();
  }

  // Takes a record back (the worker, once it is processed or dropped).
  void release(std::unique_ptr<CapturedProfile> record) noexcept {
    if (!record) return;
    if (idle_.fetch_add(1, std::memory_order_relaxed) >= max_spare_records) {
      idle_.fetch_sub(1, std::memory_order_relaxed);
      return;  // freed here
    }
    clear(*record);
    CapturedProfile* node = record.release();
    node->next = spare_.load(std::memory_order_relaxed);
    while (!spare_.compare_exchange_weak(node->next, node, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }

  std::size_t idle() const noexcept { return idle_.load(std::memory_order_relaxed); }

  // In a forked child: a parent thread may have been between the two halves of a
  // pop; the spare records are left where they are.
  void reset_after_fork() noexcept {
    spare_.store(nullptr, std::memory_order_relaxed);
    idle_.store(0, std::memory_order_relaxed);
  }

 private:
  // Trivially destructible, so a guard closing in another thread_local's destructor
  // (after the owner below is gone) still finds it, retired.
  struct ThreadCache {
    CapturedProfile* head = nullptr;
    bool retired = false;
  };
  struct ThreadCacheOwner {
    ~ThreadCacheOwner() {
      ThreadCache& cache = thread_cache();
      cache.retired = true;
      while (CapturedProfile* record = cache.head) {
        cache.head = record->next;
        delete record;
        pool().idle_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  };
  static ThreadCache& thread_cache() noexcept {
    static thread_local ThreadCache cache;
    return cache;
  }
  static void thread_cache_owner() noexcept {
    static thread_local ThreadCacheOwner owner;
    (void)owner;
  }
  static CapturedProfilePool& pool() noexcept;

  // Keeps the capacity of what a request thread fills: the packed samples and the
  // span name. The rest was filled by the worker, and is freed by it here.
  static void clear(CapturedProfile& record) noexcept {
    std::string name = std::move(record.profile.span_name);
    name.clear();
    record.profile = RawProfile{};
    record.profile.span_name = std::move(name);
    record.packed_samples.clear();
    if (record.packed_samples.capacity() > max_recycled_words) std::vector<std::uint64_t>().swap(record.packed_samples);
    std::string().swap(record.gperftools_cpu_file);
    std::string().swap(record.gperftools_heap_text);
    record.engine = "";
    record.next = nullptr;
  }

  std::atomic<CapturedProfile*> spare_{nullptr};
  std::atomic<std::size_t> idle_{0};  // records in the spare list and in threads' caches
};

// Process-wide, and deliberately leaked: records come back from the worker while
// static destructors run at exit.
SPANPROF_API inline CapturedProfilePool& captured_profile_pool() noexcept {
  static CapturedProfilePool* pool = new CapturedProfilePool();
  return *pool;
}

inline CapturedProfilePool& CapturedProfilePool::pool() noexcept { return captured_profile_pool(); }

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_CAPTURED_PROFILE_HPP_
