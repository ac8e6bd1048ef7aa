#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, then
#   1. fails if single_include/ is stale,
#   2. CMake build (-Werror) + tests against include/, examples and benchmarks,
#      linking the compiled library (the runtime compiled once: SPANPROF_COMPILED_LIB),
#      and the OpenTelemetry tests against opentelemetry-cpp (scripts/opentelemetry.sh),
#   3. Meson build: the single header compiled into the library, the end-to-end
#      tests,
#   4. tests under AddressSanitizer + UndefinedBehaviorSanitizer, then under
#      ThreadSanitizer, and every fuzz target for a few seconds,
#   5. every way to consume spanprof (tests/consumers/run.sh): find_package,
#      add_subdirectory, FetchContent, Meson subproject, pkg-config, the single
#      header as the README says, profiling compiled out, strict warnings (at low
#      priority beside stages 2-4, from the end of the CMake build),
#   6. the benchmarks, briefly, to prove they run (and one round of the server benchmark),
#   7. spanprof built for aarch64 and run on Debian's arm64 kernel in a VM
#      (scripts/arm64.sh, beside the ThreadSanitizer suite).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=build/ci
jobs=$(nproc)
warnings="-Wall -Wextra -Wpedantic -Werror"
# Each step says when it started (minutes:seconds into the run): CI's budget is
# ~20 minutes on 2 cores, and this shows where it goes.
step() { printf '\n==== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

bash scripts/install-deps.sh
export GOCACHE="${GOCACHE:-$root/$out/gocache}" GOFLAGS=-mod=mod HOME="${HOME:-$root/$out}"

step "single header is up to date, includes follow the layers"
python3 scripts/amalgamate.py --check

step "CMake: tests against include/, examples, benchmarks"
# opentelemetry-cpp: built from ../shared/third_party/ the first time on a machine
# (~3 min on 2 cores), cached outside the clone; without ../shared, one line and
# the OpenTelemetry targets are skipped.
otel_prefix=$(bash scripts/opentelemetry.sh)
cmake -S . -B $out/cmake -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$warnings" \
  ${otel_prefix:+-DCMAKE_PREFIX_PATH="$otel_prefix" -DSPANPROF_OPENTELEMETRY=ON} >/dev/null
cmake --build $out/cmake -j "$jobs"
# The consumers (step 5) only compile and run small programs: they start now, at
# the lowest priority, and use what the test runs below leave of the two cores
# (a suite is mostly one busy thread). Under nice 19 they take ~1.5 % of a core
# a test wants, so the suites' timings hardly change; this saves minutes.
consumers_log=$root/$out/consumers.log
# Its own process group (set -m), so that a stage that fails stops it, compilers
# and all; the same session, or the kernel's autogroups would void the nice.
set -m
nice -n 19 bash tests/consumers/run.sh "$root" "$root/$out/consumers" "$root/$out/cmake" >"$consumers_log" 2>&1 &
consumers=$!
set +m
trap 'kill -- -"$consumers" 2>/dev/null || true' EXIT
(cd $out/cmake && ctest --output-on-failure)

step "Meson: the single header, the compiled library, end-to-end tests"
# The unit suites ran above; what Meson adds is its own build description, and the
# single header compiled into the library (header-only, it is built and run by the
# consumers below, as the README says). The examples are built and run by the
# CMake stage; here they would only compile the same sources again.
if [ ! -d $out/meson ]; then
  meson setup $out/meson -Dwerror=true -Dbenchmarks=disabled -Dexamples=disabled -Dsingle_header=true \
    -Dcompiled_lib=true >/dev/null
fi
meson compile -C $out/meson -j "$jobs"
meson test -C $out/meson --print-errorlogs

step "AddressSanitizer + UndefinedBehaviorSanitizer"
# No -Werror here: at -O1 with sanitizers g++ 12 warns inside Catch2 v2 itself.
# No tcmalloc: ASan must be the allocator; the heap tests then check the refusal.
cmake -S . -B $out/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DSPANPROF_BUILD_EXAMPLES=OFF -DSPANPROF_BUILD_BENCHMARKS=OFF -DSPANPROF_TCMALLOC=OFF >/dev/null
cmake --build $out/asan -j "$jobs"
# The ThreadSanitizer build (next stage) compiles meanwhile, at the lowest priority,
# on what the ASan suite (mostly one busy thread) leaves of the cores, as the
# consumers do: about a minute of CI. Like the ASan build: the sanitizer owns the
# allocator, the heap tests run through spanprof's operator new/delete hooks.
# fork() is left out: TSan's runtime does not support a child of a multi-threaded
# process that goes on running threads. -Wno-tsan: g++ warns at every
# atomic_thread_fence inlined from Boost.Asio (TSan does not model fences), pages
# of the log that say nothing about spanprof.
tsan_log=$root/$out/tsan-build.log
set -m
nice -n 19 bash -c "cmake -S . -B $out/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS='-O1 -g1 -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan' -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DSPANPROF_BUILD_EXAMPLES=OFF -DSPANPROF_BUILD_BENCHMARKS=OFF -DSPANPROF_TCMALLOC=OFF >/dev/null &&
  cmake --build $out/tsan -j $jobs" >"$tsan_log" 2>&1 &
tsan_build=$!
set +m
trap 'kill -- -"$consumers" -"$tsan_build" 2>/dev/null || true' EXIT
(cd $out/asan && ctest --output-on-failure)

step "ThreadSanitizer"
tsan_status=0
wait "$tsan_build" || tsan_status=$?
cat "$tsan_log"
[ "$tsan_status" = 0 ] || { echo "the ThreadSanitizer build failed (exit $tsan_status)" >&2; exit "$tsan_status"; }
# The arm64 stage (scripts/arm64.sh: a cross build, then a VM) runs meanwhile at
# the lowest priority, on what the TSan suite leaves of the cores, as the consumers do.
arm64_log=$root/$out/arm64.log
set -m
nice -n 19 bash scripts/arm64.sh "$root/$out/arm64" >"$arm64_log" 2>&1 &
arm64=$!
set +m
trap 'kill -- -"$consumers" -"$arm64" 2>/dev/null || true' EXIT
(cd $out/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure)

step "arm64: built for aarch64, run on an arm64 kernel (started with the TSan suite)"
arm64_status=0
wait "$arm64" || arm64_status=$?
trap 'kill -- -"$consumers" 2>/dev/null || true' EXIT
cat "$arm64_log"
[ "$arm64_status" = 0 ] || { echo "the arm64 stage failed (exit $arm64_status)" >&2; exit "$arm64_status"; }

step "Fuzz targets, briefly"
bash scripts/fuzz.sh --seconds 2 --parallel "$jobs"


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
else
  echo "server benchmark not built (cpp-httplib missing): skipped"
fi
if [ -x $out/cmake/bench/spanprof_grpc_bench ]; then
  python3 bench/server_bench.py --load grpc --binary $out/cmake/bench/spanprof_grpc_bench --rounds 1 --seconds 1 \
    --warmup 1 --modes off,default >/dev/null
fi

step "Consumers (started after the CMake build)"
consumers_status=0
wait "$consumers" || consumers_status=$?
trap - EXIT
cat "$consumers_log"
[ "$consumers_status" = 0 ] || { echo "consumers failed (exit $consumers_status)" >&2; exit "$consumers_status"; }

step "all suites passed"
