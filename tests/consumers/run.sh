#!/usr/bin/env bash
# Every way a user consumes spanprof, built and run as a user would:
#   find_package after install, add_subdirectory, FetchContent, Meson subproject,
#   pkg-config, the single header as the README says (with and without libcurl),
#   one source built with profiling on and off, without exceptions, without RTTI
#   and with clang + libc++ (header-only and compiled library), a strict-warnings
#   TU of every public header under g++ (C++23) and clang++ (C++17), and the
#   compile error for a span with no adapter.
# Usage: tests/consumers/run.sh <spanprof source dir> <work dir> <CMake build dir to install>
set -euo pipefail
root=$1
work=$2
install_from=$3
here="$root/tests/consumers"
strict="-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror"
mkdir -p "$work"
ok() { printf '  ok  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*" >&2; exit 1; }
# The thread context's variable in the program's .dynsym (OTEP 4947), where a
# profiler outside the process looks for it: the link flag spanprof's packages give.
exports_thread_context() {  # program, what it is called
  # grep reads all of nm's output: with -q it would stop at the match, and nm, killed
  # by SIGPIPE, would fail the pipeline under pipefail.
  nm -D "$1" | grep ' otel_thread_ctx_v1$' >/dev/null || fail "$2: otel_thread_ctx_v1 is not in .dynsym"
}

# A program that must deliver a labelled profile (consumer.cpp exits 1 otherwise).
# Each its own output file: some run at the same time.
run_consumer() {
  local log="$work/run-${2//[^A-Za-z0-9]/_}.txt"
  "$1" >"$log" 2>&1 || { cat "$log" >&2; fail "$2: ran, no profile"; }
}

# ---- CMake --------------------------------------------------------------------------
rm -rf "$work/prefix"
cmake --install "$install_from" --prefix "$work/prefix" >/dev/null
# The build-system consumers (CMake, Meson) run beside the compiler-command ones
# below: each is mostly one compiler process, and CI has two cores.
(

cmake -S "$here/cmake_import" -B "$work/cmake_import" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_FLAGS="$strict" >/dev/null
cmake --build "$work/cmake_import" >/dev/null
run_consumer "$work/cmake_import/consumer" "find_package"
exports_thread_context "$work/cmake_import/consumer" "find_package"
exports_thread_context "$work/cmake_import/consumer_compiled" "find_package, spanprof::spanprof_compiled"
ok "CMake find_package(spanprof) after install (otel_thread_ctx_v1 exported)"
run_consumer "$work/cmake_import/consumer_compiled" "find_package, spanprof::spanprof_compiled"
object=$(find "$work/cmake_import/CMakeFiles/consumer_compiled.dir" -name 'consumer.cpp.o')
[ -n "$object" ] || fail "find_package, spanprof::spanprof_compiled: no object file to check"
nm -C "$object" >"$work/consumer_compiled.nm"
grep -q 'spanprof' "$work/consumer_compiled.nm" || fail "find_package, spanprof::spanprof_compiled: nm found no spanprof symbol"
grep -q 'detail::Runtime::start' "$work/consumer_compiled.nm" &&
  fail "a source file linking spanprof::spanprof_compiled compiled the runtime itself"
ok "CMake find_package, spanprof::spanprof_compiled (the runtime comes from the library only)"

# Optional dependencies: a consumer that asked for none configures without them.
cmake -S "$here/cmake_add_subdirectory" -B "$work/cmake_add_subdirectory" -G Ninja -DSPANPROF_SOURCE_DIR="$root" \
  -DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON -DCMAKE_CXX_FLAGS="$strict" >"$work/add_subdirectory.log"
grep -q "without libcurl" "$work/add_subdirectory.log" || fail "add_subdirectory: no word about the missing libcurl"
cmake --build "$work/cmake_add_subdirectory" >/dev/null
run_consumer "$work/cmake_add_subdirectory/consumer" "add_subdirectory"
ok "CMake add_subdirectory (libcurl hidden: configured, said so in one line)"

commit=$(git -C "$root" rev-parse HEAD)
cmake -S "$here/cmake_fetch_content" -B "$work/cmake_fetch_content" -G Ninja -DSPANPROF_GIT_REPOSITORY="$root" \
  -DSPANPROF_GIT_TAG="$commit" -DCMAKE_CXX_FLAGS="$strict" >/dev/null
cmake --build "$work/cmake_fetch_content" >/dev/null
run_consumer "$work/cmake_fetch_content/consumer" "FetchContent"
ok "CMake FetchContent (commit ${commit:0:12})"

# ---- Meson subproject ---------------------------------------------------------------
meson_src="$work/meson_subproject/src"
rm -rf "$work/meson_subproject"
mkdir -p "$meson_src/subprojects"
cp "$here/meson_subproject/meson.build" "$here/consumer.cpp" "$meson_src/"
ln -s "$root" "$meson_src/subprojects/spanprof"
meson setup "$work/meson_subproject/build" "$meson_src" >/dev/null
own=$(meson introspect --targets "$work/meson_subproject/build" |
  python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin) if t.get("subproject") == "spanprof"))')
