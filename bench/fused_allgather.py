"""Chained vs fused all-gather (loom.torch.passes.fuse_chained_allgathers) on CPU tensors.

    torchrun --nproc-per-node=4 bench/fused_allgather.py [--backend loom] [--mesh 2x2]
             [--min-bytes 64K] [--max-bytes 64M] [--reps 5] [--csv out.csv]

Per size (bytes of the whole gathered float32 array): the graph make_fx traces from a DTensor
S(0)S(0) -> Replicate redistribution (two all-gathers, one per mesh dimension) and the same graph
after the pass (one all-gather on the flattened group), timed back to back, interleaved, `reps`
rounds of a size-dependent number of calls each; a round's time is the slowest rank's; the table
gives the median round (µs per call) and the fused/chained speedup. One intra-op thread per rank.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.fx.experimental.proxy_tensor import make_fx

import loom  # noqa: F401  (registers "loom")
from loom.torch import passes


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def label(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n // div} {unit}"
    return f"{n} B"


def timed(fn, x, calls):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    took = torch.tensor([(time.perf_counter() - start) / calls])
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return took.item() * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="loom")
    ap.add_argument("--mesh", default="2x2")
    ap.add_argument("--min-bytes", default="64K")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--csv")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    shape = tuple(int(v) for v in args.mesh.split("x"))
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("outer", "inner"))
    world, rank = dist.get_world_size(), dist.get_rank()

    def gather(local):
        d = DTensor.from_local(local, mesh, [Shard(0), Shard(0)], run_check=False)
        return d.redistribute(mesh, [Replicate(), Replicate()]).to_local()

    # Every graph is traced before the pass runs: once the mesh has a flattened dimension (the
    # pass makes it), torch's DTensor gathers over it itself.
    sizes, size = [], parse_size(args.min_bytes)
    while size <= parse_size(args.max_bytes):
        sizes.append(size)
        size *= 4
    inputs = [torch.full((size // 4 // world // 256, 256), float(rank)) for size in sizes]
    graphs = [(make_fx(gather, tracing_mode="fake")(x), make_fx(gather, tracing_mode="fake")(x))
              for x in inputs]
    rows = []
    for size, x, (chained, fused) in zip(sizes, inputs, graphs):
        if passes.fuse_chained_allgathers(fused, mesh) != 1:
            raise SystemExit("the pass did not fuse the chain")
        if not torch.equal(chained(x), fused(x)):
            raise SystemExit("fused and chained results differ")
        calls = max(3, min(200, (256 << 20) // (size * 4)))
        times = {"chained": [], "fused": []}
        for _ in range(args.reps):
            for name, fn in (("chained", chained), ("fused", fused)):
                times[name].append(timed(fn, x, calls))
        c, f = statistics.median(times["chained"]), statistics.median(times["fused"])
        rows.append((size, c, f))
        if rank == 0:
            print(f"{label(size):>8}  chained {c:10.1f} us  fused {f:10.1f} us  {c / f:5.2f}x",
                  flush=True)
    if rank == 0:
        print("\n| size | chained (µs) | fused (µs) | speedup |\n|---:|---:|---:|---:|")
        for size, c, f in rows:
            print(f"| {label(size)} | {c:.1f} | {f:.1f} | {c / f:.2f}x |")
        if args.csv:
            with open(args.csv, "w") as out:
                out.write("bytes,chained_us,fused_us\n")
                for size, c, f in rows:
                    out.write(f"{size},{c:.1f},{f:.1f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
