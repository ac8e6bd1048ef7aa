#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, then
#   1. fails if single_include/ is stale,
#   2. CMake build (-Werror) + tests against include/, examples and benchmarks,
#      linking the compiled library (the runtime compiled once: SPANPROF_COMPILED_LIB),
#      and the OpenTelemetry tests against opentelemetry-cpp (scripts/opentelemetry.sh),
#   3. Meson build: the single header compiled into the library, the end-to-end
#      tests,
#   4. tests under AddressSanitizer + UndefinedBehaviorSanitizer, then under
#      ThreadSanitizer,
#   5. every way to consume spanprof (tests/consumers/run.sh): find_package,
#      add_subdirectory, FetchContent, Meson subproject, pkg-config, the single
#      header as the README says, profiling compiled out, strict warnings (at low
#      priority beside stages 2-4, from the end of the CMake build),
#   6. the benchmarks, briefly, to prove they run (and one round of the server benchmark),
#   7. spanprof built for aarch64 (at low priority beside the ThreadSanitizer suite)
#      and run on Debian's arm64 kernel in a VM (scripts/arm64.sh), and every fuzz
#      target (built beside the ThreadSanitizer suite too) for a few seconds (at low
#      priority beside the VM).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=build/ci
jobs=$(nproc)
warnings="-Wall -Wextra -Wpedantic -Werror"
# Each step says when it started (minutes:seconds into the run) and the CPU
# seconds the machine has spent since the run began (all its processes: the
# background jobs run beside the suites): CI's budget is 15 minutes on 2 cores,
# and this shows where it goes.
busy_cpu_seconds() { awk '/^cpu /{print int(($2 + $3 + $4 + $7 + $8) / 100)}' /proc/stat; }
cpu_at_start=$(busy_cpu_seconds)
step() {
  printf '\n==== [%d:%02d, %d CPU-s] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) $(($(busy_cpu_seconds) - cpu_at_start)) "$*"
}

# Work that does not time anything (builds, the consumers, the fuzzers) runs
# beside the suites at the lowest priority, on what a suite (mostly
# one busy thread) leaves of the two cores: under nice 19 it takes ~1.5 % of a core
# a test wants, so the suites' timings hardly change, and CI is minutes shorter.
# Each job is its own process group (set -m), so that a stage that fails stops it,
# compilers and all; the same session, or the kernel's autogroups would void the nice.
background_pids=()
background() {  # name, then the command; its output goes to $out/<name>.log
  local name=$1
  shift
  set -m
  nice -n 19 "$@" >"$root/$out/$name.log" 2>&1 &
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
# The consumers (step 5) compile and run small programs: from now on, beside the suites.
background consumers bash tests/consumers/run.sh "$root" "$root/$out/consumers" "$root/$out/cmake"
step "CMake: the suite (the consumers beside it)"
(cd $out/cmake && ctest --output-on-failure)

step "Meson: the single header, the compiled library, end-to-end tests"
# The suites ran above; what Meson adds is its own build description, and the
# single header compiled into the library (header-only, it is built and run by the
# consumers below, as the README says), run end to end (tests/meson.build). The
# examples and spanprof-report are built and run by the CMake stage; here they
# would only compile the same sources again.
# No debug information (-Ddebug=false, the project's -O2 kept): these suites read
# function names, which the symbol table has, and no source line.
if [ ! -d $out/meson ]; then
  meson setup $out/meson -Dwerror=true -Ddebug=false -Dbenchmarks=disabled -Dexamples=disabled -Dtools=disabled \
    -Dsingle_header=true -Dcompiled_lib=true >/dev/null
fi
meson compile -C $out/meson -j "$jobs"
meson test -C $out/meson --print-errorlogs

step "AddressSanitizer + UndefinedBehaviorSanitizer"
# No -Werror here: with sanitizers g++ 12 warns inside Catch2 v2 itself. -Og, as in
# the TSan build: a third less to compile than -O1 (the builds are most of CI's
# time), and the suites took as long (ASan 92 s, TSan 111 s, both ways).
# No tcmalloc: ASan must be the allocator; the heap tests then check the refusal.
cmake -S . -B $out/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-Og -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DSPANPROF_BUILD_EXAMPLES=OFF -DSPANPROF_BUILD_BENCHMARKS=OFF -DSPANPROF_TCMALLOC=OFF >/dev/null
cmake --build $out/asan -j "$jobs"
# The ThreadSanitizer build (next stage) compiles meanwhile, beside the ASan suite.
# Like the ASan build: the sanitizer owns the allocator, the heap tests run through
# spanprof's operator new/delete hooks. fork() is left out: TSan's runtime does not
# support a child of a multi-threaded process that goes on running threads.
# -Wno-tsan: g++ warns at every atomic_thread_fence inlined from Boost.Asio (TSan
# does not model fences), pages of the log that say nothing about spanprof.
# No report tool under TSan: it is one thread reading files (the ASan build and the
# fuzz targets read them hostile).
background tsan_build bash -c "cmake -S . -B $out/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS='-Og -g1 -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan' -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DSPANPROF_BUILD_EXAMPLES=OFF -DSPANPROF_BUILD_BENCHMARKS=OFF -DSPANPROF_BUILD_TOOLS=OFF \
  -DSPANPROF_TCMALLOC=OFF >/dev/null && cmake --build $out/tsan -j $jobs"
step "AddressSanitizer: the suite (the ThreadSanitizer build beside it)"
(cd $out/asan && ctest --output-on-failure)

step "ThreadSanitizer"
finish_background tsan_build "the ThreadSanitizer build"
# Beside the TSan suite (which keeps about one core busy): the arm64 programs'
# cross build (scripts/arm64.sh) and the fuzz targets' build, so that beside the
# arm64 VM only the fuzzing itself runs.
background arm64_build env SPANPROF_ARM64_STEP=build bash scripts/arm64.sh "$root/$out/arm64"
background fuzz_build bash scripts/fuzz.sh --build-only
(cd $out/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure)

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

step "arm64: run on an arm64 kernel; fuzz targets, briefly"
finish_background arm64_build "the arm64 build"
# The VM's tests measure emulated time, which jumps while the host takes the
# emulator's threads away: it boots when only low-priority work runs beside it
# (the fuzz targets, built beside the TSan suite, each fuzzed briefly; a unit may
# take 10 s of wall time, not 2, at the lowest priority).
finish_background fuzz_build "the fuzz targets' build"
background fuzz bash scripts/fuzz.sh --seconds 2 --parallel "$jobs" --timeout 10
SPANPROF_ARM64_STEP=run bash scripts/arm64.sh "$root/$out/arm64"
finish_background fuzz "the fuzz targets"

step "Consumers (started after the CMake build)"
finish_background consumers "consumers"

step "all suites passed"
