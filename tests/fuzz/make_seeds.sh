#!/usr/bin/env bash
# Regenerates tests/fuzz/corpus/ from real outputs: seeds/make_seeds.cpp runs
# spanprof's own code (gperftools' CPU and heap profilers through the classic
# engines, a spool filled during an outage, libcurl against the test HTTP server,
# the sampling engines' record writers...), and the ELF seeds are objects the
# compiler makes here. Needs g++, libgoogle-perftools-dev, libcurl4-openssl-dev,
# zlib1g-dev; builds in build/fuzz-seeds.
#
#   tests/fuzz/make_seeds.sh
#
# Every seed stays under 64 KiB and the corpus under 1 MiB: the script fails
# otherwise. Profiles hold addresses and the text of /proc/self/maps of the
# machine that made them, so a rerun changes every file; that is expected.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=build/fuzz-seeds
corpus=tests/fuzz/corpus
rm -rf "$work"
mkdir -p "$work/out/elf"

# tcmalloc must be the allocator for the classic heap engine; --no-as-needed keeps
# it linked although nothing calls it by name.
g++ -std=c++17 -O2 -g -Iinclude -Itests -DSPANPROF_WITH_CURL=1 -o "$work/make_seeds" tests/fuzz/seeds/make_seeds.cpp \
  -lcurl -lprofiler -Wl,--no-as-needed -ltcmalloc -Wl,--as-needed -lz -pthread -ldl
# Run from a scratch directory: profiles record the program's path (the maps
# text, pprof mappings), which should not name this checkout. A sampling period
# small enough that the sampled heap dump has buckets.
run_dir=$(mktemp -d /tmp/spanprof-seeds.XXXXXX)
trap 'rm -rf "$run_dir"' EXIT
cp "$work/make_seeds" "$run_dir/make_seeds"
TCMALLOC_SAMPLE_PARAMETER=65536 "$run_dir/make_seeds" "$PWD/$work/out"

# ELF objects as a build makes them: a relocatable object, a shared library with a
# build id, and the same library stripped to its .dynsym. The first byte of each
# seed is fuzz_elf's options (bit 0: .dynsym too, bit 1: a load bias).
cat >"$work/tiny.cpp" <<'EOF'
#include <cstddef>
namespace shop {
template <class T> T total(const T* prices, std::size_t n) {
  T sum{};
  for (std::size_t i = 0; i < n; ++i) sum += prices[i];
  return sum;
}
template double total<double>(const double*, std::size_t);
template long total<long>(const long*, std::size_t);
static __attribute__((noinline)) int discount(int cents) { return cents - cents / 10; }
int checkout(int cents) { return discount(cents) + 1; }
}  // namespace shop
extern "C" int plain_c_entry(int x) { return shop::checkout(x) * 2; }
EOF
g++ -O2 -c -o "$work/tiny.o" "$work/tiny.cpp"
g++ -O2 -fPIC -shared -nostdlib -Wl,--build-id -Wl,-z,noseparate-code -Wl,-z,max-page-size=4096 \
  -o "$work/libtiny.so" "$work/tiny.cpp"
strip --strip-all -o "$work/libtiny-stripped.so" "$work/libtiny.so"
{ printf '\001'; cat "$work/tiny.o"; } >"$work/out/elf/object.o"
{ printf '\003'; cat "$work/libtiny.so"; } >"$work/out/elf/library.so"
{ printf '\001'; cat "$work/libtiny-stripped.so"; } >"$work/out/elf/library-stripped.so"
# DWARF seeds: the library with debug information (lines, an inlined function), as
# a program and as the separate debug file objcopy keeps. The first byte is
# fuzz_dwarf's options (addresses past each function start, each looked up twice).
mkdir -p "$work/out/dwarf"
g++ -O2 -g -fPIC -shared -nostdlib -Wl,--build-id -Wl,-z,noseparate-code -Wl,-z,max-page-size=4096 \
  -o "$work/libtiny-g.so" "$work/tiny.cpp"
objcopy --only-keep-debug "$work/libtiny-g.so" "$work/libtiny-g.debug"
{ printf '\013'; cat "$work/libtiny-g.so"; } >"$work/out/dwarf/library-g.so"
{ printf '\003'; cat "$work/libtiny-g.debug"; } >"$work/out/dwarf/library.debug"

too_big=$(find "$work/out" -path "$work/out/.spool" -prune -o -type f -size +64k -print)
if [ -n "$too_big" ]; then
  echo "make_seeds: seeds over 64 KiB: $too_big" >&2
  exit 1
fi
for dir in "$work"/out/*/; do
  target=$(basename "$dir")
  rm -rf "${corpus:?}/$target"
  mkdir -p "$corpus/$target"
  cp "$dir"* "$corpus/$target/"
done
total=$(du -sb "$corpus" | cut -f1)
if [ "$total" -gt $((1 << 20)) ]; then
  echo "make_seeds: the corpus is $total bytes, over 1 MiB" >&2
  exit 1
fi
echo "make_seeds: $(find "$corpus" -type f | wc -l) seeds, $total bytes, in $corpus"
