#!/usr/bin/env bash
# The server benchmark in one command: installs what it needs (wrk, cpp-httplib),
# builds the server (bench/server_bench.cpp) and runs bench/server_bench.py, which
# prints the server's CPU per request with profiling on against off, every round
# and the median. Arguments go to server_bench.py (--rounds, --seconds, --modes).
#   bash scripts/server-bench.sh                  # 7 rounds of 4 s, every mode
#   bash scripts/server-bench.sh --rounds 9 --modes default,posix_timer
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=build/bench-server
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPANPROF_BUILD_TESTS=OFF \
  -DSPANPROF_BUILD_EXAMPLES=OFF -DSPANPROF_BUILD_BENCHMARKS=ON >/dev/null
cmake --build $build --target spanprof_server_bench >/dev/null
exec python3 bench/server_bench.py --binary $build/bench/spanprof_server_bench "$@"
