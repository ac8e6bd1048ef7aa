// The report's data as the page's script reads it: one compact JSON document.
//
// Strings are written once (function and span names in tables, referred to by
// index) and stacks are nodes of one frame tree, so a span is a list of
// (node, value) pairs: 10,000 spans of a few hundred samples stay a few MB.
//
//   {"functions": [name, ...], "sources": [file:first line | file | "", ...],  // one per function
//    "lines": ["file:line", ...],
//    "nodes": [caller, function, caller, function, ...],   // node i at 2i; node 0 is the root
//    "names": [span name, ...], "reasons": [reason, ...],
//    "start_ms": wall clock of the earliest span start (ms since the epoch), or 0,
//    "spans": [[name, span id, trace id, reason, start offset ns | -1, duration ns | -1,
//               cpu, heap, wall, lock, hot lines, time, lock waits], ...]}
//
// where cpu, heap, wall and lock (spanprof::ProfileKind's order) are each null or
// [samples, scale, node, value / scale, node, value / scale, ...]: scale is the
// largest common divisor of the span's values (a CPU profile's are multiples of its
// sampling period), which keeps the numbers short. Hot lines is [cpu, heap, wall, lock],
// each null or the span's 20 source lines of most value as leaves: [line, value, ...].
// Time is null or where the span's time went (Options::time_split): [running ns,
// waiting for a CPU ns, blocked ns, voluntary switches, involuntary switches].
// Lock waits is null or the span's lock waits, the most delay first (at most 10):
// [[held (0: the span waited, 1: others waited for a lock it held), delay ns, waits,
// site function, site file:line, holder span id, holder span name, holder function,
// holder location, holder thread (0: unknown)], ...], strings "" when unknown.
#ifndef SPANPROF_TOOLS_REPORT_REPORT_DATA_HPP_
#define SPANPROF_TOOLS_REPORT_REPORT_DATA_HPP_

#include "profile_reader.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spanprof_report {

namespace detail {

// A JSON string literal that is also safe inside an HTML <script> element: '<'
// is escaped, so no "</script>" can end the element early, and so are the line
// separators JavaScript once refused in string literals.
inline void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else if (c == 0xe2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(text[i + 2]) == 0xa8 || static_cast<unsigned char>(text[i + 2]) == 0xa9)) {
      out += static_cast<unsigned char>(text[i + 2]) == 0xa8 ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

inline void append_string_list(std::string& out, const std::vector<std::string>& list) {
  out += '[';
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (i) out += ',';
    append_json_string(out, list[i]);
  }
  out += ']';
}

// Indexes strings in order of first use.
class StringTable {
 public:
  std::size_t index(const std::string& text) {
    const auto [it, inserted] = index_.try_emplace(text, list_.size());
    if (inserted) list_.push_back(text);
    return it->second;
  }
  void append_json(std::string& out) const { append_string_list(out, list_); }

 private:
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<std::string> list_;
};

inline void append_kind(std::string& out, const SpanSamples& span, std::size_t kind) {
  const auto& values = span.values[kind];
  if (values.empty()) {
    out += "null";
    return;
  }
  // In node order, so a span's file always gives the same page.
  std::vector<std::pair<std::uint32_t, std::int64_t>> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  std::int64_t scale = 0;
  for (const auto& entry : sorted) scale = std::gcd(scale, entry.second < 0 ? -entry.second : entry.second);
  if (scale <= 0) scale = 1;
  out += '[' + std::to_string(span.samples[kind]) + ',' + std::to_string(scale);
  for (const auto& [node, value] : sorted) out += ',' + std::to_string(node) + ',' + std::to_string(value / scale);
  out += ']';
}

