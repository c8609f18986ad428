#!/usr/bin/env python3
"""A mixed-device torch job, timed as its user sees it: the first --gpus ranks keep their GPU
(rank i on GPU i modulo the count), the others see none (CUDA_VISIBLE_DEVICES=""), and every rank
passes a float32 tensor on its own device. Side by side in one job, per collective and size:

  loom         dist.<op> on the "loom" group: one heterogeneous communicator, each rank's own
               device (a GPU rank's call is stream-ordered; the time is until its GPU is done).
  gloo staged  what a torch user does without Loom: a GPU rank copies its tensor to pinned host
               memory, runs the op on a "gloo" group, copies the result back, one step after the
               other; CPU ranks run the gloo op on their tensors.

Each cell is the slowest rank's mean per call; every size's first loom and gloo calls are checked
against the CPU reference (small integers: exact in any order, so bit-exact).

    python3 bench/hetero_torch_bench.py -np 4 [--gpus 1] [-b 8 -e 256M -f 4 -n 20 -w 5] [OPS]

Prints a CSV line per (op, size) and, at the end, a markdown table per op.
"""
import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

from tables import human_bytes  # bench/tables.py: "4 MiB", "524,280 B"

OPS = ["allreduce", "broadcast", "allgather", "reducescatter"]
ELEMENT = 4  # float32


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ops", nargs="*", default=["allreduce"], help="of: " + " ".join(OPS))
    p.add_argument("-np", "--nprocs", type=int, required=True)
    p.add_argument("--gpus", type=int, default=1, help="ranks that keep a GPU (the first ones)")
    p.add_argument("-b", "--minbytes", type=parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=256 << 20)
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0,
                   help="fewer iterations (at least 3) where a size would take longer")
    a = p.parse_args()
    bad = [o for o in a.ops if o not in OPS]
    if bad:
        p.error(f"unknown op {bad[0]!r}; choose from {' '.join(OPS)}")
    if a.factor < 2 or a.minbytes < 1 or a.maxbytes < a.minbytes:
        p.error("need -f >= 2 and 1 <= -b <= -e")
    if not 1 <= a.nprocs or not 0 <= a.gpus <= a.nprocs:
        p.error("need -np >= 1 and 0 <= --gpus <= -np")
    return a


def sizes(a):
    s = a.minbytes
    while s <= a.maxbytes:
        yield s
        s *= a.factor


class Case:
    """One op at one size on one rank: the tensors, the reference and the two ways to run it."""

    def __init__(self, torch, dist, op, nbytes, rank, world, device, gloo):
        self.torch, self.dist, self.op, self.gloo = torch, dist, op, gloo
        self.rank, self.world, self.device = rank, world, device
        total = nbytes // ELEMENT
        self.count = total // world if op in ("allgather", "reducescatter") else total
        self.bytes = (self.count * world if op in ("allgather", "reducescatter") else total) * ELEMENT
        n_in = self.count * world if op == "reducescatter" else self.count
        n_out = self.count * world if op == "allgather" else self.count
        self.n_in, self.n_out = n_in, n_out
        self.send = torch.empty(n_in, dtype=torch.float32, device=device)
        self.recv = self.send if op in ("allreduce", "broadcast") else torch.empty(
            n_out, dtype=torch.float32, device=device)
        staged = device.type == "cuda"
        pin = dict(pin_memory=True) if staged else {}
        self.host_send = torch.empty(n_in, dtype=torch.float32, **pin) if staged else None
        self.host_recv = (self.host_send if self.recv is self.send else torch.empty(
            n_out, dtype=torch.float32, **pin)) if staged else None

    def value(self, rank, n):
        t = self.torch
        return ((t.arange(n, dtype=t.float32) + rank) % 5 - 2)

    def reset(self):
        self.send.copy_(self.value(self.rank, self.n_in))

    def want(self):
        t = self.torch
        if self.op == "broadcast":
            return self.value(0, self.n_out)
        if self.op == "allgather":
            return t.cat([self.value(q, self.count) for q in range(self.world)])
        full = sum(self.value(q, self.n_in) for q in range(self.world))
        if self.op == "reducescatter":
            return full[self.rank * self.count:(self.rank + 1) * self.count]
        return full

    def collective(self, send, recv, group):
        d = self.dist
        if self.op == "allreduce":
            d.all_reduce(send, group=group)
        elif self.op == "broadcast":
            d.broadcast(send, src=0, group=group)
        elif self.op == "allgather":
            d.all_gather_into_tensor(recv, send, group=group)
        else:
            d.reduce_scatter_tensor(recv, send, group=group)

    def run(self, method):
        if method == "loom":
            self.collective(self.send, self.recv, None)
        elif self.host_send is None:
            self.collective(self.send, self.recv, self.gloo)
        else:
            self.host_send.copy_(self.send)  # to pinned memory: returns when the copy is done
            self.collective(self.host_send, self.host_recv, self.gloo)
            self.recv.copy_(self.host_recv)

    def check(self, method):
        self.reset()
        self.run(method)
        got = self.recv.cpu()
        if not self.torch.equal(got, self.want()):
            raise SystemExit(f"rank {self.rank}: {method} {self.op} of {self.bytes} B is wrong: "
                             f"{got[:6].tolist()} instead of {self.want()[:6].tolist()}")


