#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz and runs each one (one at a time,
# or --parallel N at once): first its regression inputs, once each, then fuzzing from a fresh copy
# of its seeds (tests/fuzz/corpus/ and tests/fuzz/regressions/ are only read;
# corpora, logs and crash artifacts go to <build dir>/work/<target>/).
#
#   scripts/fuzz.sh --seconds 10                  # CI: every target for 10 s
#   scripts/fuzz.sh --seconds 600 elf gzip        # a long run of two targets
#   scripts/fuzz.sh --runs 10000000 --seconds 900 # whichever comes first
#   scripts/fuzz.sh --resume --seconds 3600 gzip  # go on from the last run's corpus
#   scripts/fuzz.sh --build-only                  # CI: build early, beside other work
#
# Options: --seconds N (default 10) and --runs N (default: no limit) per target;
# --timeout N, the wall-clock seconds one unit may take (default 2; raise it on a
# machine shared with other work); --jobs N for the build (default 2);
# --parallel N runs N targets at a time (default 1; CI: one per core);
# --build-dir DIR (default build/fuzz, or build/fuzz-strict with --strict);
# --resume goes on from the corpus a previous run of the target left in the build
# dir (its log is kept as log.<n>, its crash inputs stay and count), so a long
# campaign can span several sittings; --strict also checks the known issue listed
# in tests/fuzz/README.md, which fails today on its regression input;
# --build-only builds the targets and runs nothing.
#
# Installs nothing. Needs clang++ with its libFuzzer runtime (Debian: clang and
# libclang-rt-14-dev), cmake, ninja, zlib and libcurl development files.
#
# A target fails when it crashes, breaks one of its invariants, trips a sanitizer
# or leaks, allocates more than 64 MiB at once or 512 MiB in all, runs a unit for
# over 2 s of wall time, or spends more than 100 ms of CPU on one unit (the
# targets time every unit themselves: tests/fuzz/fuzz_support.hpp says why).
# Prints per target: executions, exec/s, crashes, the slowest unit, peak RSS.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=10
runs=""
timeout=2
jobs=2
parallel=1
build=""
strict=0
resume=0
build_only=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    --resume) resume=1; shift ;;
    --build-only) build_only=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ -z "$build" ]; then
  build=build/fuzz
  if ((strict)); then build=build/fuzz-strict; fi
