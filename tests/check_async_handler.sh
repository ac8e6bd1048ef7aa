#!/usr/bin/env bash
# Runs examples/async_handler (12 requests, Asio coroutines on a 4-thread pool) and
# checks what it wrote as `go tool pprof` reads it: for every request that ran on
# two threads or more (at least 4 of them), the profiles filtered by its span id
# show parse_request, query_backend and render_response, and their CPU (the samples
# CPU value) against the CPU the request's stages used: within 15 % for every request
# (a turn lost or counted twice is 33 %), within 10 % over all of them. A sample
# weighs the thread's CPU time since the one before, so a request's samples add
# up to its CPU time to within a period per turn: 0.971-1.029 over 297 requests
# (30 runs) beside a busy process. And the program exports otel_thread_ctx_v1.
set -euo pipefail
binary=$1
# A profiler outside the process finds the running fragment's ids through this
# variable in the program's .dynsym (OTEP 4947). grep reads all of nm's output:
# with -q, nm would die of SIGPIPE and fail the pipeline.
nm -D "$binary" | grep ' otel_thread_ctx_v1$' >/dev/null || { echo "FAIL: otel_thread_ctx_v1 is not in .dynsym"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
SPANPROF_OUTPUT_DIR="$dir" "$binary" > "$dir/out.txt"
cat "$dir/out.txt"
moved=0
all_sampled=0
all_used=0
while read -r _ span threads; do
  id=${span#span_id=}
  n=${threads#threads=}
  [ "$n" -ge 2 ] || continue
  moved=$((moved + 1))
  cpu_ns=$(awk -v s="span_id=$id" '$1 == "stages" && $2 == s { sub("cpu_ns=", "", $3); print $3 }' "$dir/out.txt")
  # One profile per request: every file with this span's samples is its own.
  files=$(ls "$dir"/"$id"-*-cpu.pb.gz)
  [ "$(echo "$files" | wc -l)" = 1 ] || { echo "FAIL: $id has $(echo "$files" | wc -l) CPU profiles"; exit 1; }
  # Every node (no node dropped as too small): their flat times add up to the request's.
  top=$(go tool pprof -tagfocus="span_id=^$id\$" -top -unit=ms -nodefraction=0 -nodecount=100000 "$dir"/*.pb.gz 2>/dev/null)
  for stage in parse_request query_backend render_response; do
    grep "$stage" <<<"$top" >/dev/null || { echo "FAIL: $stage is not in request $id's profile"; echo "$top"; exit 1; }
  done
  # "Showing nodes accounting for 29.50ms, 11.80% of 245.75ms total" (of all files)
  sampled_ms=$(sed -n '/accounting for/{s/.*accounting for \([0-9.]*\)ms, .*/\1/p;q}' <<<"$top")
  [ -n "$sampled_ms" ] || { echo "FAIL: no total in pprof's output for $id"; echo "$top"; exit 1; }
  ratio=$(awk -v s="$sampled_ms" -v c="$cpu_ns" 'BEGIN { printf "%.3f", s * 1e6 / c }')
  echo "request $id: sampled $sampled_ms ms of $(awk -v c="$cpu_ns" 'BEGIN { printf "%.1f", c / 1e6 }') ms its stages used ($ratio)"
  awk -v r="$ratio" 'BEGIN { exit (r < 0.85 || r > 1.15) }' || { echo "FAIL: request $id is off by more than 15 %"; exit 1; }
  all_sampled=$(awk -v a="$all_sampled" -v s="$sampled_ms" 'BEGIN { print a + s }')
  all_used=$(awk -v a="$all_used" -v c="$cpu_ns" 'BEGIN { print a + c / 1e6 }')
done < <(grep '^request span_id=' "$dir/out.txt")
[ "$moved" -ge 4 ] || { echo "FAIL: only $moved requests ran on two threads or more (4 needed)"; exit 1; }
overall=$(awk -v s="$all_sampled" -v u="$all_used" 'BEGIN { printf "%.3f", s / u }')
awk -v r="$overall" 'BEGIN { exit (r < 0.9 || r > 1.1) }' || { echo "FAIL: all requests together: $overall"; exit 1; }
echo "ok: $moved requests ran on several threads; each is one profile with its three stages;" \
  "each within 15 % of its CPU, $overall over all"