[ -z "$own" ] || fail "Meson subproject built spanprof's own targets: $own"
meson compile -C "$work/meson_subproject/build" >/dev/null
run_consumer "$work/meson_subproject/build/consumer" "Meson subproject"
exports_thread_context "$work/meson_subproject/build/consumer" "Meson subproject"
ok "Meson subproject (compiles no spanprof test, example or benchmark)"
meson setup "$work/meson_subproject/build-compiled" "$meson_src" -Dspanprof:compiled_lib=true >/dev/null
meson compile -C "$work/meson_subproject/build-compiled" >/dev/null
run_consumer "$work/meson_subproject/build-compiled/consumer" "Meson subproject, compiled_lib"
ok "Meson subproject with -Dspanprof:compiled_lib=true"
) >"$work/build-systems.log" 2>&1 &
build_systems=$!


# ---- pkg-config ---------------------------------------------------------------------
pc_dir=$(dirname "$(find "$work/prefix" -name spanprof.pc | head -1)")
for package in spanprof spanprof-curl spanprof-compiled; do
  flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs "$package")
  # shellcheck disable=SC2086
  g++ -std=c++17 $strict "$here/consumer.cpp" -o "$work/pkg-config-$package" $flags
  run_consumer "$work/pkg-config-$package" "pkg-config $package"
  exports_thread_context "$work/pkg-config-$package" "pkg-config $package"
  ok "pkg-config $package: $flags"
done

# ---- the single header, as the README says ------------------------------------------
single="$work/single_header"
rm -rf "$single" && mkdir -p "$single"
cp "$here/consumer.cpp" "$single/app.cpp"
ln -s "$root/single_include" "$single/single_include"
(cd "$single" && g++ -std=c++17 app.cpp -I single_include -lprofiler -lz -pthread)
run_consumer "$single/a.out" "single header"
if (cd "$single" && g++ -std=c++17 -H -fsyntax-only app.cpp -I single_include 2>&1 | grep '/curl/' >/dev/null); then
  fail "the single header reached libcurl's headers without SPANPROF_WITH_CURL"
fi
ok "single header, README command: g++ -std=c++17 app.cpp -I single_include -lprofiler -lz -pthread (no libcurl)"
# With the flag that exports the thread context's variable (docs/consuming.md).
(cd "$single" && g++ -std=c++17 -DSPANPROF_WITH_CURL=1 app.cpp -I single_include -lprofiler -lz -lcurl -pthread \
  -Wl,--export-dynamic-symbol=otel_thread_ctx_v1 -o with_curl)
run_consumer "$single/with_curl" "single header with curl"
exports_thread_context "$single/with_curl" "single header with -Wl,--export-dynamic-symbol=otel_thread_ctx_v1"
ok "single header with -DSPANPROF_WITH_CURL=1 -lcurl -Wl,--export-dynamic-symbol=otel_thread_ctx_v1"

