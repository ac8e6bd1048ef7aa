#!/usr/bin/env bash
# spanprof on a real arm64 kernel: builds tests/arm64/*.cpp for aarch64 (static,
# with Debian's g++-aarch64-linux-gnu) and runs each as the init process of a VM
# (Debian's arm64 kernel under qemu-system-aarch64 -M virt -cpu max, an initramfs
# holding only the program). qemu-user is no substitute: a plain std::thread hangs
# under it on this machine.
#
#   bash scripts/arm64.sh [BUILD_DIR]       # default build/arm64
#
# The arm64 libraries (gperftools, libunwind, zlib, liblzma, libc) and the kernel
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
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
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

status=0
for source in tests/arm64/*.cpp; do
  name=$(basename "$source" .cpp)
  # Static: the initramfs holds the program alone. --eh-frame-hdr: a static link
  # leaves out the unwind tables' search index, which every dynamic program has
  # and spanprof's walker needs. libgcc_eh first: the compiler runtime's _Unwind_*
  # (libunwind has its own, which gperftools does not use).
  # A test's own flags: its line "// arm64-cxxflags: ...".
  flags=$(sed -n 's|^// arm64-cxxflags: ||p' "$source")
  # shellcheck disable=SC2086
  aarch64-linux-gnu-g++ -std=c++17 -O2 -g -static -pthread -Wall -Wextra -Werror $flags -I"$root/include" \
    -isystem "$sysroot/usr/include" -isystem "$sysroot/usr/include/aarch64-linux-gnu" \
    -Wl,--eh-frame-hdr "$source" -o "$out/$name" -L"$sysroot/usr/lib/aarch64-linux-gnu" \
    -lgcc_eh -lprofiler -lunwind -llzma -lz
  # An initramfs (newc cpio, gzip) of /init and the directories it mounts on.
  python3 - "$out/$name" "$out/$name.initrd.gz" <<'EOF'
import gzip, sys
def entry(name, data, mode, inode):
    encoded = name.encode() + b'\0'
    fields = [inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
    out = b'070701' + b''.join(b'%08X' % f for f in fields) + encoded
    out += b'\0' * (-len(out) % 4) + data + b'\0' * (-len(data) % 4)
    return out
program = open(sys.argv[1], 'rb').read()
archive = (entry('init', program, 0o100755, 1) + entry('dev', b'', 0o040755, 2) + entry('proc', b'', 0o040755, 3)
           + entry('tmp', b'', 0o041777, 4) + entry('TRAILER!!!', b'', 0, 0))
open(sys.argv[2], 'wb').write(gzip.compress(archive, 1))
EOF
  log=$out/$name.log
  start=$SECONDS
  timeout 300 qemu-system-aarch64 -M virt -cpu max -smp 2 -m 1024 -nographic -no-reboot -net none \
    -kernel "$kernel_image" -initrd "$out/$name.initrd.gz" -append "console=ttyAMA0 quiet panic=-1" \
    >"$log" 2>&1 || true
  grep -E "^(spanprof|spanprof-arm64):" "$log" | tr -d '\r' || true
  if grep -q "spanprof-arm64: PASS" "$log"; then
    echo "arm64: $name passed ($((SECONDS - start)) s in the VM)"
  else
    echo "arm64: $name FAILED; the VM's console:" >&2
    tail -40 "$log" >&2
    status=1
  fi
done
exit $status
