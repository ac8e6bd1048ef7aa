#!/usr/bin/env python3
"""What spanprof's own threads cost per profile, build against build: a finer
instrument than server_bench.py's paired rounds for a change to delivery.

Each build's server (bench/server_bench.cpp, MODE default unless --mode) runs
alone on one core with wrk on another, in turns (A B A B ...). After a warm-up,
over one window: the CPU of spanprof-send and spanprof-merge per profile
delivered, the ticker's (spanprof-wall) per request, and the server's CPU per
request, from the kernel's per-thread accounting (/proc/PID/task/TID/schedstat)
and the server's own counters (GET /cpu). Alone on a core, a server's threads
cost what they cost, not what a neighbour's cache traffic adds: two builds' senders
differing by a few microseconds a profile come apart in three turns, where paired
rounds of whole-server CPU cannot resolve 0.3 % of the server.

  python3 bench/thread_cost.py BINARY [BINARY ...] [--turns 3] [--warmup 10]
                               [--seconds 40] [--mode default]
                               [--server-core 1 --load-core 0]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from server_bench import free_port, read_counters

THREADS = ("spanprof-send", "spanprof-merge", "spanprof-wall")


def thread_cpu_ns(pid):
    """CPU time (ns) of each of spanprof's named threads in `pid`."""
    cpu = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            if name in THREADS:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    cpu[name] = int(f.read().split()[0])
        except OSError:
            pass  # a thread that just ended
    return cpu


def measure(binary, mode, args):
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", str(args.server_core), binary, mode, str(port)],
                              stdout=subprocess.DEVNULL)
    load = None
    try:
        deadline = time.time() + 10
        while True:
            try:
                read_counters(port)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    sys.exit(f"thread_cost: {binary} did not answer")
                time.sleep(0.1)
        total = int(args.warmup + args.seconds) + 2  # wrk takes whole seconds
        load = subprocess.Popen(["taskset", "-c", str(args.load_core), "wrk", "-t1", "-c4", f"-d{total}s",
                                 "-H", "Connection: close", f"http://127.0.0.1:{port}/work"],
                                stdout=subprocess.DEVNULL)
        time.sleep(args.warmup)
        cpu0, served0, profiles0 = read_counters(port)
        threads0 = thread_cpu_ns(server.pid)
        time.sleep(args.seconds)
        cpu1, served1, profiles1 = read_counters(port)
        threads1 = thread_cpu_ns(server.pid)
    finally:
        if load is not None:
            load.kill()
            load.wait()
        server.kill()
        server.wait()
    requests = max(1, served1 - served0)
    profiles = max(1, profiles1 - profiles0)
    spent = {name: (threads1.get(name, 0) - threads0.get(name, 0)) / 1e3 for name in THREADS}
    return {
        "requests/s": requests / args.seconds,
        "profiles/s": profiles / args.seconds,
        "server us/request": (cpu1 - cpu0) / 1e3 / requests,
        "send us/profile": spent["spanprof-send"] / profiles,
        "merge us/profile": spent["spanprof-merge"] / profiles,
        "ticker us/request": spent["spanprof-wall"] / requests,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--mode", default="default")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--load-core", type=int, default=0)
    args = parser.parse_args()
    for binary in args.binaries:
        if not os.access(binary, os.X_OK):
            sys.exit(f"thread_cost: no server at {binary} (bash scripts/server-bench.sh builds one)")
    results = {binary: [] for binary in args.binaries}
    for turn in range(1, args.turns + 1):
        for binary in args.binaries:
            result = measure(binary, args.mode, args)
            results[binary].append(result)
            print(f"turn {turn} {binary}: " + "  ".join(f"{k} {v:.2f}" for k, v in result.items()), flush=True)
    print(f"\nmedians over {args.turns} turns ({args.mode}, server alone on core {args.server_core}, "
          f"wrk -t1 -c4 on core {args.load_core}, {args.seconds:g} s windows after {args.warmup:g} s)")
    keys = list(next(iter(results.values()))[0].keys())
    print(f"{'build':40} " + " ".join(f"{k:>18}" for k in keys))
    for binary, runs in results.items():
        print(f"{binary[-40:]:40} " + " ".join(f"{statistics.median(r[k] for r in runs):18.2f}" for k in keys))


if __name__ == "__main__":
    main()
