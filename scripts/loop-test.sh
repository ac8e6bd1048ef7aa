#!/usr/bin/env bash
# Runs tests of the suite again and again, each run under a hang timeout, and
# counts passes, failures and hangs. A test that guards a race (signals, fork,
# dlopen, threads) proves little by passing once. Not part of CI: loop before you
# call such a fix done, and put the counts in your note.
#
#   bash scripts/loop-test.sh [--runs N] [--timeout S] [--binary PATH] TEST...
#
# TEST is a Catch2 test name (or a [tag]); each is looped N times (default 200),
# each run killed after S seconds (default 180) and counted as hung. The output
# of every failed or hung run is kept under build/loop/. The default binary is
# the CMake build's (build/ci/cmake/tests/spanprof_tests, as scripts/test.sh
# makes it).
#
#   bash scripts/loop-test.sh --runs 200 \
#     "dlopen and dlclose on another thread while sampling at 1 kHz: no deadlock, no crash" \
#     "no deadlock: dlopen of a busy, allocating constructor on a thread sampled for CPU and heap"
set -uo pipefail
cd "$(dirname "$0")/.."

runs=200
timeout_seconds=180
binary=build/ci/cmake/tests/spanprof_tests
tests=()
while (($#)); do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --timeout) timeout_seconds="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) tests+=("$1"); shift ;;
  esac
done
if ((${#tests[@]} == 0)); then
  echo "loop-test: name at least one test (see --help)" >&2
  exit 2
fi
if [ ! -x "$binary" ]; then
  echo "loop-test: no test binary at $binary (build it: bash scripts/test.sh, or pass --binary)" >&2
  exit 2
fi

logs=build/loop
mkdir -p "$logs"
status=0
for test in "${tests[@]}"; do
  passed=0 failed=0 hung=0
  started=$(date +%s)
  for ((run = 1; run <= runs; ++run)); do
    log="$logs/run.log"
    # A comma separates alternatives in a Catch2 test spec: names are taken literally.
    timeout -k 10 "$timeout_seconds" "$binary" "${test//,/\\,}" >"$log" 2>&1
    code=$?
    if ((code == 0)); then
      passed=$((passed + 1))
    elif ((code == 124 || code == 137)); then
      hung=$((hung + 1))
      cp "$log" "$logs/hung-$(date +%s)-$run.log"
    else
      failed=$((failed + 1))
      cp "$log" "$logs/failed-$(date +%s)-$run.log"
    fi
    # A test name that matches nothing passes vacuously: say so once.
    if ((run == 1)) && grep -q "No tests ran" "$log"; then
      echo "loop-test: '$test' matches no test" >&2
      exit 2
    fi
  done
  printf '%s: %d runs, %d passed, %d failed, %d hung (%d s)\n' "$test" "$runs" "$passed" "$failed" "$hung" \
    $(($(date +%s) - started))
  ((failed + hung == 0)) || status=1
done
exit $status
