"""One rank of a mixed-device torch job: python torch_mixed_worker.py WORLD RANK PORT.

Rank 0 keeps its GPU; the test starts the other ranks with CUDA_VISIBLE_DEVICES="" (no GPU, as on
a CPU-only host). Every rank passes tensors on its own device to every collective of the "loom"
group, and checks them against values computed on the CPU (small integers: exact in any order).
Rank 0 also passes CPU tensors, which a mixed group's GPU rank may do.
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import loom  # noqa: F401  registers "loom"

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.uint8]


def value(rank, n, dtype, salt=0):
    return ((torch.arange(n) * 3 + rank * 7 + salt) % 5 + 1).to(dtype)


def check(name, got, want):
    if not torch.equal(got.cpu(), want):
        print(f"{name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}",
              flush=True)
        sys.exit(1)


def collectives(rank, world, dev):
    on = lambda t: t.to(dev)  # noqa: E731
    for dtype in DTYPES:
        every = [value(q, 1000, dtype) for q in range(world)]
        for op, fold in [(dist.ReduceOp.SUM, lambda a, b: a + b), (dist.ReduceOp.MAX, torch.max)]:
            want = every[0]
            for t in every[1:]:
                want = fold(want, t)
            t = on(value(rank, 1000, dtype))
            dist.all_reduce(t, op=op)
            check(f"all_reduce {dtype} {op}", t, want)
        t = on(value(rank, 300, dtype)) if rank == world - 1 else on(torch.zeros(300, dtype=dtype))
        dist.broadcast(t, src=world - 1)
        check(f"broadcast {dtype}", t, value(world - 1, 300, dtype))
        out = on(torch.zeros(world * 6, dtype=dtype))
        dist.all_gather_into_tensor(out, on(value(rank, 6, dtype)))
        check(f"all_gather_into_tensor {dtype}", out, torch.cat([value(q, 6, dtype)
                                                                 for q in range(world)]))
        outs = [on(torch.zeros(5, dtype=dtype)) for _ in range(world)]
        dist.all_gather(outs, on(value(rank, 5, dtype)))
        for q in range(world):
            check(f"all_gather {dtype} from {q}", outs[q], value(q, 5, dtype))
        full = [value(q, world * 4, dtype, 1) for q in range(world)]
        out = on(torch.zeros(4, dtype=dtype))
        dist.reduce_scatter_tensor(out, on(full[rank]))
        check(f"reduce_scatter_tensor {dtype}", out, sum(full)[rank * 4:(rank + 1) * 4].to(dtype))
        t = on(value(rank, 7, dtype, 2))
        dist.reduce(t, dst=0)
        if rank == 0:
            check(f"reduce {dtype}", t, sum(value(q, 7, dtype, 2) for q in range(world)).to(dtype))
        out = on(torch.zeros(world * 2, dtype=dtype))
        dist.all_to_all_single(out, on(value(rank, world * 2, dtype, 3)))
        want = torch.cat([value(q, world * 2, dtype, 3)[rank * 2:rank * 2 + 2]
                          for q in range(world)])
        check(f"all_to_all_single {dtype}", out, want)
    lst = [on(torch.zeros(3)) for _ in range(world)] if rank == 0 else None
    dist.gather(on(value(rank, 3, torch.float32)), lst, dst=0)
    if rank == 0:
        for q in range(world):
            check(f"gather from {q}", lst[q], value(q, 3, torch.float32))
    out = on(torch.zeros(3))
    src = [on(value(q, 3, torch.float32, 4)) for q in range(world)] if rank == 0 else None
    dist.scatter(out, src, src=0)
    check("scatter", out, value(rank, 3, torch.float32, 4))
    t = on(value(rank, 64, torch.float32))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check("all_reduce avg", t, sum(value(q, 64, torch.float32) for q in range(world)) / world)
    # Large enough to run in chunks, pipelined through pinned memory on the GPU rank.
    n = (8 << 20) // 4 + 5
    t = on(value(rank, n, torch.float32))
    dist.all_reduce(t)
    check("all_reduce 8 MiB", t, sum(value(q, n, torch.float32) for q in range(world)))


def point_to_point(rank, world, dev):
    # The GPU rank and a CPU rank, both directions, receives posted first.
    if rank in (0, 1):
        peer = 1 - rank
        got = torch.zeros(1000, device=dev)
        recv = dist.irecv(got, src=peer, tag=3)
        send = dist.isend(value(rank, 1000, torch.float32).to(dev), dst=peer, tag=3)
        send.wait()
        recv.wait()
        check(f"recv from {peer}", got, value(peer, 1000, torch.float32))


def cpu_tensors_on_the_gpu_rank(rank, world):
    t = value(rank, 100, torch.float32)  # a CPU tensor on every rank, rank 0 included
    dist.all_reduce(t)
    check("all_reduce of CPU tensors", t, sum(value(q, 100, torch.float32) for q in range(world)))
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    if objects != [{"rank": q} for q in range(world)]:
        print(f"all_gather_object: {objects}", flush=True)
        sys.exit(1)
    dist.barrier()


def main():
    world, rank, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if (dev.type == "cuda") != (rank == 0):
        print(f"rank {rank}: expected {'a GPU' if rank == 0 else 'no GPU'}, got {dev}", flush=True)
        sys.exit(1)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("loom", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    collectives(rank, world, dev)
    point_to_point(rank, world, dev)
    cpu_tensors_on_the_gpu_rank(rank, world)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"rank {rank} on {dev}: ok", flush=True)


if __name__ == "__main__":
    main()
