#!/usr/bin/env bash
# The demo: installs what is missing, builds examples/hot_handler, runs it (four
# threads serving two kinds of requests, each request profiled in its own span),
# then shows one profile through `go tool pprof` (by function, then by source
# line); then examples/waiting_handler
# (requests that compute, wait for a lock and for a slow backend), which prints
# where their wall-clock time went; then examples/continuous_service (the whole
# process all the time, each sample with its request's span); last,
# spanprof-report turns every profile the
# demo wrote into one page (docs/report.md) and prints how to open it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
build=build/demo
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSPANPROF_BUILD_TESTS=OFF -DSPANPROF_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --target hot_handler waiting_handler continuous_service spanprof-report >/dev/null

export SPANPROF_OUTPUT_DIR="$PWD/$build/profiles"
rm -rf "$SPANPROF_OUTPUT_DIR"
"$build/examples/hot_handler"

first=$(ls -t "$SPANPROF_OUTPUT_DIR"/*.pb.gz | tail -n 1)
echo
echo "== go tool pprof -tags $first"
go tool pprof -tags "$first" 2>/dev/null
echo "== go tool pprof -top -symbolize=none $first"
# Its output read whole, then cut: pprof writing into a pipe that head has closed
# dies of SIGPIPE, and under pipefail the demo with it.
top=$(go tool pprof -top -symbolize=none "$first" 2>/dev/null)
head -n 12 <<<"$top"
echo "== the same by source line: go tool pprof -top -lines -symbolize=none $first"
go tool pprof -top -lines -symbolize=none "$first" 2>/dev/null | sed -n '5,10p'

echo
echo "== examples/waiting_handler: CPU and wall-clock profiles of requests that wait"
export SPANPROF_OUTPUT_DIR="$PWD/$build/wall-profiles"
rm -rf "$SPANPROF_OUTPUT_DIR"
"$build/examples/waiting_handler"
wall=$(ls -t "$SPANPROF_OUTPUT_DIR"/*-wall.pb.gz | tail -n 1)
echo "== go tool pprof -top $wall"
top=$(go tool pprof -top "$wall" 2>/dev/null)
head -n 12 <<<"$top"

echo
echo "== examples/continuous_service: the whole process, all the time, each sample with its request's span"
export SPANPROF_OUTPUT_DIR="$PWD/$build/continuous-profiles"
rm -rf "$SPANPROF_OUTPUT_DIR"
"$build/examples/continuous_service"
window=$(ls -t "$SPANPROF_OUTPUT_DIR"/window-*-cpu.pb.gz | tail -n 1)
echo "== go tool pprof -top $window (the whole process)"
# The totals line and the top functions (the header before them varies in length).
go tool pprof -top "$window" 2>/dev/null | sed -n '/^Showing nodes/,+3p'
echo "== go tool pprof -top -tagignore span_id=. $window (what ran outside any span)"
go tool pprof -top -tagignore span_id=. "$window" 2>/dev/null | sed -n '/^Showing nodes/,+3p'

echo
echo "== spanprof-report: every span above on one page, each against the typical span of its name"
report=$PWD/$build/report.html
"$build/tools/spanprof-report" "$build/profiles" "$build/wall-profiles" "$build/continuous-profiles" -o "$report"
echo "open it: xdg-open $report   (or file://$report in any browser)"
