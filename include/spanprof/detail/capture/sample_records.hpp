// The packed records the sampling engines write on the request thread (CPU: in
// the signal handler; heap: in the allocation hooks) and the worker reads back.
// Writer and reader of each format live here together, so the two cannot drift.
//
//   stack record       [weight, depth, pc_0 ... pc_{depth-1}]
//                      what the signal handler writes into a thread's sample log.
//                      pc_0 is the interrupted instruction, the others return
//                      addresses. A CPU record's weight word holds the sampling
//                      periods it stands for (its sample count) and the thread's
//                      CPU nanoseconds since the sample before; a wall record (wall_record_tag set in
//                      the weight word) stands for the wall nanoseconds in the low
//                      60 bits, which grow while the thread stays blocked there, and
//                      holds the thread's ThreadState in bits 61-62. Bit 60 marks a
//                      wall record that continues the one before it: the same sample's
//                      time in another state (its running and its waiting part).
//   continuous record  [meta, tid, (trace id 2 words, span id 1 word, name words)?,
//                       weight, depth, pc_0 ...]
//                      what the process's continuous profile (process_sampler.hpp)
//                      writes for any thread: a CPU stack record after the thread's
//                      id and, for a sample taken in a span, the span's label. meta
//                      is continuous_record_mark, bit 0 when a label follows, the
//                      name's bytes in bits 8-15; bit 1 when a lock record follows
//                      the label instead: a lock wait of any thread, when the
//                      continuous profile records the process's lock waits.
//   lock record        [meta, delay ns, holder tid, (trace id 2 words, span id 1 word, name words)?,
//                       holder's pc_0 ..., depth, pc_0 ...]
//                      what a thread's lock hooks (lock_hooks.hpp) write for a lock wait
//                      in a lock-profiled span: the span waited for a holder, or held
//                      the lock others waited for. meta is lock_record_mark, bit 0 the
//                      side (set: it held), bit 1 when the holder's span label follows,
//                      the name's bytes in bits 8-15, the contentions in bits 16-47,
//                      the holder's frames (where it released the lock) in bits 48-51.
//                      The frames are return addresses, the first the call into the
//                      lock (or the holder's unlock).
//   heap log record    [size, live-table slot, live-table entry, depth, pc_0 ...]
//                      in a thread's heap log while its span is open.
//   heap hand-off      [size, live at span close (0/1), depth, pc_0 ...]
//                      what a closed heap span hands to the worker.
//
// Writers are async-signal-safe: they only store words into preallocated memory.
#ifndef SPANPROF_DETAIL_CAPTURE_SAMPLE_RECORDS_HPP_
#define SPANPROF_DETAIL_CAPTURE_SAMPLE_RECORDS_HPP_

#include <spanprof/config.hpp>
#include <spanprof/profile/profile.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

