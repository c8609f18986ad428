"""One rank of the torch backend tests: python torch_worker.py CASE WORLD RANK PORT.

Every collective runs on the "loom" group and on a Gloo group with the same inputs; results must
be equal (inputs are small integers, so float sums are exact in any order).
"""
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import loom  # registers "loom"

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16,
          torch.uint8, torch.int8]


def same(name, got, want):
    if not torch.equal(got, want):
        print(f"{name}: loom {got.flatten()[:8].tolist()} gloo {want.flatten()[:8].tolist()}",
              flush=True)
        sys.exit(1)


def value(rank, shape, dtype, salt=0):
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n) * 3 + rank * 7 + salt) % 5 + 1).to(dtype).reshape(shape)


def collectives(rank, world, gloo):
    for dtype in DTYPES:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]:
            results = []
            for group in (None, gloo):
                t = value(rank, (3, 5), dtype)
                work = dist.all_reduce(t, op=op, group=group, async_op=True)
                work.wait()
                results.append(t)
            same(f"all_reduce {dtype} {op}", *results)
        outs = []
        for group in (None, gloo):
            t = value(rank, (4,), dtype) if rank == world - 1 else torch.zeros(4, dtype=dtype)
            dist.broadcast(t, src=world - 1, group=group)
            outs.append(t)
        same(f"broadcast {dtype}", *outs)
        outs = []
        for group in (None, gloo):
            out = torch.zeros(world * 6, dtype=dtype)
            dist.all_gather_into_tensor(out, value(rank, (6,), dtype), group=group)
            outs.append(out)
        same(f"all_gather_into_tensor {dtype}", *outs)
        lists = []
        for group in (None, gloo):
            out = [torch.zeros(2, 3, dtype=dtype) for _ in range(world)]
            dist.all_gather(out, value(rank, (2, 3), dtype), group=group)
            lists.append(torch.stack(out))
        same(f"all_gather {dtype}", *lists)
        if dtype.is_floating_point or dtype in (torch.int32, torch.int64):
            outs = []
            for group in (None, gloo):
                out = torch.zeros(5, dtype=dtype)
                dist.reduce_scatter_tensor(out, value(rank, (world * 5,), dtype, 1), group=group)
                outs.append(out)
            same(f"reduce_scatter_tensor {dtype}", *outs)
            outs = []
            for group in (None, gloo):
                t = value(rank, (7,), dtype, 2)
                dist.reduce(t, dst=0, group=group)
                outs.append(t)
            if rank == 0:
                same(f"reduce {dtype}", *outs)
        outs = []
        for group in (None, gloo):
            out = torch.zeros(world * 2, dtype=dtype)
            dist.all_to_all_single(out, value(rank, (world * 2,), dtype, 3), group=group)
            outs.append(out)
        same(f"all_to_all_single {dtype}", *outs)
    # Uneven all_to_all_single: rank r sends r+1+p rows to rank p.
    outs = []
    for group in (None, gloo):
        send_splits = [rank + 1 + p for p in range(world)]
        recv_splits = [q + 1 + rank for q in range(world)]
        inp = value(rank, (sum(send_splits), 2), torch.float32)
        out = torch.zeros(sum(recv_splits), 2)
        dist.all_to_all_single(out, inp, recv_splits, send_splits, group=group)
        outs.append(out)
    same("all_to_all_single uneven", *outs)
    # Gather and scatter.
    outs = []
    for group in (None, gloo):
        lst = [torch.zeros(3) for _ in range(world)] if rank == 0 else None
        dist.gather(value(rank, (3,), torch.float32), lst, dst=0, group=group)
        outs.append(torch.stack(lst) if rank == 0 else torch.zeros(1))
    same("gather", *outs)
    outs = []
    for group in (None, gloo):
        out = torch.zeros(3)
        src = [value(q, (3,), torch.float32, 4) for q in range(world)] if rank == 0 else None
        dist.scatter(out, src, src=0, group=group)
        outs.append(out)
    same("scatter", *outs)
    # AVG and PREMUL_SUM against their definitions.
    t = value(rank, (8,), torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    want = sum(value(q, (8,), torch.float32) for q in range(world)) / world
    same("all_reduce avg", t, want)
    # Point to point with tags, out of order.
    if world >= 2:
        if rank == 0:
            dist.send(torch.full((3,), 1.0), dst=1, tag=7)
            dist.send(torch.full((2,), 2.0), dst=1, tag=8)
        elif rank == 1:
            b = torch.zeros(2)
            a = torch.zeros(3)
            dist.recv(b, src=0, tag=8)
            dist.recv(a, src=0, tag=7)
            same("recv tag 8", b, torch.full((2,), 2.0))
            same("recv tag 7", a, torch.full((3,), 1.0))
    # A sub-group.
    sub = dist.new_group(sorted({0, world - 1}), backend="loom")
    if rank in (0, world - 1):
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        want = torch.full((4,), 1.0 + world) if world > 1 else torch.full((4,), 1.0)
        same("sub-group all_reduce", t, want)
    # Futures complete (DDP comm hooks rely on them).
    fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    same("future value", fut.wait()[0], torch.full((4,), float(world)))
    dist.barrier()


def ddp(rank, world, gloo):
    """A few DDP steps on the loom group give the same parameters as on Gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        ddp_model = DDP(model, process_group=group)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
        for _ in range(4):
            x = torch.randn(8, 16, generator=gen)
            y = torch.randn(8, 4, generator=gen)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp_model(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    loom_params = train(dist.group.WORLD)
    gloo_params = train(gloo)
    for i, (a, b) in enumerate(zip(loom_params, gloo_params)):
        # Gradient averaging sums in a different order than Gloo: allow float rounding only.
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            print(f"DDP parameter {i} differs: max {float((a - b).abs().max())}", flush=True)
            sys.exit(1)
    dist.barrier()


def dtensor(rank, world, gloo):
    """DTensor redistribution and functional collectives on a DeviceMesh whose backend is loom."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import torch.distributed._functional_collectives as funcol

    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(world * 6, dtype=torch.float32).reshape(world * 2, 3)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    same("dtensor local shard", sharded.to_local(), full.chunk(world)[rank])
    replicated = sharded.redistribute(mesh, [Replicate()])
    same("dtensor Shard -> Replicate", replicated.to_local(), full)
    back = replicated.redistribute(mesh, [Shard(1)]) if 3 % world == 0 else replicated
    same("dtensor full_tensor", back.full_tensor(), full)
    summed = funcol.all_reduce(torch.full((4,), float(rank)), "sum", mesh)
    same("functional all_reduce", summed, torch.full((4,), float(sum(range(world)))))
    gathered = funcol.all_gather_tensor(torch.full((2,), float(rank)), 0, mesh)
    same("functional all_gather", gathered,
         torch.cat([torch.full((2,), float(q)) for q in range(world)]))
    dist.barrier()


def never_joins(rank, world, gloo):
    """Rank 1 is alive but never joins the all_reduce: the others raise at the group's timeout."""
    if rank == 1:
        time.sleep(15)
        os_exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(8))
    except Exception as e:  # noqa: BLE001
        waited = time.monotonic() - start
        message = str(e).splitlines()[0]
        print(f"rank {rank} raised after {waited:.1f} s: {message}", flush=True)
        os_exit(0 if "all_reduce" in message or "allreduce" in message else 1)
    print(f"rank {rank}: all_reduce succeeded without rank 1", flush=True)
    os_exit(1)


