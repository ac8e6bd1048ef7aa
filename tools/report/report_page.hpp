// The report page: one HTML file with its style, script and data inline, so it
// opens from disk in any browser, offline, and can be mailed or attached to a
// ticket as is. Nothing on it loads from the network.
//
// The script reads the JSON of report_data.hpp and draws, for the span chosen in
// the table or the time-line: its flame graphs, and its diff against the typical
// span of its name. The diff is per request in absolute units: the typical value
// of a frame is its average over the *other* spans of the same name that have a
// profile of that kind, so a frame coloured red took more CPU (wall time, bytes)
// in this span than in a typical one, and a frame that took the same is neutral
// whatever the rest did. "Top differences" lists functions by the change of their
// self value (time in the function itself), the clearest pointer to the code that
// made the span slower; its first row is also the table's "top difference".
// A frame's tooltip gives its function's file and first line, and "Hot lines" the
// source lines the span's samples were on, when the profile has lines.
//
// The page can be opened on one span: report.html#span=<span id>.
#ifndef SPANPROF_TOOLS_REPORT_REPORT_PAGE_HPP_
#define SPANPROF_TOOLS_REPORT_REPORT_PAGE_HPP_

#include <string>
#include <string_view>

namespace spanprof_report {

namespace page {

inline constexpr std::string_view head = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>spanprof report</title>
<style>
body{font:13px/1.35 system-ui,sans-serif;margin:0 16px 40px;color:#222;background:#fff}
h1{font-size:18px;margin:14px 0 4px}h2{font-size:15px;margin:18px 0 6px}
.muted{color:#666}.mono{font-family:ui-monospace,monospace;font-size:12px}
input[type=search]{padding:3px 6px;width:260px}
table{border-collapse:collapse}th,td{padding:2px 8px;text-align:left;white-space:nowrap}
#spans th{cursor:pointer;user-select:none;background:#f1f1f1;position:sticky;top:0}
#spans tbody tr{cursor:pointer}#spans tbody tr:hover{background:#f6f6ff}#spans tr.selected{background:#e4e9ff}
td.num,th.num{text-align:right}
#table-box{max-height:420px;overflow:auto;border:1px solid #ddd}
#timeline{border:1px solid #ddd;display:block;cursor:pointer}
.tabs button{margin-right:4px}.tabs button.on{font-weight:bold}
.flame{position:relative;border:1px solid #ddd;overflow:hidden;margin-bottom:6px}
.flame div{position:absolute;height:16px;box-sizing:border-box;border:1px solid #fff;font-size:11px;line-height:14px;
 padding:0 3px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;cursor:pointer;border-radius:2px}
.flame div.hit{outline:2px solid #c0f;z-index:1}
.diffrow{display:flex;gap:16px;align-items:flex-start}.diffrow>.flame{flex:1 1 55%}
.diffrow>div:last-child{flex:0 1 45%;overflow-x:auto}#top-differences td.mono{white-space:normal;word-break:break-all}
#top-differences td{font-variant-numeric:tabular-nums}
.more{color:#b00}.less{color:#06a}
.legend span{display:inline-block;padding:0 6px;margin-right:4px;border-radius:2px}
.split{display:inline-flex;width:120px;height:10px;vertical-align:middle;border:1px solid #ccc;margin-right:4px}
.split.wide{width:360px;height:14px}.split i{display:block;height:100%}
.split .run{background:#3a7}.split .wait{background:#e93}.split .block{background:#99b}
.key i{display:inline-block;width:10px;height:10px;margin:0 3px 0 8px;vertical-align:middle}
</style></head><body>
<h1>spanprof report</h1>
<div id="summary" class="muted"></div>
<div id="timeline-box"></div>
<h2>Spans</h2>
<p><input type="search" id="filter" placeholder="filter by span name"> <span id="shown" class="muted"></span></p>
<div id="table-box"><table id="spans"><thead><tr>
<th data-key="name">name</th><th data-key="id">span id</th><th data-key="trace">trace id</th>
<th data-key="start" class="num">start</th><th data-key="dur" class="num">duration</th><th data-key="split">running / waiting for a CPU / blocked</th>
<th data-key="cpu" class="num">CPU</th><th data-key="reason">keep reason</th><th data-key="samples" class="num">samples</th>
<th data-key="top">top difference (self, vs typical)</th></tr></thead><tbody></tbody></table></div>
<div id="more-box"></div>
<div id="detail"></div>
<script type="application/json" id="data">)html";

inline constexpr std::string_view tail = R"html(</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById('data').textContent);
const KINDS = ['cpu', 'heap', 'wall', 'lock'];  // spanprof::ProfileKind's order
const KIND_TITLE = {cpu: 'CPU', heap: 'heap (allocated)', wall: 'wall clock', lock: 'lock waits'};
const PAGE = 500;
const nodeParent = new Int32Array(D.nodes.length / 2), nodeFn = new Int32Array(D.nodes.length / 2);
for (let i = 0; i < nodeParent.length; i++) { nodeParent[i] = D.nodes[2 * i]; nodeFn[i] = D.nodes[2 * i + 1]; }
const spans = D.spans.map((s, i) => ({i, name: D.names[s[0]], id: s[1], trace: s[2], reason: D.reasons[s[3]],
  start: s[4], dur: s[5], raw: [s[6], s[7], s[8], s[9]], lines: s[10] || [null, null, null, null], time: s[11] || null, locks: s[12] || null,
  total: [0, 0, 0, 0], samples: 0}));
for (const s of spans) for (let k = 0; k < KINDS.length; k++) {
  const r = s.raw[k]; if (!r) continue;
  let t = 0; for (let j = 3; j < r.length; j += 2) t += r[j];
  s.total[k] = t * r[1];
  if (k === 0 || k === 2) s.samples += r[0];  // CPU and wall ticks; heap counts objects, lock waits
}
const byName = new Map();
for (const s of spans) { if (!byName.has(s.name)) byName.set(s.name, []); byName.get(s.name).push(s); }
const esc = t => String(t).replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]));
const el = (id) => document.getElementById(id);

function fmt(v, k) {
  if (v === null || v === undefined) return '\u2014';
  const a = Math.abs(v), sign = v < 0 ? '-' : '';
  if (k === 1) {  // bytes
    if (a >= 1048576) return sign + (a / 1048576).toFixed(2) + ' MiB';
    if (a >= 1024) return sign + (a / 1024).toFixed(1) + ' KiB';
    return sign + a.toFixed(0) + ' B';
  }
  if (a >= 1e9) return sign + (a / 1e9).toFixed(2) + ' s';
  if (a >= 1e6) return sign + (a / 1e6).toFixed(a >= 1e8 ? 0 : 1) + ' ms';
  if (a >= 1e3) return sign + (a / 1e3).toFixed(0) + ' \u00b5s';
  return sign + a.toFixed(0) + ' ns';
}
const known = v => (v < 0 ? '\u2014' : fmt(v));  // a start or duration a batch does not give: -1
// Where a span's time went (Options::time_split), as a bar: running, waiting for a CPU, blocked.
function splitBar(s, wide) {
  const t = s.time; if (!t) return '<span class="muted">\u2014</span>';
  const all = t[0] + t[1] + t[2] || 1, pct = v => (100 * v / all).toFixed(1);
  const title = 'running ' + fmt(t[0]) + ', waiting for a CPU ' + fmt(t[1]) + ', blocked ' + fmt(t[2]) +
    '; ' + t[3] + ' voluntary and ' + t[4] + ' involuntary context switches';
  return '<span class="split' + (wide ? ' wide' : '') + '" title="' + esc(title) + '"><i class="run" style="width:' + pct(t[0]) +
    '%"></i><i class="wait" style="width:' + pct(t[1]) + '%"></i><i class="block" style="width:' + pct(t[2]) + '%"></i></span>' +
    (wide ? '<span class="key"><i class="run" style="background:#3a7"></i>running ' + fmt(t[0]) +
      '<i style="background:#e93"></i>waiting for a CPU ' + fmt(t[1]) + '<i style="background:#99b"></i>blocked ' + fmt(t[2]) +
      ' \u00b7 ' + t[3] + ' voluntary, ' + t[4] + ' involuntary switches</span>' : '');
}
const signed = (v, k) => (v > 0 ? '+' : '') + fmt(v, k);

// ---- per span: values by node (self) and by node with callees (inclusive) ----
function selfByNode(s, k) {
  const key = 'self' + k; if (s[key]) return s[key];
  const m = new Map(), r = s.raw[k];
  if (r) for (let j = 2; j < r.length; j += 2) m.set(r[j], r[j + 1] * r[1]);
  return (s[key] = m);
}
function inclusive(self) {
  const m = new Map();
  for (const [node, v] of self) for (let n = node; n !== 0; n = nodeParent[n]) m.set(n, (m.get(n) || 0) + v);
  return m;
}
function selfByFunction(self) {
  const m = new Map();
  for (const [node, v] of self) m.set(nodeFn[node], (m.get(nodeFn[node]) || 0) + v);
  return m;
}
// The sums over every span of a name that has a profile of kind k: the typical
// span is (sum - this span) / (count - 1), this span left out. Summed in arrays
// indexed by node and by function: 10,000 spans take a fraction of a second.
const nameSums = new Map();
function sumsFor(name, k) {
  const key = k + '/' + name; if (nameSums.has(key)) return nameSums.get(key);
  const incl = new Float64Array(nodeParent.length), fn = new Float64Array(D.functions.length);
  let count = 0, total = 0;
  for (const s of byName.get(name)) {
    const r = s.raw[k]; if (!r) continue;
    count++; total += s.total[k];
    for (let j = 2; j < r.length; j += 2) {
      const v = r[j + 1] * r[1];
      fn[nodeFn[r[j]]] += v;
      for (let n = r[j]; n !== 0; n = nodeParent[n]) incl[n] += v;
    }
  }
  const sum = {count, total, incl: new Map(), fn: new Map()};
  incl.forEach((v, n) => { if (v) sum.incl.set(n, v); });
  fn.forEach((v, f) => { if (v) sum.fn.set(f, v); });
  nameSums.set(key, sum);
  return sum;
}
const typicalOf = (sumValue, thisValue, others) => ((sumValue || 0) - (thisValue || 0)) / others;

// Functions by the change of their self value against the typical span, largest
// increase first.
function topDifferences(s, k) {
  const sum = sumsFor(s.name, k), others = sum.count - 1;
  if (!s.raw[k] || others < 1) return null;
  const mine = selfByFunction(selfByNode(s, k)), rows = [];
  const fns = new Set([...mine.keys(), ...sum.fn.keys()]);
  for (const f of fns) {
    const here = mine.get(f) || 0, typical = typicalOf(sum.fn.get(f), here, others);
    if (here !== typical) rows.push({f, here, typical, diff: here - typical});
  }
  rows.sort((a, b) => b.diff - a.diff || a.f - b.f);
  return rows;
}
const preferredKind = s => [0, 2, 1].find(k => s.raw[k]);

// ---- flame graphs: icicles, outermost frame on top; click zooms, search marks ----
const ROW = 17;
function drawFlame(box, g) {
  box.innerHTML = '';
  const children = new Map();
  for (const n of g.width.keys()) {
    if (n === 0) continue;
    const p = nodeParent[n];
    if (!children.has(p)) children.set(p, []);
    children.get(p).push(n);
  }
  for (const list of children.values()) list.sort((a, b) => D.functions[nodeFn[a]] < D.functions[nodeFn[b]] ? -1 : 1);
  const path = [];
  for (let n = g.focus; n !== 0; n = nodeParent[n]) path.unshift(n);
  let depth = 0, maxDepth = 0;
  const html = [];
  const add = (n, x, w, d) => {
    maxDepth = Math.max(maxDepth, d);
    const name = D.functions[nodeFn[n]], source = D.sources[nodeFn[n]];
    html.push('<div data-node="' + n + '" title="' + esc(name + '\n' + (source ? source + '\n' : '') + g.tip(n)) + '" style="left:' + (x * 100).toFixed(3) +
      '%;width:' + (w * 100).toFixed(3) + '%;top:' + d * ROW + 'px;background:' + g.color(n) + '">' + esc(name) + '</div>');
  };
  for (const n of path) add(n, 0, 1, depth++);
  const full = g.focus === 0 ? g.total : g.width.get(g.focus);
  const walk = (n, x, d) => {
    for (const c of children.get(n) || []) {
      const w = g.width.get(c) / full;
      if (w >= 0.002) { add(c, x, w, d); walk(c, x, d + 1); }
      x += w;
    }
  };
  if (full > 0) walk(g.focus, 0, depth);
  box.style.height = (maxDepth + 1) * ROW + 2 + 'px';
  box.innerHTML = html.join('');
  box.onclick = e => {
    const n = e.target.dataset && e.target.dataset.node;
    if (n === undefined) return;
    g.focus = Number(n) === g.focus ? nodeParent[g.focus] : Number(n);
    drawFlame(box, g); markSearch();
  };
}
function markSearch() {
  const q = (el('search') ? el('search').value : '').toLowerCase();
  let hits = 0;
  for (const d of document.querySelectorAll('.flame div')) {
    const hit = q !== '' && d.textContent.toLowerCase().includes(q);
    d.classList.toggle('hit', hit); if (hit) hits++;
  }
  if (el('search-hits')) el('search-hits').textContent = q ? hits + ' frames match' : '';
}
const warm = (v, total) => { const t = total > 0 ? Math.min(1, v / total) : 0; return 'hsl(' + (50 - 45 * t) + ',85%,' + (70 - 12 * t) + '%)'; };

// A span's lock waits (docs/locks.md): the locks it waited for, where, and who held
// them, where; and the waits it caused holding one.
function lockWaits(s) {
  if (!s.locks) return '';
  const file = (path, fn) => path ? '<span class="mono" title="' + esc(path) + '">' + esc(path.replace(/^.*\//, '')) + '</span>' +
    (fn ? ' (' + esc(fn) + ')' : '') : esc(fn || 'an unknown place');
  let h = '<h2>Lock waits</h2><ul id="lock-waits">';
  for (const [held, delay, waits, fn, line, holderId, holderName, holderFn, holderLine, holderThread] of s.locks) {
    const count = waits > 1 ? ' in ' + waits + ' waits' : '';
    if (held) {
      h += '<li>made others wait ' + fmt(delay) + count + ' for the lock it released at ' + file(line, fn) + '</li>';
      continue;
    }
    // No holder: one of glibc's own locks (malloc's, a FILE's), whose holder it records nowhere.
    let holder = holderId ? 'held by span <span class="mono">' + esc(holderId) + '</span> (' + esc(holderName) + ')'
      : holderThread ? 'held by thread ' + holderThread + ', in no span that records lock waits' : 'its holder unknown';
    if (holderFn) holder += ' in ' + esc(holderFn) + (holderLine ? ' at ' + file(holderLine) : '');
    h += '<li>waited ' + fmt(delay) + count + ' on the lock taken at ' + file(line, fn) + ', ' + holder + '</li>';
  }
  return h + '</ul>';
}

// ---- one span ----
let selected = null, selectedKind = 0;
function showSpan(s, k) {
  selected = s; selectedKind = k === undefined ? preferredKind(s) : k;
  for (const tr of document.querySelectorAll('#spans tr.selected')) tr.classList.remove('selected');
  const row = document.querySelector('#spans tr[data-span="' + CSS.escape(s.id) + '"]');
  if (row) row.classList.add('selected');
  const k2 = selectedKind, sum = sumsFor(s.name, k2), others = sum.count - 1;
  const mine = inclusive(selfByNode(s, k2));
  let h = '<h2>' + esc(s.name) + ' <span class="mono">span ' + esc(s.id) + '</span></h2>' +
    '<p class="mono">trace ' + esc(s.trace) + ' \u00b7 duration ' + known(s.dur) + ' \u00b7 keep reason ' + esc(s.reason || '\u2014') + '</p>' +
    (s.time ? '<p id="time-split">' + splitBar(s, true) + '</p>' : '') + lockWaits(s) +
    '<p class="tabs">';
  for (let k = 0; k < KINDS.length; k++) if (s.raw[k])
    h += '<button data-kind="' + k + '" class="' + (k === k2 ? 'on' : '') + '">' + KIND_TITLE[KINDS[k]] + ' ' + fmt(s.total[k], k) + '</button>';
  h += ' <input type="search" id="search" placeholder="search functions"> <span id="search-hits" class="muted"></span></p>' +
    '<h2>' + KIND_TITLE[KINDS[k2]] + ' flame graph of this span</h2><div class="flame" id="flame"></div>';
  // Where the samples' innermost frames were, by source line (profiles with lines: docs/source-lines.md).
  const hot = s.lines[k2];
  if (hot && hot.length) {
    h += '<h2>Hot lines (self)</h2><table id="hot-lines"><thead><tr><th>file:line</th><th class="num">this span</th>' +
      '<th class="num">share</th></tr></thead><tbody>';
    for (let j = 0; j < hot.length; j += 2)
      h += '<tr><td class="mono">' + esc(D.lines[hot[j]]) + '</td><td class="num">' + fmt(hot[j + 1], k2) + '</td><td class="num">' +
        (s.total[k2] > 0 ? (100 * hot[j + 1] / s.total[k2]).toFixed(1) + ' %' : '\u2014') + '</td></tr>';
    h += '</tbody></table>';
  }
  h += '<h2>Diff against the typical \u201c' + esc(s.name) + '\u201d span</h2>';
  if (others < 1) {
    h += '<p id="no-diff">No other span named \u201c' + esc(s.name) + '\u201d has a ' + KINDS[k2] + ' profile to compare with.</p>';
  } else {
    h += '<p class="muted">Typical: the average of the ' + others + ' other sampled span' + (others > 1 ? 's' : '') +
      ' of this name, per request. <span class="legend"><span style="background:hsl(0,80%,65%)">more in this span</span>' +
      '<span style="background:#ddd">unchanged</span><span style="background:hsl(210,80%,65%)">less in this span</span></span></p>' +
      '<div class="diffrow"><div class="flame" id="diff"></div><div><h2>Top differences (self)</h2>' +
      '<table id="top-differences"><thead><tr><th>function</th><th class="num">this span</th><th class="num">typical</th>' +
      '<th class="num">difference</th></tr></thead><tbody></tbody></table></div></div>';
  }
  el('detail').innerHTML = h;
  for (const b of document.querySelectorAll('.tabs button')) b.onclick = () => showSpan(s, Number(b.dataset.kind));
  el('search').oninput = markSearch;
  drawFlame(el('flame'), {width: mine, total: s.total[k2], focus: 0, color: n => warm(mine.get(n), s.total[k2]),
    tip: n => fmt(mine.get(n), k2)});
  if (others >= 1) {
    const typical = new Map();
    for (const [n, v] of sum.incl) { const t = typicalOf(v, mine.get(n), others); if (t > 0) typical.set(n, t); }
    // A frame's box is as wide as the larger of its two values, and never narrower
    // than its children together: boxes nest even where this span and the typical differ.
    const width = new Map(), kids = new Map(), nodes = new Set([...mine.keys(), ...typical.keys()]);
    for (const n of [...nodes].sort((a, b) => b - a)) {  // callees first: a node's id is larger than its caller's
      const w = Math.max(mine.get(n) || 0, typical.get(n) || 0, kids.get(n) || 0);
      width.set(n, w);
      if (nodeParent[n] !== 0) kids.set(nodeParent[n], (kids.get(nodeParent[n]) || 0) + w);
    }
    let total = 0;
    for (const n of nodes) if (nodeParent[n] === 0) total += width.get(n);
    // Unchanged, and grey: a difference under 1 % of the span, under 10 % of the
    // frame, or of two samples at most (the values' common factor is the sampling
    // period), which is sampling noise.
    const scale = Math.max(s.total[k2], sum.total / sum.count, 1), noise = 2 * s.raw[k2][1];
    drawFlame(el('diff'), {width, total, focus: 0,
      color: n => {
        const d = (mine.get(n) || 0) - (typical.get(n) || 0), big = Math.max(mine.get(n) || 0, typical.get(n) || 0);
        if (Math.abs(d) < 0.01 * scale || Math.abs(d) < 0.1 * big || Math.abs(d) <= noise) return '#ddd';
        const t = Math.min(1, Math.abs(d) / scale * 3);
        return d > 0 ? 'hsl(0,80%,' + (82 - 24 * t) + '%)' : 'hsl(210,80%,' + (82 - 24 * t) + '%)';
      },
      tip: n => 'this span ' + fmt(mine.get(n) || 0, k2) + ', typical ' + fmt(typical.get(n) || 0, k2) +
        ', difference ' + signed((mine.get(n) || 0) - (typical.get(n) || 0), k2)});
    const rows = topDifferences(s, k2) || [];
    const shown = rows.length > 15 ? rows.slice(0, 10).concat(rows.slice(-5)) : rows;
    el('top-differences').tBodies[0].innerHTML = shown.map(r => '<tr><td class="mono" data-function="' + esc(D.functions[r.f]) + '">' +
      esc(D.functions[r.f]) + '</td><td class="num">' + fmt(r.here, k2) + '</td><td class="num">' + fmt(r.typical, k2) +
      '</td><td class="num ' + (r.diff > 0 ? 'more' : 'less') + '">' + signed(r.diff, k2) + '</td></tr>').join('');
  }
  markSearch();
  drawTimeline();
}

// ---- the table: sortable, filtered by name, shown a page at a time ----
let sortKey = 'start', sortUp = true, limit = PAGE, rows = spans;
// A span's largest increase over the typical span of its name, in its first kind
// (CPU, else wall, else heap): {f, diff, k}, or null. Computed once per span.
function topOf(s) {
  if (s.top !== undefined) return s.top;
  const k = preferredKind(s), t = k === undefined ? null : topDifferences(s, k);
  return (s.top = t && t.length && t[0].diff > 0 ? {f: t[0].f, diff: t[0].diff, k} : null);
}
const sortValue = {name: s => s.name, id: s => s.id, trace: s => s.trace, start: s => s.start, dur: s => s.dur,
  split: s => (s.time ? s.time[1] : -1),  // by the time spent waiting for a CPU
  cpu: s => s.total[0], reason: s => s.reason, samples: s => s.samples, top: s => (topOf(s) ? topOf(s).diff : 0)};
function topCell(s) {
  const top = topOf(s);
  if (!top) return '<td class="top-diff muted">\u2014</td>';
  const name = D.functions[top.f];
  return '<td class="top-diff mono" data-function="' + esc(name) + '">' + esc(name.length > 60 ? name.slice(0, 57) + '...' : name) +
    ' <span class="more">' + signed(top.diff, top.k) + '</span></td>';
}
function drawTable() {
  const q = el('filter').value.toLowerCase();
  rows = spans.filter(s => s.name.toLowerCase().includes(q));
  const get = sortValue[sortKey], dir = sortUp ? 1 : -1;
  rows = rows.map(s => ({s, v: get(s)}))
    .sort((a, b) => (a.v < b.v ? -1 : a.v > b.v ? 1 : a.s.i - b.s.i) * dir).map(x => x.s);
  el('spans').tBodies[0].innerHTML = rows.slice(0, limit).map(s => '<tr data-span="' + esc(s.id) + '"' +
    (s === selected ? ' class="selected"' : '') + '><td>' + esc(s.name) + '</td><td class="mono">' + esc(s.id) +
    '</td><td class="mono">' + esc(s.trace) + '</td><td class="num">' + (s.start < 0 ? '\u2014' : '+' + fmt(s.start)) +
    '</td><td class="num">' + known(s.dur) + '</td><td>' + splitBar(s, false) + '</td><td class="num">' + (s.raw[0] ? fmt(s.total[0]) : '\u2014') +
    '</td><td>' + esc(s.reason || '\u2014') + '</td><td class="num">' + (s.raw[0] || s.raw[2] ? s.samples : '\u2014') + '</td>' + topCell(s) + '</tr>').join('');
  el('shown').textContent = rows.length + ' of ' + spans.length + ' spans';
  el('more-box').innerHTML = rows.length > limit ? '<button id="more">show ' + Math.min(PAGE, rows.length - limit) + ' more</button>' : '';
  if (el('more')) el('more').onclick = () => { limit += PAGE; drawTable(); };
}
el('filter').oninput = () => { limit = PAGE; drawTable(); };
for (const th of document.querySelectorAll('#spans th')) th.onclick = () => {
  sortUp = sortKey === th.dataset.key ? !sortUp : true; sortKey = th.dataset.key; drawTable();
};
el('spans').tBodies[0].onclick = e => {
  const tr = e.target.closest('tr'); if (tr) location.hash = 'span=' + encodeURIComponent(tr.dataset.span);
};

// ---- the time-line: one lane per span name, a bar per span from its start ----
const timed = spans.filter(s => s.start >= 0);
let lanes = [], laneOf = new Map(), tEnd = 1;
if (timed.length) {
  lanes = [...new Set(timed.map(s => s.name))].sort();
  laneOf = new Map(lanes.map((name, i) => [name, i]));
  for (const s of timed) tEnd = Math.max(tEnd, s.start + Math.max(s.dur, 0));
  el('timeline-box').innerHTML = '<h2>Time-line</h2><p class="muted">' + timed.length + ' spans over ' + fmt(tEnd) +
    ' from ' + new Date(D.start_ms).toISOString() + '; red: kept as slow, orange: error. Click a bar to open its span.</p>' +
    '<canvas id="timeline"></canvas>';
}
const LANE = 14, LABEL = 160;
function drawTimeline() {
  const c = el('timeline'); if (!c) return;
  const w = Math.max(400, el('timeline-box').clientWidth - 2), h = lanes.length * LANE + 4, ratio = window.devicePixelRatio || 1;
  c.width = w * ratio; c.height = h * ratio; c.style.width = w + 'px'; c.style.height = h + 'px';
  const g = c.getContext('2d'); g.scale(ratio, ratio); g.font = '11px sans-serif';
  const x = t => LABEL + (w - LABEL - 4) * t / tEnd;
  lanes.forEach((name, i) => { g.fillStyle = '#444'; g.fillText(name.length > 24 ? name.slice(0, 23) + '\u2026' : name, 2, i * LANE + 12); });
  const colour = {slow: '#d33', error: '#e80', triggered: '#a3c'};
  // Translucent, so spans of one name that overlapped (concurrent requests) show
  // darker where they did; the selected span is drawn last, in black.
  const bar = s => g.fillRect(x(s.start), laneOf.get(s.name) * LANE + 3, Math.max(2, x(s.start + Math.max(s.dur, 0)) - x(s.start)), LANE - 4);
  g.globalAlpha = 0.55;
  for (const s of timed) { g.fillStyle = colour[s.reason] || '#58a'; bar(s); }
  g.globalAlpha = 1;
  if (selected && selected.start >= 0) { g.fillStyle = '#000'; bar(selected); }
  c.onclick = e => {
    const r = c.getBoundingClientRect(), lane = Math.floor((e.clientY - r.top - 2) / LANE), t = (e.clientX - r.left - LABEL) / (w - LABEL - 4) * tEnd;
    let best = null, bestGap = Infinity;
    for (const s of timed) {
      if (laneOf.get(s.name) !== lane) continue;
      const gap = t < s.start ? s.start - t : t > s.start + s.dur ? t - s.start - s.dur : 0;
      if (gap < bestGap) { best = s; bestGap = gap; }
    }
    if (best) location.hash = 'span=' + encodeURIComponent(best.id);
  };
}

function fromHash() {
  const m = /span=([^&]*)/.exec(location.hash);
  const s = m && spans.find(x => x.id === decodeURIComponent(m[1]));
  if (s) showSpan(s);
}
window.onhashchange = fromHash;
window.onresize = drawTimeline;
el('summary').textContent = spans.length + ' spans, ' + byName.size + ' span names. Choose a span: its flame graphs, and how it differs from the typical span of its name.';
drawTable();
drawTimeline();
fromHash();
</script></body></html>
)html";

}  // namespace page

// The page for `data_json` (report_json()'s document).
inline std::string report_page(std::string_view data_json) {
  std::string html;
  html.reserve(page::head.size() + data_json.size() + page::tail.size());
  html += page::head;
  html += data_json;
  html += page::tail;
  return html;
}

}  // namespace spanprof_report

#endif  // SPANPROF_TOOLS_REPORT_REPORT_PAGE_HPP_
