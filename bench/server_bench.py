#!/usr/bin/env python3
"""What a busy HTTP server pays for span profiles: its own CPU per request
(utime + stime of the server process / requests served), profiling on against
off, in paired rounds.

One server (bench/server_bench.cpp) runs per mode, all started anew each round
(--keep-servers: once for the run). Each round, in a new random order, loads every mode's server at the same time as the
`off` server, each with its own wrk (one thread, 4 connections, a new connection
per request), and reads both servers' process CPU time and request count before
and after the window. A round's ratio is the mode's CPU per request over `off`'s
in the same window; the medians over the rounds are the figures to quote. A
second `off` server (`off/again`) gives the noise floor. Load generators and
servers share the machine's cores, which is why throughput is not the measure:
CPU per request of the server is what a user pays.

After the ratios, each mode's CPU per request by thread (from the kernel's
per-thread accounting, /proc/PID/task/TID/schedstat): the request threads, and
spanprof's own (spanprof-send encodes and uploads, spanprof-wall is the ticker,
spanprof-merge takes finished profiles over), so a cost can be pinned on a thread.

  python3 bench/server_bench.py [--binary PATH] [--load wrk|grpc] [--rounds 7] [--seconds 4]
                                [--modes off,default,...] [--connections 8]
                                [--server-cores 1 --load-cores 0] [--one-at-a-time] [--keep-servers]
                                [--before PATH_TO_AN_EARLIER_BUILD] [--before-modes default,...]

A gRPC server the same way (bench/grpc_bench.cpp, the example's Checkout service on
the callback API, loaded by its own client, a traceparent on every call):
  python3 bench/server_bench.py --load grpc --binary build/dev/bench/spanprof_grpc_bench

The one command (installs wrk and cpp-httplib, builds, runs):
  bash scripts/server-bench.sh
"""
import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

