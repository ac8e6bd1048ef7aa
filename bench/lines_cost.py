#!/usr/bin/env python3
"""What source lines cost a real server: the HTTP benchmark's server
(bench/server_bench.cpp, every request profiled at 100 Hz, the default engine)
built with libdw line symbolization and built without it (-DSPANPROF_LIBDW=OFF),
loaded side by side by one wrk each. For each build: resident memory (VmRSS)
at 5 s and at the end of the load, and the CPU of the sender thread
(spanprof-send: symbolizes, encodes, hands over) over the first 5 s.

On a machine with the distribution's debug packages (libc6-dbg), the with-lines
server finds libc's separate debug file: the figures show what that costs.

  python3 bench/lines_cost.py --lines build/ci/cmake/bench/spanprof_server_bench \\
                              --names build/names/bench/spanprof_server_bench [--seconds 20] [--rounds 3]
  python3 bench/lines_cost.py ... --soak 600    # with lines only: RSS every 30 s
  python3 bench/lines_cost.py ... --mode system_lines    # libc's frames with lines too
  python3 bench/lines_cost.py ... --mode no_debug_files  # as without the debug packages
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_bench  # noqa: E402  (its Server, load command and per-thread CPU)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sender_cpu_ms(pid):
    return server_bench.thread_cpu_ns(pid).get("spanprof-send", 0) / 1e6


def one_round(binaries, mode, seconds, connections, server_cores, load_cores):
    servers = {name: server_bench.Server(binary, mode, server_cores) for name, binary in binaries.items()}
    try:
        sender_at_start = {name: sender_cpu_ms(s.process.pid) for name, s in servers.items()}
        loads = [subprocess.Popen(server_bench.pinned(server_bench.load_command(s.port, seconds, connections), load_cores),
                                  stdout=subprocess.DEVNULL) for s in servers.values()]
        time.sleep(5)
        at_5 = {name: (rss_kb(s.process.pid), sender_cpu_ms(s.process.pid) - sender_at_start[name])
                for name, s in servers.items()}
        for process in loads:
            if process.wait() != 0:
                raise RuntimeError("wrk failed")
        at_end = {name: rss_kb(s.process.pid) for name, s in servers.items()}
        served = {name: server_bench.read_counters(s.port)[1] for name, s in servers.items()}
    finally:
        for s in servers.values():
            s.stop()
    return {name: {"rss_5s_kb": at_5[name][0], "sender_5s_ms": at_5[name][1], "rss_end_kb": at_end[name],
                   "served": served[name]} for name in binaries}


def soak(binary, mode, seconds, connections, server_cores, load_cores):
    server = server_bench.Server(binary, mode, server_cores)
    try:
        load = subprocess.Popen(server_bench.pinned(server_bench.load_command(server.port, seconds, connections),
                                                    load_cores), stdout=subprocess.DEVNULL)
        started = time.time()
        while load.poll() is None:
            time.sleep(30 - (time.time() - started) % 30)
            if load.poll() is None:
                served = server_bench.read_counters(server.port)[1]
                print(f"{time.time() - started:5.0f} s  RSS {rss_kb(server.process.pid) / 1024:6.1f} MB  "
                      f"sender {sender_cpu_ms(server.process.pid):7.0f} ms  {served} requests", flush=True)
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", required=True, help="the server built with libdw")
    parser.add_argument("--names", default="", help="the server built with -DSPANPROF_LIBDW=OFF")
    parser.add_argument("--mode", default="default",
                        help="the servers' mode (bench/server_bench.cpp): system_lines, no_debug_files, ...")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--server-cores", default="")
    parser.add_argument("--load-cores", default="")
    parser.add_argument("--soak", type=int, default=0, help="seconds of one with-lines soak instead")
    args = parser.parse_args()
    if args.soak:
        soak(args.lines, args.mode, args.soak, args.connections, args.server_cores, args.load_cores)
        return
    binaries = {"lines": args.lines, "names": args.names}
    rounds = []
    for n in range(args.rounds):
        result = one_round(binaries, args.mode, args.seconds, args.connections, args.server_cores, args.load_cores)
        rounds.append(result)
        print(f"round {n + 1}: " + "; ".join(
            f"{name} RSS {r['rss_5s_kb'] / 1024:.1f} MB at 5 s, {r['rss_end_kb'] / 1024:.1f} MB at "
            f"{args.seconds:.0f} s, sender {r['sender_5s_ms']:.0f} ms in 5 s"
            for name, r in result.items()), flush=True)

    def median(name, key):
        return statistics.median(r[name][key] for r in rounds)

    print(f"median of {args.rounds}: RSS at {args.seconds:.0f} s lines {median('lines', 'rss_end_kb') / 1024:.1f} MB, "
          f"names {median('names', 'rss_end_kb') / 1024:.1f} MB (+"
          f"{(median('lines', 'rss_end_kb') - median('names', 'rss_end_kb')) / 1024:.1f} MB); sender's CPU in 5 s "
          f"lines {median('lines', 'sender_5s_ms'):.0f} ms, names {median('names', 'sender_5s_ms'):.0f} ms")


if __name__ == "__main__":
    main()
