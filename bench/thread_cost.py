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
import sys

from server_bench import Server

THREADS = ("spanprof-send", "spanprof-merge", "spanprof-wall")


def measure(binary, mode, args):
    """One turn: a new server for `binary`, warmed up, then one window (server_bench's
    slice: its counters and its threads' CPU before and after one wrk run)."""
    server = Server(binary, mode, str(args.server_core))
    try:
        server.slice(int(args.warmup), 4, str(args.load_core))
        window = server.slice(int(args.seconds), 4, str(args.load_core))
    finally:
        server.stop()
    requests, profiles = window["requests"], max(1, window["profiles"])
    spent_us = {name: window["threads"].get(name, 0) / 1e3 for name in THREADS}
    return {
        "requests/s": requests / args.seconds,
        "profiles/s": window["profiles"] / args.seconds,
        "server us/request": window["cpu_per_request_us"],
        "send us/profile": spent_us["spanprof-send"] / profiles,
        "merge us/profile": spent_us["spanprof-merge"] / profiles,
        "ticker us/request": spent_us["spanprof-wall"] / requests,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--mode", default="default")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=40)
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