inline void append_hot_lines(std::string& out, const SpanSamples& span) {
  constexpr std::size_t most_lines = 20;
  out += '[';
  for (std::size_t kind = 0; kind < spanprof::profile_kind_count; ++kind) {
    if (kind) out += ',';
    const auto& values = span.line_values[kind];
    if (values.empty()) {
      out += "null";
      continue;
    }
    std::vector<std::pair<std::uint32_t, std::int64_t>> sorted(values.begin(), values.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    if (sorted.size() > most_lines) sorted.resize(most_lines);
    out += '[';
    for (std::size_t i = 0; i < sorted.size(); ++i)
      out += (i ? "," : "") + std::to_string(sorted[i].first) + ',' + std::to_string(sorted[i].second);
    out += ']';
  }
  out += ']';
}

inline void append_lock_waits(std::string& out, const SpanSamples& span) {
  constexpr std::size_t most_entries = 10;
  if (span.lock_waits.empty()) {
    out += "null";
    return;
  }
  std::vector<const SpanSamples::LockWaits*> sorted;
  for (const auto& waits : span.lock_waits) sorted.push_back(&waits);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->delay_ns > b->delay_ns; });
  if (sorted.size() > most_entries) sorted.resize(most_entries);
  out += '[';
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const SpanSamples::LockWaits& w = *sorted[i];
    out += (i ? ",[" : "[") + std::string(w.held ? "1" : "0") + ',' + std::to_string(w.delay_ns) + ',' +
           std::to_string(w.waits);
    for (const std::string* text : {&w.site_function, &w.site_line, &w.holder_span_id, &w.holder_span_name,
                                    &w.holder_function, &w.holder_location}) {
      out += ',';
      append_json_string(out, *text);
    }
    out += ',' + std::to_string(w.holder_thread) + ']';
  }
  out += ']';
}

}  // namespace detail

// The JSON document described above.
inline std::string report_json(const Collection& collection) {
  std::string out;
  out.reserve(64 + 24 * collection.nodes.size() + 256 * collection.spans.size());
  out += "{\"functions\":";
  detail::append_string_list(out, collection.functions);
  out += ",\"sources\":";
  detail::append_string_list(out, collection.function_sources);
  out += ",\"lines\":";
  detail::append_string_list(out, collection.lines);
  out += ",\"nodes\":[";
  for (std::size_t i = 0; i < collection.nodes.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(collection.nodes[i].first) + ',' + std::to_string(collection.nodes[i].second);
  }
  out += ']';

  std::int64_t first_start = std::numeric_limits<std::int64_t>::max();
  for (const SpanSamples& span : collection.spans)
    if (span.start_unix_ns > 0) first_start = std::min(first_start, span.start_unix_ns);
  const bool timed = first_start != std::numeric_limits<std::int64_t>::max();

  detail::StringTable names, reasons;
  std::string spans = "[";
  for (std::size_t i = 0; i < collection.spans.size(); ++i) {
    const SpanSamples& span = collection.spans[i];
    if (i) spans += ',';
    spans += '[' + std::to_string(names.index(span.name)) + ',';
    detail::append_json_string(spans, span.span_id);
    spans += ',';
    detail::append_json_string(spans, span.trace_id);
    spans += ',' + std::to_string(reasons.index(span.reason)) + ',';
    spans += span.start_unix_ns > 0 ? std::to_string(span.start_unix_ns - first_start) : std::string("-1");
    spans += ',' + (span.duration_ns > 0 ? std::to_string(span.duration_ns) : std::string("-1"));
    for (std::size_t kind = 0; kind < spanprof::profile_kind_count; ++kind) {
      spans += ',';
      detail::append_kind(spans, span, kind);
    }
    spans += ',';
    detail::append_hot_lines(spans, span);
    if (span.time.measured()) {
      const spanprof::TimeSplit& t = span.time;
      spans += ",[" + std::to_string(t.running_ns) + ',' + std::to_string(t.waiting_ns) + ',' +
               std::to_string(t.blocked_ns) + ',' + std::to_string(t.voluntary_switches) + ',' +
               std::to_string(t.involuntary_switches) + ']';
    } else {
      spans += ",null";
    }
    spans += ',';
    detail::append_lock_waits(spans, span);
    spans += ']';
  }
  spans += ']';

  out += ",\"names\":";
  names.append_json(out);
  out += ",\"reasons\":";
  reasons.append_json(out);
  out += ",\"start_ms\":" + std::to_string(timed ? first_start / 1'000'000 : 0);
  out += ",\"spans\":" + spans + '}';
  return out;
}

}  // namespace spanprof_report

#endif  // SPANPROF_TOOLS_REPORT_REPORT_DATA_HPP_
