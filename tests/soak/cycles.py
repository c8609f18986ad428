#!/usr/bin/env python3
"""Init/destroy cycles with constant memory, descriptors and threads.

Each job makes CYCLES communicators one after another, one checked allreduce on each, and
destroys them, on N ranks started by loomrun, through one of:
  c           the C API (tests/soak/init_cycles.cpp: the next unique id broadcast over the
              previous communicator)
  python      the Python module, the same pattern
  torch-loom  torch: new_group(backend="loom") + all_reduce + destroy_process_group(group)
  torch-gloo  the same on Gloo, for comparison
Every rank reports its resident memory, descriptors and threads after WARMUP cycles and at the
end; this prints the growth per rank and exits 1 if a job failed or its descriptors or threads
grew.

  tests/soak/cycles.py --build build --apis c,python,torch-loom,torch-gloo --cycles 10000 -n 2
"""
import argparse
import os
import re
import subprocess
import sys
import time

USAGE = re.compile(r"usage cycle=(\d+) rss_kb=(\d+) fds=(\d+) threads=(\d+)")


def usage_line(cycle):
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    fds = len(os.listdir("/proc/self/fd")) - 1  # listdir's own
    threads = len(os.listdir("/proc/self/task"))
    return f"usage cycle={cycle} rss_kb={rss} fds={fds} threads={threads}"


def python_worker(cycles, warmup):
    import numpy as np

    import loom
    comm = loom.Comm.from_env()
    rank, size = comm.rank, comm.size
    for cycle in range(1, cycles + 1):
        uid = np.zeros(128, dtype=np.uint8)
        if rank == 0:
            uid[:] = np.frombuffer(loom.get_unique_id(), dtype=np.uint8)
        comm.broadcast(uid, root=0)
        following = loom.Comm.init_rank(size, uid.tobytes(), rank)
        comm.destroy()
        comm = following
        data = np.full(257, rank + cycle, dtype=np.int32)
        comm.allreduce(data)
        want = size * (size - 1) // 2 + size * cycle
        if not (data == want).all():
            sys.exit(f"failed cycle={cycle}: allreduce gave {data[0]}, not {want}")
        if cycle in (warmup, cycles):
            print(usage_line(cycle), flush=True)
    comm.destroy()
    print(f"done cycles={cycles}", flush=True)


def torch_worker(backend, cycles, warmup):
    import gc

    import torch
    import torch.distributed as dist
    if backend == "loom":
        import loom  # noqa: F401  (torch also loads it by its entry point)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    for cycle in range(1, cycles + 1):
        group = dist.new_group(backend=backend)
        t = torch.full((257,), rank + cycle, dtype=torch.int32)
        dist.all_reduce(t, group=group)
        want = size * (size - 1) // 2 + size * cycle
        if not bool((t == want).all()):
            sys.exit(f"failed cycle={cycle}: all_reduce gave {int(t[0])}, not {want}")
        dist.destroy_process_group(group)
        if cycle in (warmup, cycles):
            gc.collect()
            print(usage_line(cycle), flush=True)
    dist.destroy_process_group()
    print(f"done cycles={cycles}", flush=True)


def run_job(a, api):
    worker = ([os.path.join(a.build, "tests", "init_cycles")] if api == "c" else
              [sys.executable, os.path.abspath(__file__), "--worker", api])
    cmd = ([os.path.join(a.build, "tools", "loomrun"), "-n", str(a.ranks), "--timeout",
            str(a.timeout), "--"] + worker + [str(a.cycles), str(a.warmup)])
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout + 60)
    seconds = time.monotonic() - start
    lines = (p.stdout + p.stderr).splitlines()
    usage = {}  # rank -> [(cycle, rss, fds, threads)]
    for line in lines:
        m = USAGE.search(line)
        rank = re.match(r"\[(\d+)\]", line)
        if m:
            usage.setdefault(int(rank.group(1)) if rank else len(usage), []).append(
                tuple(int(v) for v in m.groups()))
    done = sum("done cycles=" in line for line in lines)
    return p.returncode, seconds, usage, done, lines


def report(a, api, result):
    code, seconds, usage, done, lines = result
    ok = code == 0 and done == a.ranks
    print(f"{api}: {a.ranks} ranks, {a.cycles} cycles in {seconds:.0f} s "
          f"({seconds / a.cycles * 1e3:.1f} ms per cycle), exit {code}, {done} ranks done")
    for rank in sorted(usage):
        if len(usage[rank]) < 2:
            ok = False
            continue
        (c0, rss0, fd0, th0), (c1, rss1, fd1, th1) = usage[rank][0], usage[rank][-1]
        growth = (rss1 - rss0) / 1024
        print(f"  rank {rank}: cycle {c0} -> {c1}: rss {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB "
              f"({growth:+.1f} MiB, {growth * 1024 / max(1, c1 - c0):+.2f} KiB per cycle), "
              f"fds {fd0} -> {fd1}, threads {th0} -> {th1}")
        ok = ok and fd1 <= fd0 and th1 <= th0
    if not ok:
        print("\n".join("    " + line for line in lines[-20:]))
    return ok


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        api, cycles, warmup = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        if api == "python":
            return python_worker(cycles, warmup)
        return torch_worker(api.split("-")[1], cycles, warmup)
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--apis", default="c,python,torch-loom,torch-gloo")
    p.add_argument("--cycles", type=int, default=10000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("-n", "--ranks", type=int, default=2)
    p.add_argument("--timeout", type=int, default=3600, help="seconds per job")
    a = p.parse_args()
    ok = True
    for api in a.apis.split(","):
        ok = report(a, api, run_job(a, api)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
