#!/usr/bin/env bash
# opentelemetry-cpp for the OpenTelemetry tests, example and benchmark. Debian 12
# has no package of it: this builds v1.28.0 (API, SDK, in-memory exporter; no
# OTLP, no tests) from ../shared/third_party/ once per machine, into a cache
# outside the clone, and prints the install prefix to hand to CMake:
#
#   prefix=$(bash scripts/opentelemetry.sh)   # empty: not available, said on stderr
#   cmake ... ${prefix:+-DCMAKE_PREFIX_PATH="$prefix" -DSPANPROF_OPENTELEMETRY=ON}
#
# The cache ($SPANPROF_CACHE_DIR, else ~/.cache/spanprof) is keyed by the source
# archive's hash; a build that did not finish is never used. A checkout without
# ../shared skips the OpenTelemetry targets, saying so in one line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=1.28.0
archive=${SPANPROF_OTEL_ARCHIVE:-$root/../shared/third_party/opentelemetry-cpp-$version.tar.gz}
if [ ! -f "$archive" ]; then
  echo "opentelemetry-cpp: no $archive: the OpenTelemetry tests, example and benchmark are skipped" >&2
  exit 0
fi
cache=${SPANPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spanprof}
mkdir -p "$cache"
key=$(sha256sum "$archive" | cut -c1-12)
prefix=$cache/opentelemetry-cpp-$version-$key
if [ -f "$prefix/.complete" ]; then
  echo "$prefix"
  exit 0
fi

# Two runs at once (two clones' CI): one builds, the other waits for it.
exec 9>"$cache/opentelemetry-cpp.lock"
flock 9
if [ -f "$prefix/.complete" ]; then
  echo "$prefix"
  exit 0
fi
started=$SECONDS
work=$(mktemp -d "$cache/opentelemetry-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar xzf "$archive" -C "$work"
rm -rf "$prefix"
{
  cmake -S "$work/opentelemetry-cpp-$version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_TESTING=OFF \
    -DOTELCPP_BUILD_TESTING=OFF -DWITH_BENCHMARK=OFF -DWITH_EXAMPLES=OFF -DWITH_FUNC_TESTS=OFF \
    -DWITH_OTLP_HTTP=OFF -DWITH_OTLP_GRPC=OFF -DWITH_OTLP_FILE=OFF -DOPENTELEMETRY_INSTALL=ON
  cmake --build "$work/build" -j "$(nproc)"
  cmake --install "$work/build"
} >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  echo "opentelemetry-cpp: the build failed (above)" >&2
  exit 1
}
touch "$prefix/.complete"
echo "opentelemetry-cpp $version built once for this machine in $((SECONDS - started)) s: $prefix" >&2
echo "$prefix"
