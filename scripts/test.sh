#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, then
#   1. fails if single_include/ is stale,
#   2. CMake build (-Werror) + tests against include/, examples and benchmarks,
#      linking the compiled library (the runtime compiled once: SPANPROF_COMPILED_LIB),
#      and the OpenTelemetry tests against opentelemetry-cpp (scripts/opentelemetry.sh),
#   3. tests under AddressSanitizer + UndefinedBehaviorSanitizer and under
#      ThreadSanitizer, the two suites side by side,
#   4. Meson build: the single header compiled into the library, the end-to-end
#      tests,
#   5. spanprof built for aarch64 and run on Debian's arm64 kernel in a VM
#      (scripts/arm64.sh), and every fuzz target for a few seconds,
#   6. the benchmarks, briefly, to prove they run (and one round of the server benchmark),
#   7. every way to consume spanprof (tests/consumers/run.sh): find_package,
#      add_subdirectory, FetchContent, Meson subproject, pkg-config, the single
#      header as the README says, profiling compiled out, strict warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=build/ci
jobs=$(nproc)
warnings="-Wall -Wextra -Wpedantic -Werror"
# Each step says when it started (minutes:seconds into the run): CI's budget is
# 15 minutes on 2 cores, and this shows where it goes.
step() { printf '\n==== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# CI is CPU-bound on two cores: the compiles are most of its work. What does not
# time anything (the builds after the first, the consumers, the fuzz targets) runs
# in the background at low priority, on what the foreground leaves: a suite is
# mostly one busy thread, and under nice the builds take ~1.5 % of a core a test
# wants, so the suites' timings hardly change. The builds the foreground waits for
# next run at nice 15, the rest at 19. The arm64 VM, whose tests measure emulated
# time, boots when only such work runs beside it. Each job is its own process
# group (set -m), so that a stage that fails stops it, compilers and all; the same
# session, or the kernel's autogroups would void the nice.
background_pids=()
background() {  # name, niceness, then the command; its output goes to $out/<name>.log
  local name=$1 niceness=$2
  shift 2
  set -m
  nice -n "$niceness" "$@" >"$root/$out/$name.log" 2>&1 &
  eval "background_$name=$!"
  background_pids+=($!)
  set +m
}
stop_background() { for pid in "${background_pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done; }
trap stop_background EXIT
# Waits for a background job, prints its log, and fails the run if it failed.
finish_background() {  # name, what it is called
  local pid status=0
  eval "pid=\$background_$1"
  wait "$pid" || status=$?
  cat "$root/$out/$1.log"
  [ "$status" = 0 ] || { echo "$2 failed (exit $status)" >&2; exit "$status"; }
}

bash scripts/install-deps.sh
export GOCACHE="${GOCACHE:-$root/$out/gocache}" GOFLAGS=-mod=mod HOME="${HOME:-$root/$out}"
mkdir -p $out

step "single header is up to date, includes follow the layers"
python3 scripts/amalgamate.py --check

step "CMake: tests against include/, examples, benchmarks"
# opentelemetry-cpp: built from ../shared/third_party/ the first time on a machine
# (~3 min on 2 cores), cached outside the clone; without ../shared, one line and
# the OpenTelemetry targets are skipped.
otel_prefix=$(bash scripts/opentelemetry.sh)
# -g1 (line tables, no variables): a seventh less to compile than -g, and no test
# reads more; the programs whose inline frames a test reads add -g themselves
# (tests/CMakeLists.txt: spanprof_inline_workload).
cmake -S . -B $out/cmake -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$warnings" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DSPANPROF_CURL=ON -DSPANPROF_LIBDW=ON -DSPANPROF_TCMALLOC=ON -DSPANPROF_GRPC=ON \
  ${otel_prefix:+-DCMAKE_PREFIX_PATH="$otel_prefix" -DSPANPROF_OPENTELEMETRY=ON} >/dev/null
cmake --build $out/cmake -j "$jobs"

# The sanitizer builds, from now on beside the CMake suites. No -Werror there: with
# sanitizers g++ 12 warns inside Catch2 v2 itself. -Og: a third less to compile
# than -O1, and the suites took as long. No tcmalloc: the sanitizer must be the
# allocator; the heap tests check the refusal, and run through spanprof's operator
# new/delete hooks. No report tool under TSan: it is one thread reading files (the
# ASan build and the fuzz targets read them hostile). fork() is left out of the
# TSan suite: its runtime does not support a child of a multi-threaded process that
# goes on running threads. -Wno-tsan: g++ warns at every atomic_thread_fence
# inlined from Boost.Asio (TSan does not model fences), pages of the log that say
# nothing about spanprof.
sanitized="-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DSPANPROF_BUILD_EXAMPLES=OFF \
  -DSPANPROF_BUILD_BENCHMARKS=OFF -DSPANPROF_TCMALLOC=OFF"
background sanitizer_builds 15 bash -c "
  cmake -S . -B $out/asan -G Ninja $sanitized \
    -DCMAKE_CXX_FLAGS='-Og -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' \
    >/dev/null && cmake --build $out/asan -j $jobs &&
  cmake -S . -B $out/tsan -G Ninja $sanitized -DSPANPROF_BUILD_TOOLS=OFF \
    -DCMAKE_CXX_FLAGS='-Og -g1 -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan' >/dev/null &&
  cmake --build $out/tsan -j $jobs"
# Then the Meson build, the arm64 programs and the fuzz targets (built, then each
# fuzzed briefly; a unit may take 10 s of wall time, not 2, at the lowest priority).
# The Meson unit suites ran in the CMake build; what Meson adds is its own build
# description, and the single header compiled into the library (header-only, it is
# built and run by the consumers, as the README says). The examples are built and
# run by the CMake stage; here they would only compile the same sources again.
background other_builds 19 bash -c "
  meson setup $out/meson -Dwerror=true -Dbenchmarks=disabled -Dexamples=disabled -Dsingle_header=true \
    -Dcompiled_lib=true >/dev/null && meson compile -C $out/meson -j $jobs &&
  SPANPROF_ARM64_STEP=build bash scripts/arm64.sh '$root/$out/arm64' &&
  echo && bash scripts/fuzz.sh --seconds 2 --parallel $jobs --timeout 10"
background consumers 19 bash tests/consumers/run.sh "$root" "$root/$out/consumers" "$root/$out/cmake"
(cd $out/cmake && ctest --output-on-failure)

step "AddressSanitizer + UndefinedBehaviorSanitizer, and ThreadSanitizer, side by side"
finish_background sanitizer_builds "the sanitizer builds"
# Each suite is mostly one busy thread: side by side, each has a core. (The
# timing-free work waits meanwhile; the statistical sampling checks run in the
# plain build only, SPANPROF_TEST_SAMPLING_STATISTICS.)
(cd $out/asan && ctest --output-on-failure >"$root/$out/asan.log" 2>&1) &
asan_suite=$!
(cd $out/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure \
  >"$root/$out/tsan.log" 2>&1) &
tsan_suite=$!
asan_status=0 tsan_status=0
wait $asan_suite || asan_status=$?
wait $tsan_suite || tsan_status=$?
echo "-- AddressSanitizer + UndefinedBehaviorSanitizer"
cat $out/asan.log
echo "-- ThreadSanitizer"
cat $out/tsan.log
[ $asan_status = 0 ] || { echo "the AddressSanitizer suite failed" >&2; exit 1; }
[ $tsan_status = 0 ] || { echo "the ThreadSanitizer suite failed" >&2; exit 1; }

step "Meson: the single header, the compiled library, end-to-end tests; arm64; fuzz targets"
finish_background other_builds "the Meson build, the arm64 programs or the fuzz targets"
meson test -C $out/meson --print-errorlogs
# Only the consumers' compiles at the lowest priority beside the VM's two threads.
bash scripts/arm64.sh "$root/$out/arm64"

step "Benchmarks run"
SPANPROF_BENCH_LOAD_SECONDS=1 SPANPROF_BENCH_MEMORY_SECONDS=1 SPANPROF_BENCH_EINTR_SECONDS=1 \
  SPANPROF_BENCH_CLOSE_SPANS=200 SPANPROF_BENCH_LOOP_SECONDS=0.2 \
  $out/cmake/bench/spanprof_bench --benchmark_min_time=0.05 >/dev/null
$out/cmake/bench/spanprof_bench_symbolize --benchmark_min_time=0.05 >/dev/null
if [ -x $out/cmake/bench/spanprof_bench_opentelemetry ]; then
  $out/cmake/bench/spanprof_bench_opentelemetry --benchmark_min_time=0.05 >/dev/null
fi
# spanprof-report on 200 generated spans (the 10,000-span figures: docs/report.md).
$out/cmake/bench/spanprof_bench_report --spans 200 >/dev/null
# The server benchmark: its build and one short round (the figures need
# bash scripts/server-bench.sh, docs/cost.md).
if [ -x $out/cmake/bench/spanprof_server_bench ]; then
  python3 bench/server_bench.py --binary $out/cmake/bench/spanprof_server_bench --rounds 1 --seconds 1 \
    --warmup 1 --modes off,default >/dev/null
  python3 bench/thread_cost.py $out/cmake/bench/spanprof_server_bench --turns 1 --warmup 1 --seconds 1 >/dev/null
else
  echo "server benchmark not built (cpp-httplib missing): skipped"
fi
if [ -x $out/cmake/bench/spanprof_grpc_bench ]; then
  python3 bench/server_bench.py --load grpc --binary $out/cmake/bench/spanprof_grpc_bench --rounds 1 --seconds 1 \
    --warmup 1 --modes off,default >/dev/null
fi

step "Consumers (started after the CMake build)"
finish_background consumers "consumers"

step "all suites passed"
