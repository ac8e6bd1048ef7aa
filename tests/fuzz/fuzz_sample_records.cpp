// The packed records the sampling engines hand from a request thread to the worker
// (detail/capture/sample_records.hpp): stack records for CPU and wall profiles, heap
// hand-off records. Their writers run in signal handlers and allocation hooks; the
// readers must stay inside the buffer whatever it holds, so a torn or
// miscounted record costs samples, never memory safety.
//
// Input: the words of one buffer (native order).
//
// Invariants: the records visited tile a prefix of the buffer in order, each
// sample's frames are its record's pcs, a wall record counts one sample unless it
// continues the one before, and no record is read past the end (nor a continuous
// record's label or stack);
// a heap sample of a plausible size (under 1 TiB) counts >= 1 object and >= 0 bytes.
#include "fuzz_support.hpp"

#include <spanprof/detail/capture/sample_records.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

void fuzz_one(std::string_view bytes) {
  namespace sd = spanprof::detail;
  std::vector<std::uint64_t> words(bytes.size() / 8);
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), words.size() * 8);

  std::size_t at = 0, cpu_records = 0, wall_records = 0, wall_continuations = 0;
  sd::for_each_stack_record(words.data(), words.size(), [&](const std::uint64_t* record, std::size_t length) {
    SPANPROF_FUZZ_CHECK(record == words.data() + at);
    SPANPROF_FUZZ_CHECK(length == sd::stack_record_words(static_cast<int>(record[1])) && record[1] >= 1);
    SPANPROF_FUZZ_CHECK(length <= words.size() - at);
    // A CPU record of no periods gave its weight to a later one: it is no sample.
    if (sd::is_wall_record(record)) ++wall_records;
    else if (sd::cpu_record_periods(record[0]) != 0) ++cpu_records;
    if (sd::is_wall_record(record) && sd::wall_record_continued(record[0])) ++wall_continuations;
    at += length;
  });

  for (const spanprof::ProfileKind kind : {spanprof::ProfileKind::cpu, spanprof::ProfileKind::wall}) {
    spanprof::RawProfile profile;
    profile.kind = kind;
    profile.period_ns = 1;
    sd::read_stack_records(words.data(), words.size(), profile);
    SPANPROF_FUZZ_CHECK(profile.samples.size() == (kind == spanprof::ProfileKind::wall ? wall_records : cpu_records));
    std::int64_t wall_samples = 0;
    for (const spanprof::RawSample& sample : profile.samples) {
      SPANPROF_FUZZ_CHECK(sample.values.size() == 2 && sample.values[0] >= 0 && sample.values[1] >= 0 &&
                          !sample.frames.empty());
      if (kind == spanprof::ProfileKind::cpu) SPANPROF_FUZZ_CHECK(sample.values[0] >= 1);
      if (kind == spanprof::ProfileKind::wall) {
        SPANPROF_FUZZ_CHECK(sample.values[0] == 0 || sample.values[0] == 1);
        wall_samples += sample.values[0];
      }
    }
    // A continuation is the same sample's other part: it counts no sample.
    if (kind == spanprof::ProfileKind::wall)
      SPANPROF_FUZZ_CHECK(static_cast<std::size_t>(wall_samples) == wall_records - wall_continuations);
  }

  // The continuous profile's records, CPU and lock: each label and stack inside the
  // buffer, the records in order, a label's name within its bound.
  const std::uint64_t* end = words.data() + words.size();
  const std::uint64_t* last = words.data();
  const auto check_continuous = [&](const sd::RecordedSpan* label, const std::uint64_t* pcs, std::size_t depth) {
    SPANPROF_FUZZ_CHECK(depth >= 1 && pcs > last && pcs + depth <= end);
    if (label != nullptr) {
      const auto* name = reinterpret_cast<const std::uint8_t*>(label->name);
      SPANPROF_FUZZ_CHECK(label->name_bytes <= 255);
      SPANPROF_FUZZ_CHECK(name + label->name_bytes <= reinterpret_cast<const std::uint8_t*>(pcs));
      SPANPROF_FUZZ_CHECK(label->trace_id >= reinterpret_cast<const std::uint8_t*>(last));
    }
    last = pcs + depth;
  };
  sd::for_each_continuous_record(
      words.data(), words.size(),
      [&](const sd::RecordedSpan* label, std::uint64_t, const std::uint64_t* pcs, std::size_t depth) {
        check_continuous(label, pcs, depth);
      },
      [&](const sd::RecordedSpan* label, const sd::LockWait&, const std::uint64_t* pcs, std::size_t depth) {
        check_continuous(label, pcs, depth);
      });
  sd::ContinuousSamples continuous;
  sd::read_continuous_records(words.data(), words.size(), 10'000'000, continuous);
  for (const spanprof::RawProfile& profile : continuous.profiles)
    for (const spanprof::RawSample& sample : profile.samples) SPANPROF_FUZZ_CHECK(sample.values.size() == 2);

  // Lock records: each holder label and stack inside the buffer, in order; every
  // sample with its side, its values and its frames.
  last = words.data();
  std::size_t lock_records = 0;
  sd::for_each_lock_record(words.data(), words.size(),
                           [&](const sd::LockWait& wait, const std::uint64_t* pcs, std::size_t depth) {
                             SPANPROF_FUZZ_CHECK(depth >= 1 && pcs > last && pcs + depth <= end);
                             if (wait.holder_span != nullptr) {
                               const auto* name = reinterpret_cast<const std::uint8_t*>(wait.holder_span->name);
                               SPANPROF_FUZZ_CHECK(name + wait.holder_span->name_bytes <=
                                                   reinterpret_cast<const std::uint8_t*>(pcs));
                             }
                             SPANPROF_FUZZ_CHECK(wait.holder_depth <= sd::lock_record_most_holder_frames);
                             if (wait.holder_depth != 0)
                               SPANPROF_FUZZ_CHECK(wait.holder_frames > last && wait.holder_frames + wait.holder_depth < pcs);
                             last = pcs + depth;
                             ++lock_records;
                           });
  spanprof::RawProfile locks;
  locks.kind = spanprof::ProfileKind::lock;
  sd::read_lock_records(words.data(), words.size(), locks);
  SPANPROF_FUZZ_CHECK(locks.samples.size() == lock_records);
  for (const spanprof::RawSample& sample : locks.samples)
    SPANPROF_FUZZ_CHECK(sample.values.size() == 2 && !sample.frames.empty() && !sample.labels.empty() &&
                        sample.labels.front().key == sd::lock_role_label);

  spanprof::RawProfile heap;
  heap.kind = spanprof::ProfileKind::heap;
  heap.heap_interval_bytes = static_cast<std::int64_t>(bytes.size()) * 1024;
  sd::read_heap_handoff_records(words, heap);
  std::size_t i = 0;
  for (const spanprof::RawSample& sample : heap.samples) {
    const std::uint64_t depth = words[i + 2];
    SPANPROF_FUZZ_CHECK(sample.values.size() == 4 && sample.frames.size() == depth);
    SPANPROF_FUZZ_CHECK(std::memcmp(sample.frames.data(), &words[i + 3], depth * 8) == 0);
    if (words[i] < (std::uint64_t{1} << 40))
      SPANPROF_FUZZ_CHECK(sample.values[0] >= 1 && sample.values[1] >= 0 && sample.values[2] >= 0 &&
                          sample.values[3] >= 0);
    i += 3 + depth;
  }
  SPANPROF_FUZZ_CHECK(i <= words.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return spanprof_fuzz::run_unit(data, size, fuzz_one);
}