def abort(rank, world, gloo):
    """Rank 0 aborts its backend: its next op raises, and so do the peers' (no hang)."""
    if rank == 0:
        dist.group.WORLD._get_backend(torch.device("cpu")).abort()
    try:
        dist.all_reduce(torch.ones(16))
    except Exception as e:  # noqa: BLE001
        print(f"rank {rank} raised: {str(e).splitlines()[0]}", flush=True)
        os_exit(0)
    print(f"rank {rank}: all_reduce succeeded after the abort", flush=True)
    os_exit(1)


def unsupported(rank, world, gloo):
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    except Exception as e:  # noqa: BLE001
        if "does not support" not in str(e):
            print(f"unexpected message: {e}", flush=True)
            sys.exit(1)
    else:
        print("BAND was accepted", flush=True)
        sys.exit(1)
    t = torch.ones(3)
    dist.all_reduce(t)  # still usable
    same("after unsupported", t, torch.full((3,), float(world)))


def rank_exits(rank, world, gloo):
    if rank == 1:
        import os
        os._exit(3)
    time.sleep(0.3)
    try:
        dist.all_reduce(torch.ones(1024))
    except Exception as e:  # noqa: BLE001
        print(f"rank {rank} raised: {e}", flush=True)
        os_exit(0)
    print("all_reduce succeeded without rank 1", flush=True)
    os_exit(1)


def os_exit(code):
    import os
    sys.stdout.flush()
    os._exit(code)  # the process group cannot shut down cleanly with a dead peer


def main():
    case, world, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    timeout = timedelta(seconds={"rank_exits": 20, "never_joins": 3}.get(case, 120))
    dist.init_process_group("loom", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timeout)
    gloo = dist.new_group(backend="gloo")
    cases = {"collectives": collectives, "unsupported": unsupported, "rank_exits": rank_exits,
             "ddp": ddp, "abort": abort, "dtensor": dtensor, "never_joins": never_joins}
    cases[case](rank, world, gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