fi
case "$build" in /*) ;; *) build=$root/$build ;; esac

# ---- toolchain ------------------------------------------------------------------
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
mkdir -p "$build"
probe=$build/probe
if ! printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer,address,undefined -o "$probe" - >/dev/null 2>&1; then
  echo "fuzz: clang++ cannot link -fsanitize=fuzzer: the libFuzzer runtime is missing (Debian: libclang-rt-14-dev)" >&2
  exit 1
fi
rm -f "$probe"

# ---- build ------------------------------------------------------------------------
known_issues=ON
if ((strict)); then known_issues=OFF; fi
if ! cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DSPANPROF_FUZZ_SKIP_KNOWN_ISSUES=$known_issues >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "fuzz: configuring tests/fuzz failed" >&2
  exit 1
fi
if ! cmake --build "$build" -j "$jobs"; then
  echo "fuzz: building the fuzz targets failed" >&2
  exit 1
fi
if ((build_only)); then exit 0; fi

all_targets=(traceparent cpu_profile heap_profile spool_file spool_name http_response elf dwarf symbol_name environment
  gzip sample_records report_reader)
if ((${#targets[@]} == 0)); then targets=("${all_targets[@]}"); fi

# The longest input each target is given. Binary formats and environment values
# get 64 KiB: large enough that anything quadratic blows the 100 ms budget.
# Symbol names get just over the demangler's 16 KiB cut-off; a traceparent is 55
# characters, a little more for later versions.
max_len_of() {
  case "$1" in
    traceparent) echo 512 ;;
    symbol_name) echo 20000 ;;
    http_response | spool_name) echo 8192 ;;
    *) echo 65536 ;;
  esac
}

# ---- run --------------------------------------------------------------------------
# -malloc_limit_mb=64: no parser may need that much for one 64 KiB input (the
# biggest legitimate block is gzip's 1 MiB output limit).
# -rss_limit_mb=512 holds only with ASan's quarantine cut from 256 to 64 MiB:
# with the default, ASan's own caches alone pass 512 MiB in long runs
# (tests/fuzz/README.md, "Time and memory"). So the quarantine is always set;
# options in the caller's ASAN_OPTIONS come after ours and win.
# -timeout (2 s by default): wall-clock, 20 times the CPU budget, so a lightly
# loaded machine does not fail a run; it catches a unit blocked in a system call,
# which uses no CPU. A machine busy with other work starves a fuzzer for seconds
# at a time (a 10 ms unit timed out beside a 64-thread test): raise --timeout there.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1:quarantine_size_mb=64${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# One target: its run, then a line for the table in work/<target>/summary and
# its outcome (ok, failed, interrupted) in work/<target>/status.
run_target() {
  local target=$1 binary=$build/fuzz_$1 work=$build/work/$1
  if [ ! -x "$binary" ]; then
    echo "fuzz: no target $target (built: ${all_targets[*]})" >&2
    mkdir -p "$work" && echo failed >"$work/status" && : >"$work/summary"
    return
  fi
  if ((resume)) && [ -d "$work/corpus" ]; then
    local n=1
    while [ -e "$work/log.$n" ]; do n=$((n + 1)); done
    if [ -f "$work/log" ]; then mv "$work/log" "$work/log.$n"; fi
  else
    rm -rf "$work"
  fi
  mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$target"/* "$work/corpus/"
  local resumed=""
  if ((resume)); then resumed=", from $(ls "$work/corpus" | wc -l) inputs"; fi
  echo "==== fuzz_$target: ${seconds}s${runs:+ or $runs runs}$resumed"
  # Inputs that once broke a parser are replayed on their own first: in the
  # corpus, their size would slow every mutation made from them.
  if [ -d tests/fuzz/regressions/"$target" ]; then
    if ! (cd "$work" && "$binary" -runs=0 -rss_limit_mb=512 -malloc_limit_mb=64 -timeout="$timeout" \
      -artifact_prefix=artifacts/ "$root/tests/fuzz/regressions/$target" >regressions.log 2>&1); then
      grep -E "spanprof-fuzz|ERROR|SUMMARY|runtime error" "$work/regressions.log" | head -20 >&2
      echo "fuzz_$target FAILED on a regression input; log: $work/regressions.log" >&2
      echo failed >"$work/status"
      printf '%-15s %12s %9s %8s %12s %9s\n' "$target" - - 1 - - >"$work/summary"
      return
    fi
  fi
  (cd "$work" && "$binary" corpus -max_total_time="$seconds" ${runs:+-runs="$runs"} -max_len="$(max_len_of "$target")" \
    -rss_limit_mb=512 -malloc_limit_mb=64 -timeout="$timeout" -print_final_stats=1 -artifact_prefix=artifacts/ >log 2>&1)
  local rc=$?
  local log=$work/log
  local executions per_second peak_rss slowest crashes status=ok
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  per_second=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  peak_rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  slowest=$(sed -n 's/^spanprof-fuzz: units [0-9]* slowest_unit_ms \([0-9.]*\).*/\1/p' "$log" | tail -1)
  crashes=$(find "$work/artifacts" -type f | wc -l)
  # A fuzzer stopped with SIGINT (libFuzzer exits 72) found nothing: say so rather
  # than count a crash, and how to go on. It exits through _Exit, so the target's
  # slowest unit is not printed; every unit it ran was within the CPU budget, or
  # there would be an artifact.
  if ((rc == 72 && crashes == 0)) && grep -q 'libFuzzer: run interrupted' "$log"; then
    status=interrupted
    echo "fuzz_$target interrupted after ${executions:-?} executions, no crash; go on with --resume" >&2
  elif ((rc != 0 || crashes != 0)) || [ -z "$slowest" ]; then
    status=failed
    crashes=$((crashes == 0 ? 1 : crashes))
    grep -E "spanprof-fuzz|ERROR|SUMMARY|runtime error|==[0-9]+==" "$log" | head -20 >&2
    echo "fuzz_$target FAILED (exit $rc); log: $log; inputs: $work/artifacts/" >&2
  fi
  echo "$status" >"$work/status"
  printf '%-15s %12s %9s %8s %12s %9s\n' "$target" "${executions:-?}" "${per_second:-?}" "$crashes" \
    "${slowest:-?}" "${peak_rss:-?}" >"$work/summary"
}

# --parallel targets at a time (each fuzzer is one process on one core).
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n; done
  run_target "$target" &
done
wait

failed=()
interrupted=()
summary=()
for target in "${targets[@]}"; do
  status=$(cat "$build/work/$target/status" 2>/dev/null || echo failed)
  if [ "$status" = failed ]; then failed+=("$target"); fi
  if [ "$status" = interrupted ]; then interrupted+=("$target"); fi
  summary+=("$(cat "$build/work/$target/summary" 2>/dev/null)")
done

echo
printf '%-15s %12s %9s %8s %12s %9s\n' target executions exec/s crashes slowest_ms rss_mb
printf '%s\n' "${summary[@]}"
if ((${#failed[@]} != 0)); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
fi
if ((${#interrupted[@]} != 0)); then
  echo "fuzz: interrupted, not finished: ${interrupted[*]}" >&2
fi
if ((${#failed[@]} + ${#interrupted[@]} != 0)); then exit 1; fi
echo "fuzz: all ${#targets[@]} targets passed (unit CPU budget 100 ms)"