MODES = ["off", "default", "perf_event", "posix_timer", "tail", "batched", "wall", "lock", "gperftools"]
GRPC_MODES = ["off", "empty", "installed", "default"]  # bench/grpc_bench.cpp
# Not run unless asked (--modes): they split the default's cost into its parts.
DIAGNOSTIC_MODES = ["idle", "turned_down", "rare", "frequent", "no_watch", "time_split"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_counters(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/cpu", timeout=10) as response:
        cpu_ns, served, profiles = (int(x) for x in response.read().split())
    return cpu_ns, served, profiles


def wait_until_up(port, process):
    deadline = time.time() + 20
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            return read_counters(port)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def thread_cpu_ns(pid):
    """{thread name: CPU ns} of a process's live threads, summed by name (the kernel's
    sum_exec_runtime, to the nanosecond)."""
    by_name = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return by_name
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read
        by_name[name] = by_name.get(name, 0) + ns
    return by_name


def thread_deltas(before, after):
    # A thread that ended inside the window loses its time; spanprof's and the
    # server's pool threads live as long as the process.
    return {name: ns - before.get(name, 0) for name, ns in after.items()}


def pinned(command, cores):
    return (["taskset", "-c", cores] + command) if cores else command


# What loads a server: wrk against the HTTP server, or the gRPC benchmark's own
# client (--load grpc: the same binary in client mode, a channel per caller).
LOAD = {"kind": "wrk", "client": ""}


def load_command(port, seconds, connections):
    if LOAD["kind"] == "grpc":
        return [LOAD["client"], "client", str(port), str(seconds), str(connections)]
    return ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-H", "Connection: close",
            f"http://127.0.0.1:{port}/work"]


def load(port, seconds, connections, cores):
    subprocess.run(pinned(load_command(port, seconds, connections), cores), check=True, stdout=subprocess.DEVNULL)


def loaded_together(servers, seconds, connections, cores):
    """Loads the servers at the same time, one wrk each, and returns each one's
    window: the two see the same machine (a neighbour on the host, the CPU clock),
    so their ratio does not carry the drift between windows taken one after the
    other (on this 2-core VM, up to 8% between two identical servers)."""
    before = [read_counters(server.port) for server in servers]
    threads_before = [thread_cpu_ns(server.process.pid) for server in servers]
    loads = [subprocess.Popen(pinned(load_command(server.port, seconds, connections), cores), stdout=subprocess.DEVNULL)
             for server in servers]
    for process in loads:
        if process.wait() != 0:
            raise RuntimeError(f"the load ({LOAD['kind']}) failed")
    after = [read_counters(server.port) for server in servers]
    threads_after = [thread_cpu_ns(server.process.pid) for server in servers]
    windows = []
    for (cpu0, served0, profiles0), (cpu1, served1, profiles1), t0, t1 in zip(before, after, threads_before,
                                                                               threads_after):
        requests = served1 - served0
        if requests <= 0:
            raise RuntimeError("no requests served")
        windows.append({"cpu_per_request_us": (cpu1 - cpu0) / requests / 1000.0, "requests": requests,
                        "profiles": profiles1 - profiles0, "threads": thread_deltas(t0, t1)})
    return windows


class Server:
    """One server process for one mode, loaded in slices. New ones are started every
    round: a process keeps its own luck (where ASLR put its heap and stacks, which
    core its threads settled on) for its whole life, and two identical servers kept
    for a whole run came out 1.3 % apart in the median; fresh ones each round turn
    that bias into scatter the median averages out."""

    def __init__(self, binary, mode, cores):
        self.port = free_port()
        self.process = subprocess.Popen(pinned([binary, mode, str(self.port)], cores), stdout=subprocess.DEVNULL)
        wait_until_up(self.port, self.process)

    def slice(self, seconds, connections, cores):
        cpu0, served0, profiles0 = read_counters(self.port)
        threads0 = thread_cpu_ns(self.process.pid)
        load(self.port, seconds, connections, cores)
        cpu1, served1, profiles1 = read_counters(self.port)
        threads1 = thread_cpu_ns(self.process.pid)
        requests = served1 - served0
        if requests <= 0:
            raise RuntimeError("no requests served")
        return {"cpu_per_request_us": (cpu1 - cpu0) / requests / 1000.0, "requests": requests,
                "profiles": profiles1 - profiles0, "threads": thread_deltas(threads0, threads1)}

    def stop(self):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/quit", timeout=10).read()
        except OSError:
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/bench-server/bench/spanprof_server_bench")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--warmup", type=float, default=1)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--modes", default="")
    parser.add_argument("--load", choices=["wrk", "grpc"], default="wrk",
                        help="grpc: --binary is bench/grpc_bench.cpp's server, loaded by its own client mode "
                             "(--connections callers, a channel each)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--server-cores", default="",
                        help="taskset list for the server (e.g. 1); with --load-cores, keeps the two apart")
    parser.add_argument("--load-cores", default="", help="taskset list for the load generator (e.g. 0)")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="load each server alone in turn instead of at the same time as off")
    parser.add_argument("--keep-servers", action="store_true",
                        help="keep each mode's server for every round instead of starting new ones each round")
    parser.add_argument("--before", default="",
                        help="a second server binary (an earlier build): its modes run in the same rounds, "
                             "labelled MODE/before, for a before-and-after comparison side by side")
    parser.add_argument("--before-modes", default="",
                        help="the modes the --before build runs (default: every mode but off; a mode it "
                             "does not know yet, such as a new option's, is left out here)")
    args = parser.parse_args()
    LOAD["kind"] = args.load
    LOAD["client"] = args.binary
    modes = [m for m in (args.modes or ",".join(GRPC_MODES if args.load == "grpc" else MODES)).split(",") if m]
    if "off" not in modes:
        modes.insert(0, "off")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"server_bench: no server at {args.binary} (bash scripts/server-bench.sh builds it)")
    if args.before and not os.access(args.before, os.X_OK):
        sys.exit(f"server_bench: no server at {args.before}")
    # A second `off` server measured the same way: how far apart two identical
    # servers come out is the noise floor of every other ratio.
    if "off/again" not in modes:
        modes.append("off/again")
    binaries = {m: args.binary for m in modes}
    if args.before:
        before_modes = [m for m in args.before_modes.split(",") if m] or modes
        for m in [m for m in modes if not m.startswith("off") and m in before_modes]:
            binaries[f"{m}/before"] = args.before
            modes.append(f"{m}/before")
    rng = random.Random(args.seed)
    seconds = max(1, int(round(args.seconds)))
    warmup = max(1, int(round(args.warmup)))
    results = {m: [] for m in modes}
    ratios = {m: [] for m in modes}
    # Every server runs from the start. A round loads each mode's server at the same
    # time as the `off` server (--together, the default), or each server alone in
    # turn (--one-at-a-time); in both, the modes come in a new random order.
    servers = {}

    def start_servers():
        for server in servers.values():
            server.stop()
        servers.clear()
        for mode in modes:
            servers[mode] = Server(binaries[mode], mode.split("/")[0], args.server_cores)
            servers[mode].slice(warmup, args.connections, args.load_cores)

    try:
        start_servers()
        for round_number in range(1, args.rounds + 1):
            if round_number > 1 and not args.keep_servers:
                start_servers()
            order = [m for m in modes if m != "off"]
            rng.shuffle(order)
            if args.one_at_a_time:
                off = servers["off"].slice(seconds, args.connections, args.load_cores)
                results["off"].append(off)
                for mode in order:
                    window = servers[mode].slice(seconds, args.connections, args.load_cores)
                    results[mode].append(window)
                    ratios[mode].append(window["cpu_per_request_us"] / off["cpu_per_request_us"])
            else:
                for mode in order:
                    off, window = loaded_together([servers["off"], servers[mode]], seconds,
                                                  max(1, args.connections // 2), args.load_cores)
                    results["off"].append(off)
                    results[mode].append(window)
                    ratios[mode].append(window["cpu_per_request_us"] / off["cpu_per_request_us"])
            line = " ".join(f"{m}={ratios[m][-1]:.3f}" for m in modes if m != "off")
            off_us = statistics.median(r["cpu_per_request_us"] for r in results["off"][-len(order):])
            print(f"round {round_number}: off={off_us:.1f} us/request  {line}", flush=True)
    finally:
        for server in servers.values():
            server.stop()

    print()
    loader = "wrk -t1 -c{}" if args.load == "wrk" else "gRPC client, {} callers"
    pinning = f", server on cores {args.server_cores}, load on {args.load_cores}" if args.server_cores else ""
    method = (f"each alone, {loader.format(args.connections)}" if args.one_at_a_time else
              f"each loaded at the same time as off, {loader.format(max(1, args.connections // 2))} on each")
    closing = ", Connection: close" if args.load == "wrk" else ""
    print(f"server CPU per request, ratio to off ({args.rounds} paired rounds, {seconds} s each, {method}"
          f"{closing}{pinning})")
    print(f"{'mode':<18} {'median':>7}  {'us/req':>7}  {'profiles/s':>10}  rounds")
    ratios["off"] = [1.0] * args.rounds
    for mode in modes:
        us = statistics.median(r["cpu_per_request_us"] for r in results[mode])
        per_second = statistics.median(r["profiles"] for r in results[mode]) / seconds
        print(f"{mode:<18} {statistics.median(ratios[mode]):7.3f}  {us:7.1f}  {per_second:10.1f}  "
              + " ".join(f"{x:.3f}" for x in ratios[mode]))

    # By thread: every window's time over every window's requests, per mode.
    print()
    print("server CPU per request by thread (us), all rounds; request threads carry the server's name")
    names = sorted({name for mode in modes for r in results[mode] for name in r["threads"]})
    print(f"{'mode':<18} " + " ".join(f"{name:>16}" for name in names))
    for mode in modes:
        requests = sum(r["requests"] for r in results[mode])
        cells = []
        for name in names:
            ns = sum(r["threads"].get(name, 0) for r in results[mode])
            cells.append(f"{ns / requests / 1000.0:16.2f}" if ns else f"{'-':>16}")
        print(f"{mode:<18} " + " ".join(cells))


if __name__ == "__main__":
    main()