# ---- one source, profiling on and off -----------------------------------------------
g++ -std=c++17 $strict -I "$root/include" "$here/one_source_both_ways.cpp" -o "$work/both-on" -lprofiler -lz -pthread
"$work/both-on" >"$work/both-on.txt" 2>&1 || { cat "$work/both-on.txt"; fail "one source, enabled"; }
g++ -std=c++17 $strict -DSPANPROF_ENABLED=0 -I "$root/include" "$here/one_source_both_ways.cpp" -o "$work/both-off" -pthread
"$work/both-off" >"$work/both-off.txt" 2>&1 || { cat "$work/both-off.txt"; fail "one source, SPANPROF_ENABLED=0"; }
if grep -Eq 'libprofiler|libtcmalloc|libcurl' <<<"$(ldd "$work/both-off")"; then fail "SPANPROF_ENABLED=0 binary needs gperftools or curl"; fi
ok "one source: profiles with SPANPROF_ENABLED=1; with 0 links with -pthread alone and does nothing"

# ---- the runtime once per program ---------------------------------------------------
# Header-only, a handler file compiles the guard's fast path and nothing of the
# runtime; a program with no SPANPROF_IMPLEMENTATION file fails to link, saying so.
g++ -std=c++17 -O2 $strict -I "$root/include" -c "$here/handler.cpp" -o "$work/handler.o"
handler_bytes=$(stat -c %s "$work/handler.o")
[ "$handler_bytes" -le 51200 ] || fail "a handler file that opens a guard: its object is $handler_bytes bytes, over 50 KB"
nm -C "$work/handler.o" >"$work/handler.nm"
if grep -q 'detail::Runtime::start' "$work/handler.nm"; then fail "a handler file compiled the runtime"; fi
printf 'int main() { return 0; }\n' >"$work/main_without_runtime.cpp"
if g++ -std=c++17 "$work/main_without_runtime.cpp" "$work/handler.o" -lprofiler -lz -pthread \
  -o "$work/without_runtime" >"$work/without_runtime.log" 2>&1; then
  fail "a program without a SPANPROF_IMPLEMENTATION file linked"
fi
grep -q 'undefined reference to .*define_SPANPROF_IMPLEMENTATION_in_one_source_file' "$work/without_runtime.log" ||
  { cat "$work/without_runtime.log" >&2; fail "the link error without the runtime does not name it"; }
ok "header-only: a handler file's object is $((handler_bytes / 1024)) KB, no runtime; without an implementation file the link names define_SPANPROF_IMPLEMENTATION_in_one_source_file"

# ---- without exceptions or RTTI, and with clang + libc++ -----------------------------
# Header-only, and against the compiled library (the installed one through
# pkg-config, built with exceptions as a distribution would; with libc++ its own
# copy, since libc++ and libstdc++ do not mix). Two at a time: each is one compiler process.
compiled_flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs spanprof-compiled)
variant() {  # name, then the compile command without its output
  local name=$1
  shift
  if ! "$@" -o "$work/variant-$name" >"$work/variant-$name.log" 2>&1; then
    cat "$work/variant-$name.log" >&2
    return 1
  fi
  run_consumer "$work/variant-$name" "$name"
}
libcxx_lib="$work/libcxx-spanprof-compiled.o"
clang++ -std=c++17 -stdlib=libc++ -O1 -DSPANPROF_COMPILED_LIB -I "$root/include" -c "$root/src/spanprof.cpp" \
  -o "$libcxx_lib" &
libcxx_pid=$!
# Header-only, the runtime is compiled without both at once, in C++20 (-O1: the
# optimizer's warnings, without libcurl's code; each compile of the runtime is
# ~15 s of CI); against the compiled library, the program without each.
# shellcheck disable=SC2086
variant header-only-fno-exceptions-fno-rtti g++ -std=c++20 -O1 $strict -fno-exceptions -fno-rtti -I "$root/include" \
  "$here/consumer.cpp" -lprofiler -lz -pthread &
