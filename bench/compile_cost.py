#!/usr/bin/env python3
"""What including spanprof costs a source file, side by side in one run.

Compiles one-function translation units at -O2 with the system compiler and prints
their compile time (best of --repeat) and object size:

  std      <string> <vector> <map> <memory> <thread>, the yardstick
  umbrella <spanprof/spanprof.hpp>, nothing used
  guard    <spanprof/spanprof.hpp> and one function that opens a ScopedProfile
  impl     the one file that defines SPANPROF_IMPLEMENTATION (the runtime)

Then links --files handler files and one implementation file into a program and
counts the objects that define the runtime's start (nm): the runtime once per program.

  python3 bench/compile_cost.py [--cxx g++] [--repeat 3] [--files 30]

Exits non-zero when a target of docs/compile-cost.md is missed (--check).
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

STD = """#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
int handler_{n}(int x) {{ std::vector<int> v(static_cast<unsigned>(x)); return static_cast<int>(v.size()); }}
"""

UMBRELLA = """#include <spanprof/spanprof.hpp>
int handler_{n}(int x) {{ return x + 1; }}
"""

GUARD = """#include <spanprof/spanprof.hpp>
int work(int x);
int handler_{n}(const spanprof::SpanContext& span, int x) {{
  spanprof::ScopedProfile guard(spanprof::NamedSpan{{span, "handler {n}"}});
  return work(x);
}}
"""

IMPL = """#define SPANPROF_IMPLEMENTATION
#include <spanprof/spanprof.hpp>
int work(int x) { return x * 3; }
int main() { spanprof::start(); return 0; }
"""


def compile_once(cxx, flags, source, obj):
    begin = time.perf_counter()
    subprocess.run([cxx, *flags, "-c", str(source), "-o", str(obj)], check=True)
    return time.perf_counter() - begin


def measure(cxx, flags, work, name, text, repeat):
    source = work / f"{name}.cpp"
    source.write_text(text.format(n=0) if "{n}" in text else text)
    obj = work / f"{name}.o"
    best = min(compile_once(cxx, flags, source, obj) for _ in range(repeat))
    return best, obj.stat().st_size


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--check", action="store_true", help="fail when a target is missed")
    args = parser.parse_args()

    flags = ["-std=c++17", "-O2", f"-I{ROOT / 'include'}"]
    work = pathlib.Path(tempfile.mkdtemp(prefix="spanprof-compile-cost-"))
    try:
        rows = {}
        for name, text in (("std", STD), ("umbrella", UMBRELLA), ("guard", GUARD), ("impl", IMPL)):
            rows[name] = measure(args.cxx, flags, work, name, text, args.repeat)
        print(f"{args.cxx} -std=c++17 -O2, best of {args.repeat}:")
        print(f"  {'translation unit':<52} {'time':>8} {'object':>10}")
        labels = {
            "std": "<string> <vector> <map> <memory> <thread>",
            "umbrella": "<spanprof/spanprof.hpp>, nothing used",
            "guard": "<spanprof/spanprof.hpp>, one function opens a guard",
            "impl": "the SPANPROF_IMPLEMENTATION file",
        }
        for name, (seconds, size) in rows.items():
            print(f"  {labels[name]:<52} {seconds:7.2f}s {size / 1024:8.1f} KB")

        # A program of handler files: the runtime is in it once.
        objects = []
        for n in range(args.files):
            source = work / f"handler_{n}.cpp"
            source.write_text(GUARD.format(n=n))
            obj = work / f"handler_{n}.o"
            compile_once(args.cxx, flags, source, obj)
            objects.append(str(obj))
        program = work / "program"
        libs = ["-lprofiler", "-lz", "-lpthread", "-ldl"]
        subprocess.run([args.cxx, *objects, str(work / "impl.o"), "-o", str(program), *libs], check=True)
        # The runtime in the objects: the linker would keep one copy of an inline
        # definition, so count the objects that compile it, not the program's symbols.
        runtime_objects = []
        for obj in objects + [str(work / "impl.o")]:
            symbols = subprocess.run(["nm", "-C", "--defined-only", obj], check=True, capture_output=True,
                                     text=True).stdout
            if "detail::Runtime::start(" in symbols:
                runtime_objects.append(pathlib.Path(obj).name)
        starts = runtime_objects
        print(f"  {args.files} handler files + the implementation file linked into one program "
              f"({program.stat().st_size / 1024:.0f} KB): the runtime is compiled in {len(starts)} object(s): "
              f"{' '.join(starts)}")

        std_time = rows["std"][0]
        guard_time, guard_size = rows["guard"]
        misses = []
        if guard_time > 2 * std_time + 1.0:
            misses.append(f"a guard's file took {guard_time:.2f}s > 2 x {std_time:.2f}s + 1s")
        if guard_size > 50 * 1024:
            misses.append(f"a guard's object is {guard_size / 1024:.1f} KB > 50 KB")
        if rows["umbrella"][0] > 3.0:
            misses.append(f"the umbrella alone took {rows['umbrella'][0]:.2f}s > 3s")
        if len(starts) != 1:
            misses.append(f"the runtime is compiled in {len(starts)} objects, not 1")
        for miss in misses:
            print(f"  MISSED: {miss}")
        return 1 if (misses and args.check) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
