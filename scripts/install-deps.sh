#!/usr/bin/env bash
# Installs what spanprof's build, tests, demo and benchmarks need (Debian 12).
# Does nothing when everything is already there; needs root (or sudo) otherwise.
set -euo pipefail

packages=(
  g++ clang cmake ninja-build meson pkg-config python3 binutils git
  libgoogle-perftools-dev  # libprofiler (unwinder, classic engine), libtcmalloc (heap profiles)
  zlib1g-dev               # gzip for pprof files
  libcurl4-openssl-dev     # the Pyroscope and OTLP uploaders
  libdw-dev                # source lines and inlined functions in profiles (elfutils)
  libc6-dbg                # libc's separate debug file: its frames' lines, read from its line tables (tests/test_source_lines.cpp)
  catch2                   # the test framework (2.13 on Debian 12; v3 also works)
  golang-go                # `go tool pprof`, which the tests use to read profiles
  libbenchmark-dev         # bench/
  protobuf-compiler        # `protoc --decode_raw`, which the tests use to read OTLP requests
  libclang-rt-14-dev       # libFuzzer and the sanitizer runtimes for clang (tests/fuzz/)
  libcpp-httplib-dev wrk   # the server benchmark (bench/server_bench.*): a real HTTP server under load
  libc++-14-dev libc++abi-14-dev  # the consumer check with clang and libc++ (tests/consumers/)
  libboost-dev             # Boost.Asio: the async tests and examples/async_handler (C++20 coroutines on a pool)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev  # gRPC: <spanprof/grpc.hpp>'s tests, example and benchmark (libgrpc++-dev does not bring protobuf's headers)
  chromium                 # headless, renders spanprof-report's page in its tests (tests/test_report.cpp)
  g++-aarch64-linux-gnu qemu-system-arm  # scripts/arm64.sh: tests built for aarch64, run on an arm64 kernel in a VM
)

missing=()
for package in "${packages[@]}"; do
  grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" || missing+=("$package")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "spanprof: installing ${missing[*]}"
as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
