#!/usr/bin/env bash
# spanprof on a real arm64 kernel: builds tests/arm64/*.cpp for aarch64 (with
# Debian's g++-aarch64-linux-gnu; static, or dynamic where a test says so) and runs
# them one after the other in one boot of a VM (Debian's arm64 kernel under
# qemu-system-aarch64 -M virt -cpu max; an initramfs holding the programs, what
# they load, and tests/arm64/init/init.cpp as init). qemu-user is no substitute:
# a plain std::thread hangs under it on this machine.
#
#   bash scripts/arm64.sh [BUILD_DIR]       # default build/arm64
#
# SPANPROF_ARM64_STEP=build builds the programs and the initramfs only;
# SPANPROF_ARM64_STEP=run boots what an earlier build left in BUILD_DIR. CI builds
# beside other work and boots the VM when only low-priority work runs beside it:
# its timing tests measure emulated time, which jumps while the host takes the
# emulator's threads away.
#
# The arm64 libraries (gperftools, libunwind, zlib, liblzma) and the kernel
# come from Debian's arm64 archive with `apt-get download`, unpacked with
# `dpkg-deb -x` into a sysroot cached outside the clone (~/.cache/spanprof/arm64,
# or $SPANPROF_CACHE/arm64), never installed: installing libunwind-dev:arm64 makes
# apt remove the amd64 libc++-dev and libgoogle-perftools-dev. Without the cross
# compiler or qemu (scripts/install-deps.sh installs both), one line and exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-build/arm64}
cache=${SPANPROF_CACHE:-${HOME:-/tmp}/.cache/spanprof}/arm64

for tool in aarch64-linux-gnu-g++ qemu-system-aarch64 dpkg-deb apt-get python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "arm64: $tool not found: skipped (scripts/install-deps.sh installs it)"
    exit 0
  fi
done

as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi

# The sysroot and the kernel, once per machine.
if [ ! -f "$cache/ready" ]; then
  echo "arm64: fetching Debian's arm64 packages into $cache"
  if ! grep -qx arm64 <<<"$(dpkg --print-foreign-architectures)"; then
    "${as_root[@]}" dpkg --add-architecture arm64
  fi
  "${as_root[@]}" apt-get update -qq
  kernel=$(apt-cache depends linux-image-arm64:arm64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$kernel" ] || { echo "arm64: no linux-image-arm64 in the archive" >&2; exit 1; }
  rm -rf "$cache" && mkdir -p "$cache/debs"
  # Static libraries and headers only: the cross compiler brings its own libc.
  (cd "$cache/debs" && apt-get download -qq "$kernel" zlib1g-dev:arm64 libgoogle-perftools-dev:arm64 \
    libunwind-dev:arm64 liblzma-dev:arm64 2>&1 | grep -v "unsandboxed" || true)
  for deb in "$cache"/debs/*.deb; do
    case $(basename "$deb") in
      linux-image-*) dpkg-deb -x "$deb" "$cache/kernel" ;;
      *) dpkg-deb -x "$deb" "$cache/sysroot" ;;
    esac
  done
  ls "$cache"/kernel/boot/vmlinuz-* >/dev/null
  touch "$cache/ready"
fi
kernel_image=$(ls "$cache"/kernel/boot/vmlinuz-* | head -1)
sysroot=$cache/sysroot
mkdir -p "$out"
step=${SPANPROF_ARM64_STEP:-all}

if [ "$step" != run ]; then

# The cross toolchain's own runtime: a dynamic test's loader and libraries.
cross_lib=/usr/aarch64-linux-gnu/lib
# --eh-frame-hdr: a static link leaves out the unwind tables' search index, which
# every dynamic program has and spanprof's walker needs. No -g: nothing in the VM
# reads DWARF (the symbol tables name functions), and the kernel unpacks less.
common=(-std=c++17 -O2 -pthread -Wall -Wextra -Werror -I"$root/include"
  -isystem "$sysroot/usr/include" -isystem "$sysroot/usr/include/aarch64-linux-gnu" -Wl,--eh-frame-hdr)
# spanprof's runtime compiled once (its compiled library, src/spanprof.cpp), so
# that each test compiles only its own code: the stage runs beside the TSan suite.
# Without the lock hooks: most tests here link statically, and a static glibc has
# no versioned names for the hooks to forward to (docs/locks.md).
aarch64-linux-gnu-g++ "${common[@]}" -DSPANPROF_LOCK_HOOKS=0 -c "$root/src/spanprof.cpp" -o "$out/spanprof.o"
rm -f "$out/libspanprof.a"
aarch64-linux-gnu-ar rcs "$out/libspanprof.a" "$out/spanprof.o"

# The VM's init (tests/arm64/init/init.cpp) runs every test in one boot: a boot of
# the emulated kernel costs about as much as a short test.
aarch64-linux-gnu-g++ -std=c++17 -O2 -static -Wall -Wextra -Werror "$root/tests/arm64/init/init.cpp" -o "$out/init"
files=("init=$out/init")
dynamic=false
names=()
# SPANPROF_ARM64_ONLY: the tests to run (default: all); SPANPROF_ARM64_DLOPEN_ROUNDS:
# the dlopen test's rounds (to loop it: 200, with a longer SPANPROF_ARM64_TIMEOUT,
# in seconds).
for source in ${SPANPROF_ARM64_ONLY:-tests/arm64/*.cpp}; do
  name=$(basename "$source" .cpp)
  names+=("$name")
  # A test's own flags: its line "// arm64-cxxflags: ...".
  flags=$(sed -n 's|^// arm64-cxxflags: ||p' "$source")
  # Its shared objects: "// arm64-shared: NAME=SOURCE [FLAGS]", built as
  # /plugins/libNAME.so in the initramfs.
  while IFS= read -r shared; do
    [ -n "$shared" ] || continue
    so_name=${shared%%=*}
    so_rest=${shared#*=}
    so_source=${so_rest%% *}
    so_flags=""
    [ "$so_rest" = "$so_source" ] || so_flags=${so_rest#* }
    # shellcheck disable=SC2086
    aarch64-linux-gnu-g++ -std=c++17 -O2 -shared -fPIC -Wall -Wextra -Werror $so_flags \
      "$root/$so_source" -o "$out/lib$so_name.so"
    files+=("plugins/lib$so_name.so=$out/lib$so_name.so")
  done < <(sed -n 's|^// arm64-shared: ||p' "$source")
  # libgcc_eh before libunwind: the compiler runtime's _Unwind_* (libunwind has
  # its own, which gperftools does not use). gperftools, libunwind, liblzma and
  # zlib are linked statically either way: the sysroot holds their static
  # libraries only.
  libraries=(-L"$out" -L"$sysroot/usr/lib/aarch64-linux-gnu")
  if grep -q '^// arm64-link: dynamic' "$source"; then
    # Dynamic (a test that needs dlopen): glibc, libstdc++ and the loader from the
    # cross toolchain go into the initramfs, where the loader looks for them.
    # shellcheck disable=SC2086
    aarch64-linux-gnu-g++ "${common[@]}" -DSPANPROF_COMPILED_LIB $flags -no-pie "$source" -o "$out/$name" \
      "${libraries[@]}" -Wl,-Bstatic -lspanprof -lgcc_eh -lprofiler -lunwind -llzma -lz -Wl,-Bdynamic -ldl
    dynamic=true
  else
    # shellcheck disable=SC2086
    aarch64-linux-gnu-g++ "${common[@]}" -DSPANPROF_COMPILED_LIB -static $flags "$source" -o "$out/$name" \
      "${libraries[@]}" -lspanprof -lgcc_eh -lprofiler -lunwind -llzma -lz
  fi
  files+=("tests/$name=$out/$name")
done
if $dynamic; then
  files+=("lib/ld-linux-aarch64.so.1=$cross_lib/ld-linux-aarch64.so.1")
  for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
    files+=("lib/aarch64-linux-gnu/$lib=$(readlink -f "$cross_lib/$lib")")
  done
fi
printf '%s\n' "${names[@]}" >"$out/list"
files+=("tests/list=$out/list")
# An initramfs (newc cpio, gzip): /init, the tests, what they need, the
# directories they mount on.
python3 - "$out/tests.initrd.gz" "${files[@]}" <<'PYTHON'
import gzip, sys
def entry(name, data, mode, inode):
    encoded = name.encode() + b'\0'
    fields = [inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
    out = b'070701' + b''.join(b'%08X' % f for f in fields) + encoded
    out += b'\0' * (-len(out) % 4) + data + b'\0' * (-len(data) % 4)
    return out
directories = ['dev', 'proc', 'tmp']
for spec in sys.argv[2:]:
    parts = spec.split('=', 1)[0].split('/')[:-1]
    for i in range(len(parts)):
        directory = '/'.join(parts[:i + 1])
        if directory not in directories:
            directories.append(directory)
archive = b''
inode = 1
for directory in directories:
    archive += entry(directory, b'', 0o041777 if directory == 'tmp' else 0o040755, inode)
    inode += 1
for spec in sys.argv[2:]:
    path, source = spec.split('=', 1)
    archive += entry(path, open(source, 'rb').read(), 0o100755, inode)
    inode += 1
archive += entry('TRAILER!!!', b'', 0, 0)
open(sys.argv[1], 'wb').write(gzip.compress(archive, 1))
PYTHON
fi
[ "$step" != build ] || { echo "arm64: built $(wc -l <"$out/list") tests into $out/tests.initrd.gz"; exit 0; }
mapfile -t names <"$out/list"
log=$out/vm.log
start=$SECONDS
# Arguments the kernel does not know reach /init as its environment, and from it
# each test's.
append="console=ttyAMA0 quiet panic=-1"
[ -z "${SPANPROF_ARM64_DLOPEN_ROUNDS:-}" ] || append+=" SPANPROF_ARM64_ROUNDS=$SPANPROF_ARM64_DLOPEN_ROUNDS"
[ -z "${SPANPROF_ARM64_TIMEOUT:-}" ] || append+=" SPANPROF_ARM64_TEST_TIMEOUT=$SPANPROF_ARM64_TIMEOUT"
timeout "${SPANPROF_ARM64_TIMEOUT:-300}" qemu-system-aarch64 -M virt -cpu max -smp 2 -m 1024 -nographic \
  -no-reboot -net none -kernel "$kernel_image" -initrd "$out/tests.initrd.gz" -append "$append" \
  >"$log" 2>&1 || true
grep -E "^(spanprof|spanprof-arm64):" "$log" | tr -d '\r' || true
status=0
for name in "${names[@]}"; do
  grep -q "^spanprof-arm64: $name passed" "$log" || { echo "arm64: $name FAILED" >&2; status=1; }
done
if [ $status = 0 ]; then
  echo "arm64: ${#names[@]} tests passed in one boot ($((SECONDS - start)) s in the VM)"
else
  echo "arm64: the VM's console, last lines:" >&2
  tail -40 "$log" | tr -d '\r' >&2
fi
exit $status