def rank_main(a, rank, world):
    import torch
    import torch.distributed as dist
    import loom  # noqa: F401  registers "loom"

    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) \
        if rank < a.gpus else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # one core per rank, as Loom's ranks and gloo_bench.py
    dist.init_process_group("loom", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=10))
    gloo = dist.new_group(backend="gloo")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.item()

    if rank == 0:
        print(f"# {world} ranks, {a.gpus} with a GPU ({torch.cuda.get_device_name(0) if a.gpus and torch.cuda.is_available() else 'none'}), torch {torch.__version__}", flush=True)
        print("op,bytes,loom_us,gloo_staged_us", flush=True)
    results = []
    for op in a.ops:
        for nbytes in sizes(a):
            c = Case(torch, dist, op, nbytes, rank, world, device, gloo)
            if c.count == 0:
                continue
            times = {}
            for method in ("loom", "gloo"):
                start = time.perf_counter()
                c.check(method)
                first = slowest(time.perf_counter() - start)
                # Every rank runs the same counts (they are collectives), from the slowest's time.
                warmup = max(1, min(a.warmup, int(a.seconds / 2 / max(first, 1e-9))))
                start = time.perf_counter()
                for _ in range(warmup):
                    c.run(method)
                sync()
                per_call = slowest((time.perf_counter() - start) / warmup)
                iters = max(3, min(a.iters, int(a.seconds / max(per_call, 1e-9))))
                dist.barrier(group=gloo)
                start = time.perf_counter()
                for _ in range(iters):
                    c.run(method)
                sync()
                times[method] = slowest((time.perf_counter() - start) / iters) * 1e6
            if rank == 0:
                print(f"{op},{c.bytes},{times['loom']:.1f},{times['gloo']:.1f}", flush=True)
                results.append((op, c.bytes, times["loom"], times["gloo"]))
    if rank == 0:
        for op in a.ops:
            print(f"\n#### {op}, {world} ranks ({a.gpus} GPU)\n")
            print("| bytes | loom µs | gloo staged µs | gloo staged / loom |")
            print("|---:|---:|---:|---:|")
            for o, b, lt, gt in results:
                if o == op:
                    print(f"| {human_bytes(b)} | {lt:.1f} | {gt:.1f} | {gt / lt:.2f} |")
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def main():
    a = parse_args()
    if "LOOM_HTB_RANK" in os.environ:
        return rank_main(a, int(os.environ["LOOM_HTB_RANK"]), a.nprocs)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(a.nprocs):
        env = dict(os.environ, LOOM_HTB_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(a.nprocs),
                   LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(a.nprocs))
        if rank >= a.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        procs.append(subprocess.Popen([sys.executable, __file__] + sys.argv[1:], env=env))
    # A rank that fails ends the job: its peers would wait for it until the timeout.
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.2)
    bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    for r, c in bad:
        print(f"hetero_torch_bench: rank {r} exited with {c}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