header_only_pid=$!
for flags in "-fno-exceptions" "-fno-rtti" "-fno-exceptions -fno-rtti"; do
  name="compiled${flags// /}"
  # shellcheck disable=SC2086
  variant "$name" g++ -std=c++17 -O1 $strict $flags "$here/consumer.cpp" $compiled_flags ||
    fail "g++ $flags, compiled library"
  ok "g++ $flags, compiled library: compiles with $strict, runs, delivers its profile"
done
wait "$header_only_pid" || fail "g++ -fno-exceptions -fno-rtti, header-only"
ok "g++ -std=c++20 -O1 -fno-exceptions -fno-rtti, header-only: compiles with $strict, runs, delivers its profile"
# libc++ and libprofiler each bring a libunwind (LLVM's, the nongnu one): the
# linker's note about it is expected; the program must still run and deliver.
variant libcxx-header-only clang++ -std=c++17 -stdlib=libc++ -O1 $strict -I "$root/include" "$here/consumer.cpp" \
  -lprofiler -lz -pthread -ldl || fail "clang++ -stdlib=libc++, header-only"
ok "clang++ -stdlib=libc++, header-only: runs, delivers its profile"
wait "$libcxx_pid" || fail "clang++ -stdlib=libc++: the compiled library"
variant libcxx-compiled clang++ -std=c++17 -stdlib=libc++ -O1 $strict -fno-exceptions -fno-rtti -DSPANPROF_COMPILED_LIB \
  -I "$root/include" "$here/consumer.cpp" "$libcxx_lib" -lprofiler -lz -pthread -ldl ||
  fail "clang++ -stdlib=libc++ -fno-exceptions -fno-rtti, compiled library"
ok "clang++ -stdlib=libc++ -fno-exceptions -fno-rtti against the compiled library: runs, delivers its profile"

# ---- strict warnings ----------------------------------------------------------------
# Every public header, with libcurl: g++ in C++23 (g++ 12 knows it by that name),
# clang++ in C++17 (g++ in C++17 compiles the pkg-config programs, and in C++20
# without libcurl the header-only program above); a handler file with clang++ in
# C++2b too.
for combo in "clang++ 17 1 -fsyntax-only" "g++ 23 1 -O1"; do
  read -r cxx std curl mode <<<"$combo"
  # g++ at -O1: its warnings that need the optimizer (maybe-uninitialized, ...) are
  # seen, with and without libcurl's code. clang++ warns in its front end: no code.
  $cxx -std=c++$std $mode $strict -DSPANPROF_WITH_CURL="$curl" -I "$root/include" -c "$here/strict_warnings.cpp" \
    -o "$work/strict.o"
  ok "strict warnings: $cxx -std=c++$std (curl $curl)"
done
clang++ -std=c++2b -O1 $strict -I "$root/include" -c "$here/handler.cpp" -o "$work/handler-2b.o"
ok "strict warnings: clang++ -std=c++2b, a handler file"

# ---- one clear error where a guard is misused ---------------------------------------
check_one_error() {  # file, what it must say, what the check is called
  for cxx in g++ clang++; do
    if $cxx -std=c++17 -I "$root/include" -c "$here/$1" -o /dev/null >"$work/must-not-compile.txt" 2>&1; then
      fail "$cxx compiled $1"
    fi
    errors=$(grep -c 'error:' "$work/must-not-compile.txt" || true)
    first=$(grep -m1 'error:' "$work/must-not-compile.txt")
    [ "$errors" = 1 ] || { cat "$work/must-not-compile.txt"; fail "$cxx: $errors errors for $1, not one"; }
    case "$first" in
      *$2*) ;;
      *) fail "$cxx: the error for $1 does not say '$2': $first" ;;
    esac
    ok "$3, $cxx: one error"
  done
}
check_one_error no_span_adapter.cpp "span_adapter*docs/spans.md" "no adapter (names spanprof::span_adapter and docs/spans.md)"
check_one_error temporary_span.cpp "must outlive the guard" "a temporary span read at close"

wait "$build_systems" || { cat "$work/build-systems.log" >&2; fail "the CMake and Meson consumers"; }
cat "$work/build-systems.log"
