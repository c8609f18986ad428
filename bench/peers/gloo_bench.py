#!/usr/bin/env python3
"""torch.distributed peer of loom-bench: the same collectives on float32 CPU (or, with --device
cuda, GPU) tensors, timed the
same way (warm-up, barrier, back-to-back calls, slowest rank reported), printed in loom-bench's
--csv format so bench/tables.py can compare them.

Run under torchrun:
    torchrun --nproc-per-node 4 bench/peers/gloo_bench.py [--minbytes 1K --maxbytes 256M]
or let it spawn its own ranks:
    python3 bench/peers/gloo_bench.py -np 4
--backend loom runs the same script through Loom's torch backend (--import names the module
that registers it, if importing torch alone does not).
"""

import argparse
import datetime
import importlib
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ["allreduce", "allgather", "reducescatter", "broadcast", "alltoall"]
CSV_HEADER = ("op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong,"
              "ip_us,ip_algbw,ip_busbw,ip_wrong")
ELEMENT_BYTES = 4  # float32


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(float(text))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ops", nargs="*", default=OPS, help="subset of: " + " ".join(OPS))
    p.add_argument("--minbytes", "-b", type=parse_size, default=1 << 10)
    p.add_argument("--maxbytes", "-e", type=parse_size, default=256 << 20)
    p.add_argument("--factor", "-f", type=float, default=2.0)
    p.add_argument("--iters", "-n", type=int, default=20)
    p.add_argument("--warmup", "-w", type=int, default=5)
    p.add_argument("--root", "-r", type=int, default=0)
    p.add_argument("--backend", default="gloo", help="gloo (default), loom, or any registered")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="tensors on the CPU (default) or on GPU LOCAL_RANK")
    p.add_argument("--import", dest="import_module", default=None,
                   help="module to import before init (registers a third-party backend)")
    p.add_argument("-np", "--nprocs", type=int, default=0,
                   help="spawn this many local ranks instead of reading torchrun's env")
    args = p.parse_args(argv)
    for op in args.ops:
        if op not in OPS:
            p.error(f"unknown op {op!r}; choose from {' '.join(OPS)}")
    if args.factor <= 1.0:
        p.error("--factor must be > 1")
    return args


def sizes(args):
    s = float(args.minbytes)
    while s <= args.maxbytes * 1.0000001:
        yield int(s)
        s *= args.factor


def bus_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


class Collective:
    """One op at one size: owns its tensors so that timing touches no allocator."""

    def __init__(self, op, nbytes, rank, nranks, root):
        self.op, self.root = op, root
        total = nbytes // ELEMENT_BYTES
        if op in ("allgather", "reducescatter", "alltoall"):
            self.count = total // nranks  # per rank (per peer for alltoall)
            total = self.count * nranks
            small, big = self.count, total
        else:
            self.count = total
            small = big = total
        self.total = total  # elements in the reported size
        # Small integers: exact whatever the order, and far from inf/denormal slow paths.
        gen = ((torch.arange(big, dtype=torch.float32) + rank) % 5 - 2).to(DEVICE)
        if op == "allgather":
            self.send, self.recv = gen[:small].clone(), torch.zeros(big, device=DEVICE)
        elif op == "reducescatter":
            self.send, self.recv = gen, torch.zeros(small, device=DEVICE)
        else:
            self.send, self.recv = gen, torch.zeros(big, device=DEVICE)
        self.fallback = False

    def run(self):
        if self.op == "allreduce":
            # In place is torch's only form; copying first would time a memcpy too.
            dist.all_reduce(self.send)
        elif self.op == "allgather":
            if self.fallback:
                dist.all_gather(list(self.recv.chunk(dist.get_world_size())), self.send)
            else:
                dist.all_gather_into_tensor(self.recv, self.send)
        elif self.op == "reducescatter":
            if self.fallback:
                dist.reduce_scatter(self.recv, list(self.send.chunk(dist.get_world_size())))
            else:
                dist.reduce_scatter_tensor(self.recv, self.send)
        elif self.op == "broadcast":
            dist.broadcast(self.send, src=self.root)
        elif self.op == "alltoall":
            dist.all_to_all_single(self.recv, self.send)


def supported(op, rank, nranks, root):
    """Probes an op once; older gloo builds lack the *_tensor forms or reduce_scatter entirely.
    Every rank fails the same way, synchronously, so the group stays usable after a miss."""
    c = Collective(op, ELEMENT_BYTES * nranks, rank, nranks, root)
    for fallback in (False, True):
        c.fallback = fallback
        try:
            c.run()
            return True, fallback
        except (RuntimeError, NotImplementedError, ValueError) as e:
            error = e
            if op not in ("allgather", "reducescatter"):
                break
    if rank == 0:
        print(f"# {op}: not supported by this backend ({str(error).splitlines()[0]})",
              file=sys.stderr)
    return False, False


def bench(args, rank, nranks):
    if rank == 0:
        print(CSV_HEADER, flush=True)
    for op in args.ops:
        ok, fallback = supported(op, rank, nranks, args.root)
        if not ok:
            continue
        for nbytes in sizes(args):
            c = Collective(op, nbytes, rank, nranks, args.root)
            if c.count == 0:
                continue
            c.fallback = fallback
            for _ in range(args.warmup):
                c.run()
            sync()
            dist.barrier()
            sync()
            start = time.perf_counter()
            for _ in range(args.iters):
                c.run()
            sync()  # CUDA ops are enqueued: the time is until the GPU is done
            seconds = torch.tensor([(time.perf_counter() - start) / args.iters],
                                   dtype=torch.float64)
            seconds = seconds.to(DEVICE)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            seconds = seconds.item()
            used = c.total * ELEMENT_BYTES
            algbw = used / seconds / 1e9
            busbw = algbw * bus_factor(op, nranks)
            if rank == 0:
                redop = "sum" if op in ("allreduce", "reducescatter") else "none"
                root = args.root if op == "broadcast" else -1
                print(f"{op},{nranks},{used},{c.total},float,{redop},{root},{args.backend},"
                      f"{seconds * 1e6:.3f},{algbw:.4f},{busbw:.4f},0,nan,nan,nan,nan",
                      flush=True)


DEVICE = torch.device("cpu")


def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def worker(rank, nranks, args):
    global DEVICE
    if args.device == "cuda":
        DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) %
                              torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
    # One intra-op thread per rank, as loom-bench and MPI ranks get: otherwise gloo's local
    # reductions would borrow every core and the comparison would not be per rank.
    torch.set_num_threads(1)
    if args.import_module:
        importlib.import_module(args.import_module)
    dist.init_process_group(args.backend, rank=rank, world_size=nranks,
                            timeout=datetime.timedelta(minutes=30))
    try:
        if not 0 <= args.root < nranks:
            raise SystemExit(f"gloo_bench: root {args.root} out of range")
        bench(args, rank, nranks)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawned(rank, nranks, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank))
    worker(rank, nranks, args)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    if args.nprocs > 0:
        mp.spawn(spawned, args=(args.nprocs, args, free_port()), nprocs=args.nprocs, join=True)
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        spawned(0, 1, args, free_port())


if __name__ == "__main__":
    main()