SPANPROF_NAMESPACE_BEGIN
namespace detail {

// ---- stack records (CPU and wall) -------------------------------------------------

inline constexpr std::size_t stack_record_header_words = 2;
inline constexpr std::uint64_t wall_record_tag = std::uint64_t{1} << 63;
inline constexpr unsigned wall_record_state_shift = 61;
inline constexpr std::uint64_t wall_record_continues = std::uint64_t{1} << 60;
inline constexpr std::uint64_t wall_record_ns_mask = wall_record_continues - 1;

constexpr std::uint64_t wall_record_weight(ThreadState state, std::uint64_t ns, bool continues = false) noexcept {
  return wall_record_tag | (static_cast<std::uint64_t>(state) & 3) << wall_record_state_shift |
         (continues ? wall_record_continues : 0) | (ns < wall_record_ns_mask ? ns : wall_record_ns_mask);
}
constexpr ThreadState wall_record_state(std::uint64_t weight) noexcept {
  return static_cast<ThreadState>((weight >> wall_record_state_shift) & 3);
}
constexpr bool wall_record_continued(std::uint64_t weight) noexcept { return (weight & wall_record_continues) != 0; }

// A CPU record's weight word: periods above bit 48 (at most 32767), CPU ns below
// (at most 78 hours between two samples); bit 63 stays clear, as wall records' tag.
inline constexpr unsigned cpu_record_periods_shift = 48;
inline constexpr std::uint64_t cpu_record_ns_mask = (std::uint64_t{1} << cpu_record_periods_shift) - 1;
inline constexpr std::uint64_t cpu_record_most_periods = 0x7FFF;

constexpr std::uint64_t cpu_record_weight(std::uint64_t periods, std::uint64_t cpu_ns) noexcept {
  return (periods < cpu_record_most_periods ? periods : cpu_record_most_periods) << cpu_record_periods_shift |
         (cpu_ns < cpu_record_ns_mask ? cpu_ns : cpu_record_ns_mask);
}
constexpr std::uint64_t cpu_record_periods(std::uint64_t weight) noexcept {
  return (weight >> cpu_record_periods_shift) & cpu_record_most_periods;
}
// Two CPU records' weights as one: a tick's weight kept for, or given to, another record.
constexpr std::uint64_t merged_cpu_weight(std::uint64_t a, std::uint64_t b) noexcept {
  return cpu_record_weight(cpu_record_periods(a) + cpu_record_periods(b),
                           (a & cpu_record_ns_mask) + (b & cpu_record_ns_mask));
}

constexpr std::size_t stack_record_words(int depth) noexcept {
  return stack_record_header_words + static_cast<std::size_t>(depth);
}

// `callers` holds depth - 1 return addresses, innermost first. `weight` is
// cpu_record_weight() for a CPU record, wall_record_tag | nanoseconds for a wall record.
inline void write_stack_record(std::uint64_t* out, std::uint64_t weight, std::uintptr_t pc, void* const* callers,
                             int depth) noexcept {
  out[0] = weight;
  out[1] = static_cast<std::uint64_t>(depth);
  out[2] = pc;
  for (int i = 1; i < depth; ++i) out[2 + i] = reinterpret_cast<std::uintptr_t>(callers[i - 1]);
}

constexpr bool is_wall_record(const std::uint64_t* record) noexcept { return (record[0] & wall_record_tag) != 0; }

// More wall time for the stack of the wall record at `record`.
inline void add_wall_time(std::uint64_t* record, std::uint64_t ns) noexcept {
  record[0] = wall_record_weight(wall_record_state(record[0]), (record[0] & wall_record_ns_mask) + ns,
                                 wall_record_continued(record[0]));
}

// Calls `visit(const std::uint64_t* record, std::size_t words)` for each
// well-formed record; stops at the first malformed one.
template <class Visit>
void for_each_stack_record(const std::uint64_t* words, std::size_t count, Visit&& visit) {
  std::size_t i = 0;
  while (i + stack_record_header_words <= count) {
    const std::uint64_t depth = words[i + 1];
    if (depth == 0 || depth > count - i - stack_record_header_words) break;
    const std::size_t size = stack_record_header_words + static_cast<std::size_t>(depth);
    visit(words + i, size);
    i += size;
  }
}

// Appends the records of one kind (CPU or wall) as they are: the log holds what
// every open span asked for, and each profile takes the records of its kind.
inline void append_stack_records(const std::uint64_t* words, std::size_t count, ProfileKind kind,
                                 std::vector<std::uint64_t>& out) {
  const bool wall = kind == ProfileKind::wall;
  for_each_stack_record(words, count, [&](const std::uint64_t* record, std::size_t size) {
    if (is_wall_record(record) == wall) out.insert(out.end(), record, record + size);
  });
}

// Appends the records of profile.kind (CPU or wall) as samples: CPU values
// {samples, cpu ns}, wall values {samples, wall ns}.
inline void read_stack_records(const std::uint64_t* words, std::size_t count, RawProfile& profile) {
  const bool wall = profile.kind == ProfileKind::wall;
  for_each_stack_record(words, count, [&](const std::uint64_t* record, std::size_t) {
    if (is_wall_record(record) != wall) return;
    if (!wall && cpu_record_periods(record[0]) == 0) return;  // its weight went to a later sample
    RawSample sample;
    if (wall) {
      // A continuation is the same sample's other part: its time, not another sample.
      sample.values = {wall_record_continued(record[0]) ? 0 : 1,
                       static_cast<std::int64_t>(record[0] & wall_record_ns_mask)};
      sample.thread_state = wall_record_state(record[0]);
    } else
      sample.values = {static_cast<std::int64_t>(cpu_record_periods(record[0])),
                       static_cast<std::int64_t>(record[0] & cpu_record_ns_mask)};
    const std::uint64_t* pcs = record + stack_record_header_words;
    sample.frames.assign(pcs, pcs + record[1]);
    profile.samples.push_back(std::move(sample));
  });
}

// ---- a span, as records carry it ---------------------------------------------------

// A span's ids and name as a record carries them (continuous and lock records).
struct RecordedSpan {
  const std::uint8_t* trace_id;  // 16 bytes
  const std::uint8_t* span_id;   // 8 bytes
  const char* name;
  std::size_t name_bytes;        // at most 255
};

constexpr std::size_t recorded_span_words(std::size_t name_bytes) noexcept { return 3 + (name_bytes + 7) / 8; }

// Writes recorded_span_words(span.name_bytes) words; returns the word after them.
inline std::uint64_t* write_recorded_span(std::uint64_t* out, const RecordedSpan& span) noexcept {
  std::memcpy(out, span.trace_id, 16);
  std::memcpy(out + 2, span.span_id, 8);
  if (span.name_bytes != 0) {
    out[3 + (span.name_bytes - 1) / 8] = 0;  // the name's last word, padded
    std::memcpy(out + 3, span.name, span.name_bytes);
  }
  return out + recorded_span_words(span.name_bytes);
}

inline RecordedSpan read_recorded_span(const std::uint64_t* at, std::size_t name_bytes) noexcept {
  return {reinterpret_cast<const std::uint8_t*>(at), reinterpret_cast<const std::uint8_t*>(at + 2),
          reinterpret_cast<const char*>(at + 3), name_bytes};
}

// ---- lock records -----------------------------------------------------------------

inline constexpr std::uint64_t lock_record_mark = std::uint64_t{0xA0} << 56;
inline constexpr std::uint64_t lock_record_mark_mask = std::uint64_t{0xFF} << 56;
inline constexpr std::uint64_t lock_record_held = 1;         // the span held the lock; else it waited
inline constexpr std::uint64_t lock_record_holder_span = 2;  // the holder's span follows the header
inline constexpr std::size_t lock_record_header_words = 3;   // meta, delay, holder tid
inline constexpr std::uint64_t lock_record_most_contentions = 0xFFFF'FFFF;
inline constexpr std::size_t lock_record_most_holder_frames = 15;

// One lock record: a wait the span had, or the waits it caused holding a lock.
struct LockWait {
  bool held = false;                   // the span held the lock (the waits were others')
  std::uint64_t contentions = 0;       // the waits it stands for
  std::uint64_t delay_ns = 0;          // their time
  std::uint64_t holder_tid = 0;        // a waiter's: the thread that held the lock (0: unknown)
  const RecordedSpan* holder_span = nullptr;  // and its span, when it was in one
  // And where that span's code released the lock, innermost first (at most
  // lock_record_most_holder_frames return addresses).
  const std::uint64_t* holder_frames = nullptr;
  std::size_t holder_depth = 0;
};

constexpr std::size_t lock_record_words(const LockWait& wait, std::size_t depth) noexcept {
  return lock_record_header_words +
         (wait.holder_span != nullptr ? recorded_span_words(wait.holder_span->name_bytes) : 0) + wait.holder_depth +
         1 + depth;
}

// `frames` holds `depth` return addresses, innermost first. Writes
// lock_record_words(wait, depth) words.
inline void write_lock_record(std::uint64_t* out, const LockWait& wait, void* const* frames, std::size_t depth) noexcept {
  const std::size_t name_bytes = wait.holder_span != nullptr ? wait.holder_span->name_bytes : 0;
  const std::uint64_t contentions =
      wait.contentions < lock_record_most_contentions ? wait.contentions : lock_record_most_contentions;
  *out++ = lock_record_mark | (wait.held ? lock_record_held : 0) |
           (wait.holder_span != nullptr ? lock_record_holder_span : 0) | static_cast<std::uint64_t>(name_bytes) << 8 |
           contentions << 16 | static_cast<std::uint64_t>(wait.holder_depth) << 48;
  *out++ = wait.delay_ns;
  *out++ = wait.holder_tid;
  if (wait.holder_span != nullptr) out = write_recorded_span(out, *wait.holder_span);
  for (std::size_t i = 0; i < wait.holder_depth; ++i) *out++ = wait.holder_frames[i];
  *out++ = depth;
  for (std::size_t i = 0; i < depth; ++i) out[i] = reinterpret_cast<std::uintptr_t>(frames[i]);
}

// Reads the lock record at words[i] and calls `visit(const LockWait& wait, const
// std::uint64_t* pcs, std::size_t depth)`: the index after it, or 0 when it is
// malformed (or no lock record).
template <class Visit>
std::size_t read_lock_record(const std::uint64_t* words, std::size_t count, std::size_t i, Visit&& visit) {
  if (i + lock_record_header_words + 1 > count) return 0;
  const std::uint64_t meta = words[i];
  if ((meta & lock_record_mark_mask) != lock_record_mark) return 0;
  LockWait wait;
  wait.held = (meta & lock_record_held) != 0;
  wait.contentions = (meta >> 16) & lock_record_most_contentions;
  wait.delay_ns = words[i + 1];
  wait.holder_tid = words[i + 2];
  std::size_t at = i + lock_record_header_words;
  RecordedSpan holder{};
  if ((meta & lock_record_holder_span) != 0) {
    const std::size_t name_bytes = (meta >> 8) & 0xFF;
    if (at + recorded_span_words(name_bytes) + 1 > count) return 0;
    holder = read_recorded_span(words + at, name_bytes);
    wait.holder_span = &holder;
    at += recorded_span_words(name_bytes);
  }
  wait.holder_depth = (meta >> 48) & lock_record_most_holder_frames;
  if (at + wait.holder_depth + 1 > count) return 0;
  wait.holder_frames = words + at;
  at += wait.holder_depth;
  const std::uint64_t depth = words[at];
  if (depth == 0 || depth > count - at - 1) return 0;
  visit(wait, words + at + 1, static_cast<std::size_t>(depth));
  return at + 1 + static_cast<std::size_t>(depth);
}

// Calls `visit(const LockWait& wait, const std::uint64_t* pcs, std::size_t depth)`
// for each well-formed record; stops at the first malformed one.
template <class Visit>
void for_each_lock_record(const std::uint64_t* words, std::size_t count, Visit&& visit) {
  for (std::size_t i = 0; (i = read_lock_record(words, count, i, visit)) != 0;) {
  }
}

// A lock record's sample, values {contentions, delay ns}: its side, and a waiter's holder.
inline void add_lock_sample(const LockWait& wait, const std::uint64_t* pcs, std::size_t depth, RawProfile& profile) {
  RawSample& sample = profile.samples.emplace_back();
  sample.values = {static_cast<std::int64_t>(wait.contentions), static_cast<std::int64_t>(wait.delay_ns)};
  sample.frames.assign(pcs, pcs + depth);
  auto text = [&](const char* key, std::string value) {
    Label& label = sample.labels.emplace_back();
    label.key = key;
    label.str = std::move(value);
  };
  auto number = [&](const char* key, std::uint64_t value) {
    Label& label = sample.labels.emplace_back();
    label.key = key;
    label.num = static_cast<std::int64_t>(value);
    label.is_num = true;
  };
  text(lock_role_label, wait.held ? "holder" : "waiter");
  if (wait.held) return;
  if (wait.holder_tid != 0) number(holder_thread_label, wait.holder_tid);
  if (wait.holder_span == nullptr) return;
  text(holder_span_id_label, SpanId(wait.holder_span->span_id).to_hex());
  text(holder_trace_id_label, TraceId(wait.holder_span->trace_id).to_hex());
  text(holder_span_name_label, std::string(wait.holder_span->name, wait.holder_span->name_bytes));
  for (std::size_t i = 0; i < wait.holder_depth; ++i) number(holder_frame_label, wait.holder_frames[i]);
}

// Appends one lock sample per record.
inline void read_lock_records(const std::uint64_t* words, std::size_t count, RawProfile& profile) {
  for_each_lock_record(words, count, [&](const LockWait& wait, const std::uint64_t* pcs, std::size_t depth) {
    add_lock_sample(wait, pcs, depth, profile);
  });
}

// ---- continuous records ---------------------------------------------------------

inline constexpr std::uint64_t continuous_record_mark = std::uint64_t{0xC0} << 56;
inline constexpr std::uint64_t continuous_record_labelled = 1;  // the span's label follows the thread id
inline constexpr std::uint64_t continuous_record_lock = 2;      // a lock record follows, not a stack record

constexpr std::size_t continuous_record_words(const RecordedSpan* label, int depth) noexcept {
  return 2 + (label != nullptr ? recorded_span_words(label->name_bytes) : 0) + stack_record_words(depth);
}

// The header both kinds of continuous record start with; returns the word after it.
inline std::uint64_t* write_continuous_header(std::uint64_t* out, std::uint64_t tid, const RecordedSpan* label,
                                              std::uint64_t kind) noexcept {
  const std::size_t name_bytes = label != nullptr ? label->name_bytes : 0;
  *out++ = continuous_record_mark | kind | (label != nullptr ? continuous_record_labelled : 0) |
           static_cast<std::uint64_t>(name_bytes) << 8;
  *out++ = tid;
  return label != nullptr ? write_recorded_span(out, *label) : out;
}

// `callers` holds depth - 1 return addresses, innermost first; `weight` is
// cpu_record_weight(). Writes continuous_record_words(label, depth) words.
inline void write_continuous_record(std::uint64_t* out, std::uint64_t tid, const RecordedSpan* label,
                                    std::uint64_t weight, std::uintptr_t pc, void* const* callers, int depth) noexcept {
  write_stack_record(write_continuous_header(out, tid, label, 0), weight, pc, callers, depth);
}

// A lock wait outside the span logs (the continuous profile's: lock_hooks-inl.hpp),
// `frames` return addresses as in a lock record.
constexpr std::size_t continuous_lock_record_words(const RecordedSpan* label, const LockWait& wait,
                                                   std::size_t depth) noexcept {
  return 2 + (label != nullptr ? recorded_span_words(label->name_bytes) : 0) + lock_record_words(wait, depth);
}
inline void write_continuous_lock_record(std::uint64_t* out, std::uint64_t tid, const RecordedSpan* label,
                                         const LockWait& wait, void* const* frames, std::size_t depth) noexcept {
  write_lock_record(write_continuous_header(out, tid, label, continuous_record_lock), wait, frames, depth);
}

// Calls `visit(const RecordedSpan* label, std::uint64_t weight, const std::uint64_t* pcs,
// std::size_t depth)` for each well-formed CPU record (label null outside any span),
// and `visit_lock(const RecordedSpan* label, const LockWait& wait, const std::uint64_t* pcs,
// std::size_t depth)` for each lock record; stops at the first malformed one, or at a
// word without the mark (the end).
template <class Visit, class VisitLock>
void for_each_continuous_record(const std::uint64_t* words, std::size_t count, Visit&& visit, VisitLock&& visit_lock) {
  std::size_t i = 0;
  while (i + 2 <= count) {
    const std::uint64_t meta = words[i];
    if ((meta & continuous_record_mark) != continuous_record_mark) break;
    const bool labelled = (meta & continuous_record_labelled) != 0;
    const std::size_t name_bytes = (meta >> 8) & 0xFF;
    std::size_t at = i + 2;
    const std::size_t label_words = labelled ? recorded_span_words(name_bytes) : 0;
    if (at + label_words > count) break;
    RecordedSpan label{};
    if (labelled) label = read_recorded_span(words + at, name_bytes);
    at += label_words;
    if ((meta & continuous_record_lock) != 0) {
      i = read_lock_record(words, count, at, [&](const LockWait& wait, const std::uint64_t* pcs, std::size_t depth) {
        visit_lock(labelled ? &label : nullptr, wait, pcs, depth);
      });
      if (i == 0) break;
      continue;
    }
    if (at + stack_record_header_words > count) break;
    const std::uint64_t depth = words[at + 1];
    if (depth == 0 || depth > count - at - stack_record_header_words) break;
    visit(labelled ? &label : nullptr, words[at], words + at + stack_record_header_words, static_cast<std::size_t>(depth));
    i = at + stack_record_header_words + static_cast<std::size_t>(depth);
  }
}

// The samples the merger takes at once: one profile per span label (and one for
// the samples outside any span), their records' kind, period and engine set.
struct ContinuousSamples {
  std::vector<RawProfile> profiles;
  std::uint64_t dropped = 0;  // records the full buffer turned away since the last take
};

// Appends the records' samples to `out`, one profile per kind and label: the span's
// ids and name as the records carry them.
inline void read_continuous_records(const std::uint64_t* words, std::size_t count, std::int64_t period_ns,
                                    ContinuousSamples& out) {
  std::map<std::string, std::size_t> by_label;
  std::string key;
  auto profile_for = [&](ProfileKind kind, const RecordedSpan* label) -> RawProfile& {
    key.assign(1, static_cast<char>(kind));
    if (label != nullptr) {
      key.append(reinterpret_cast<const char*>(label->trace_id), 16);
      key.append(reinterpret_cast<const char*>(label->span_id), 8);
      key.append(label->name, label->name_bytes);
    }
    const auto [entry, inserted] = by_label.try_emplace(key, out.profiles.size());
    if (inserted) {
      RawProfile& profile = out.profiles.emplace_back();
      profile.kind = kind;
      profile.reason = ProfileReason::continuous;
      profile.period_ns = kind == ProfileKind::lock ? 1 : period_ns;  // a lock profile's period: 1 contention
      profile.engine = "continuous";
      if (label != nullptr) {
        profile.span.trace_id = TraceId(label->trace_id);
        profile.span.span_id = SpanId(label->span_id);
        profile.span_name.assign(label->name, label->name_bytes);
      }
    }
    return out.profiles[entry->second];
  };
  for_each_continuous_record(
      words, count,
      [&](const RecordedSpan* label, std::uint64_t weight, const std::uint64_t* pcs, std::size_t depth) {
        RawSample& sample = profile_for(ProfileKind::cpu, label).samples.emplace_back();
        sample.values = {static_cast<std::int64_t>(cpu_record_periods(weight)),
                         static_cast<std::int64_t>(weight & cpu_record_ns_mask)};
        sample.frames.assign(pcs, pcs + depth);
      },
      [&](const RecordedSpan* label, const LockWait& wait, const std::uint64_t* pcs, std::size_t depth) {
        add_lock_sample(wait, pcs, depth, profile_for(ProfileKind::lock, label));
      });
}

// ---- heap -----------------------------------------------------------------------

inline constexpr std::size_t heap_log_header_words = 4;
inline constexpr std::size_t heap_handoff_header_words = 3;

// The stack is captured straight into the record (pcs start at
// heap_log_header_words); the header is written once its depth is known.
inline void write_heap_log_header(std::uint64_t* record, std::uint64_t size, std::uint64_t slot, std::uint64_t entry,
                                  int depth) noexcept {
  record[0] = size;
  record[1] = slot;
  record[2] = entry;
  record[3] = static_cast<std::uint64_t>(depth);
}

struct HeapLogRecord {
  std::uint64_t size, slot, entry;
  std::size_t depth;
  const std::uint64_t* pcs;
};

inline HeapLogRecord read_heap_log_record(const std::uint64_t* record) noexcept {
  return {record[0], record[1], record[2], static_cast<std::size_t>(record[3]), record + heap_log_header_words};
}

constexpr std::size_t heap_log_record_words(std::size_t depth) noexcept { return heap_log_header_words + depth; }

// Throws std::bad_alloc like the vector it appends to.
inline void append_heap_handoff_record(std::vector<std::uint64_t>& out, const HeapLogRecord& record, bool live) {
  out.push_back(record.size);
  out.push_back(live ? 1 : 0);
  out.push_back(record.depth);
  out.insert(out.end(), record.pcs, record.pcs + record.depth);
}

// An allocation of `size` bytes is sampled with probability 1 - exp(-size/interval);
// dividing by that probability makes the expected totals exact (Go's
// scaleHeapSample). Returns the number of allocations one sample stands for.
inline double heap_sample_scale(double size, double interval) noexcept {
  if (interval <= 1 || size <= 0) return 1.0;
  const double probability = -std::expm1(-size / interval);
  return probability > 0 ? 1.0 / probability : 1.0;
}

// A scaled count or byte total, rounded and saturated: a product past int64 (from
// a corrupt or hostile record) must not wrap to a negative value in the profile.
inline std::int64_t rounded_count(double value) noexcept {
  if (!(value > 0)) return 0;  // NaN too
  if (value >= 0x1p63) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(std::llround(value));
}

// Appends one heap sample per hand-off record with scaled values {alloc_objects,
// alloc_space, inuse_objects, inuse_space}; stops at the first malformed record.
inline void read_heap_handoff_records(const std::vector<std::uint64_t>& words, RawProfile& profile) {
  std::size_t i = 0;
  const double interval = static_cast<double>(profile.heap_interval_bytes);
  while (i + heap_handoff_header_words <= words.size()) {
    const double size = static_cast<double>(words[i]);
    const bool live = words[i + 1] != 0;
    const std::uint64_t depth = words[i + 2];
    if (depth == 0 || depth > words.size() - i - heap_handoff_header_words) break;
    const double scale = heap_sample_scale(size, interval);
    const std::int64_t objects = rounded_count(scale);
    const std::int64_t bytes = rounded_count(scale * size);
    RawSample sample;
    sample.values = {objects, bytes, live ? objects : 0, live ? bytes : 0};
    const std::uint64_t* pcs = words.data() + i + heap_handoff_header_words;
    sample.frames.assign(pcs, pcs + depth);
    profile.samples.push_back(std::move(sample));
    i += heap_handoff_header_words + depth;
  }
}

}  // namespace detail
SPANPROF_NAMESPACE_END

#endif  // SPANPROF_DETAIL_CAPTURE_SAMPLE_RECORDS_HPP_
