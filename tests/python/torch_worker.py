"""One rank of the torch backend tests: python torch_worker.py CASE WORLD RANK PORT [DEVICE].

DEVICE is cpu (default) or cuda (rank r on GPU r). Every collective runs on the "loom" group and on
a reference group (Gloo for CPU tensors, NCCL for CUDA tensors) with the same inputs; results must
be equal (inputs are small integers, so float sums are exact in any order).
"""
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import loom  # registers "loom"

DEV = torch.device("cpu")  # set by main()
PORT = 0  # the rendezvous port, set by main(): unique to one run, it names the run's files

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16,
          torch.uint8, torch.int8]


def same(name, got, want):
    if not torch.equal(got, want):
        print(f"{name} on {DEV}: loom {got.flatten()[:8].tolist()} "
              f"reference {want.flatten()[:8].tolist()}", flush=True)
        sys.exit(1)


def value(rank, shape, dtype, salt=0):
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n) * 3 + rank * 7 + salt) % 5 + 1).to(dtype).reshape(shape).to(DEV)


def zeros(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype, device=DEV)


def full(shape, fill):
    return torch.full(shape, fill, device=DEV)


def collectives(rank, world, ref):
    for dtype in DTYPES:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]:
            results = []
            for group in (None, ref):
                t = value(rank, (3, 5), dtype)
                work = dist.all_reduce(t, op=op, group=group, async_op=True)
                work.wait()
                results.append(t)
            same(f"all_reduce {dtype} {op}", *results)
        outs = []
        for group in (None, ref):
            t = value(rank, (4,), dtype) if rank == world - 1 else zeros(4, dtype=dtype)
            dist.broadcast(t, src=world - 1, group=group)
            outs.append(t)
        same(f"broadcast {dtype}", *outs)
        outs = []
        for group in (None, ref):
            out = zeros(world * 6, dtype=dtype)
            dist.all_gather_into_tensor(out, value(rank, (6,), dtype), group=group)
            outs.append(out)
        same(f"all_gather_into_tensor {dtype}", *outs)
        lists = []
        for group in (None, ref):
            out = [zeros(2, 3, dtype=dtype) for _ in range(world)]
            dist.all_gather(out, value(rank, (2, 3), dtype), group=group)
            lists.append(torch.stack(out))
        same(f"all_gather {dtype}", *lists)
        if dtype.is_floating_point or dtype in (torch.int32, torch.int64):
            outs = []
            for group in (None, ref):
                out = zeros(5, dtype=dtype)
                dist.reduce_scatter_tensor(out, value(rank, (world * 5,), dtype, 1), group=group)
                outs.append(out)
            same(f"reduce_scatter_tensor {dtype}", *outs)
            outs = []
            for group in (None, ref):
                t = value(rank, (7,), dtype, 2)
                dist.reduce(t, dst=0, group=group)
                outs.append(t)
            if rank == 0:
                same(f"reduce {dtype}", *outs)
        outs = []
        for group in (None, ref):
            out = zeros(world * 2, dtype=dtype)
            dist.all_to_all_single(out, value(rank, (world * 2,), dtype, 3), group=group)
            outs.append(out)
        same(f"all_to_all_single {dtype}", *outs)
    # Uneven all_to_all_single: rank r sends r+1+p rows to rank p.
    outs = []
    for group in (None, ref):
        send_splits = [rank + 1 + p for p in range(world)]
        recv_splits = [q + 1 + rank for q in range(world)]
        inp = value(rank, (sum(send_splits), 2), torch.float32)
        out = zeros(sum(recv_splits), 2)
        dist.all_to_all_single(out, inp, recv_splits, send_splits, group=group)
        outs.append(out)
    same("all_to_all_single uneven", *outs)
    # Gather and scatter.
    outs = []
    for group in (None, ref):
        lst = [zeros(3) for _ in range(world)] if rank == 0 else None
        dist.gather(value(rank, (3,), torch.float32), lst, dst=0, group=group)
        outs.append(torch.stack(lst) if rank == 0 else zeros(1))
    same("gather", *outs)
    outs = []
    for group in (None, ref):
        out = zeros(3)
        src = [value(q, (3,), torch.float32, 4) for q in range(world)] if rank == 0 else None
        dist.scatter(out, src, src=0, group=group)
        outs.append(out)
    same("scatter", *outs)
    # AVG and PREMUL_SUM against their definitions.
    t = value(rank, (8,), torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    # The definition on the CPU: CUDA's tensor / scalar multiplies by the reciprocal, which
    # rounds differently from a true division.
    want = sum(value(q, (8,), torch.float32).cpu() for q in range(world)) / world
    same("all_reduce avg", t.cpu(), want)
    # Point to point with tags, out of order (CUDA communicators match in issue order and ignore
    # tags, as NCCL does: in order there).
    if world >= 2 and DEV.type == "cuda":
        if rank == 0:
            dist.send(full((3,), 1.0), dst=1, tag=7)
            dist.send(full((2,), 2.0), dst=1, tag=8)
        elif rank == 1:
            a, b = zeros(3), zeros(2)
            dist.recv(a, src=0, tag=7)
            dist.recv(b, src=0, tag=8)
            same("recv 1", a, full((3,), 1.0))
            same("recv 2", b, full((2,), 2.0))
    elif world >= 2:
        if rank == 0:
            dist.send(full((3,), 1.0), dst=1, tag=7)
            dist.send(full((2,), 2.0), dst=1, tag=8)
        elif rank == 1:
            b = zeros(2)
            a = zeros(3)
            dist.recv(b, src=0, tag=8)
            dist.recv(a, src=0, tag=7)
            same("recv tag 8", b, full((2,), 2.0))
            same("recv tag 7", a, full((3,), 1.0))
    # A sub-group.
    sub = dist.new_group(sorted({0, world - 1}), backend="loom")
    if rank in (0, world - 1):
        t = full((4,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        want = full((4,), 1.0 + world) if world > 1 else full((4,), 1.0)
        same("sub-group all_reduce", t, want)
    # Futures complete (DDP comm hooks rely on them).
    fut = dist.all_reduce(torch.ones(4, device=DEV), async_op=True).get_future()
    same("future value", fut.wait()[0], full((4,), float(world)))
    dist.barrier()


def ddp(rank, world, ref):
    """A few DDP steps on the loom group give the same parameters as on Gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).to(DEV)
        ddp_model = DDP(model, process_group=group,
                        device_ids=[DEV.index] if DEV.type == "cuda" else None)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
        for _ in range(4):
            x = torch.randn(8, 16, generator=gen).to(DEV)
            y = torch.randn(8, 4, generator=gen).to(DEV)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp_model(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    loom_params = train(dist.group.WORLD)
    ref_params = train(ref)
    for i, (a, b) in enumerate(zip(loom_params, ref_params)):
        # Gradient averaging sums in another order than the reference: float rounding only.
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            print(f"DDP parameter {i} differs: max {float((a - b).abs().max())}", flush=True)
            sys.exit(1)
    dist.barrier()


def dtensor(rank, world, ref):
    """DTensor redistribution and functional collectives on a DeviceMesh whose backend is loom."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import torch.distributed._functional_collectives as funcol

    mesh = init_device_mesh(DEV.type, (world,))
    whole = torch.arange(world * 6, dtype=torch.float32, device=DEV).reshape(world * 2, 3)
    sharded = distribute_tensor(whole, mesh, [Shard(0)])
    same("dtensor local shard", sharded.to_local(), whole.chunk(world)[rank])
    replicated = sharded.redistribute(mesh, [Replicate()])
    same("dtensor Shard -> Replicate", replicated.to_local(), whole)
    back = replicated.redistribute(mesh, [Shard(1)]) if 3 % world == 0 else replicated
    same("dtensor full_tensor", back.full_tensor(), whole)
    summed = funcol.all_reduce(full((4,), float(rank)), "sum", mesh)
    same("functional all_reduce", summed, full((4,), float(sum(range(world)))))
    gathered = funcol.all_gather_tensor(full((2,), float(rank)), 0, mesh)
    same("functional all_gather", gathered,
         torch.cat([full((2,), float(q)) for q in range(world)]))
    dist.barrier()


def warm_up():
    """One all_reduce everywhere, finished: every communicator of the group is up."""
    dist.all_reduce(torch.ones(8, device=DEV))
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def until_raises(step, tries=3):
    """Runs step() until it raises; returns the exception (None if it never did). CUDA ops are
    enqueued: a failure shows at the device sync's end, in the next op (or in wait() itself under
    LOOM_TORCH_BLOCKING_WAIT=1)."""
    for _ in range(tries):
        try:
            step()
            if DEV.type == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            return e
    return None


def never_joins(rank, world, ref):
    """Rank 1 is alive but never joins the all_reduce: the others raise at the group's timeout.
    Rank 1 stays alive until each of them has said (a file per rank) that it raised, at most 60 s."""
    import os
    import tempfile
    warm_up()
    said = [os.path.join(tempfile.gettempdir(), f"loom-never-joins-{PORT}-{r}")
            for r in range(world)]
    if rank == 1:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                os.path.exists(f) for r, f in enumerate(said) if r != 1):
            time.sleep(0.1)
        for f in said:
            if os.path.exists(f):
                os.unlink(f)
        os_exit(0)
    start = time.monotonic()
    error = until_raises(lambda: dist.all_reduce(torch.ones(8, device=DEV)))
    open(said[rank], "w").close()
    if error is None:
        print(f"rank {rank}: all_reduce succeeded without rank 1", flush=True)
        os_exit(1)
    message = str(error).splitlines()[0]
    print(f"rank {rank} raised after {time.monotonic() - start:.1f} s: {message}", flush=True)
    os_exit(0 if "all_reduce" in message or "allreduce" in message else 1)


def abort(rank, world, ref):
    """Rank 0 aborts its backend: its next op raises, and so do the peers' (no hang)."""
    warm_up()
    if rank == 0:
        dist.group.WORLD._get_backend(DEV).abort()
    start = time.monotonic()
    error = until_raises(lambda: dist.all_reduce(torch.ones(16, device=DEV)))
    if error is None:
        print(f"rank {rank}: all_reduce succeeded after the abort", flush=True)
        os_exit(1)
    print(f"rank {rank} raised after {time.monotonic() - start:.1f} s: "
          f"{str(error).splitlines()[0]}", flush=True)
    os_exit(0)


def unsupported(rank, world, ref):
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32, device=DEV), op=dist.ReduceOp.BAND)
    except Exception as e:  # noqa: BLE001
        if "does not support" not in str(e):
            print(f"unexpected message: {e}", flush=True)
            sys.exit(1)
    else:
        print("BAND was accepted", flush=True)
        sys.exit(1)
    t = torch.ones(3, device=DEV)
    dist.all_reduce(t)  # still usable
    same("after unsupported", t, full((3,), float(world)))


def rank_exits(rank, world, ref):
    warm_up()
    if rank == 1:
        import os
        os._exit(3)
    time.sleep(0.3)
    error = until_raises(lambda: dist.all_reduce(torch.ones(1024, device=DEV)))
    if error is None:
        print("all_reduce succeeded without rank 1", flush=True)
        os_exit(1)
    print(f"rank {rank} raised: {error}", flush=True)
    os_exit(0)


def split(rank, world, ref):
    """dist.split_group splits the loom communicators (no new rendezvous)."""
    halves = [list(range(0, max(world // 2, 1))), list(range(max(world // 2, 1), world))]
    halves = [h for h in halves if h]
    sub = dist.split_group(split_ranks=halves)
    mine = next(h for h in halves if rank in h)
    if dist.get_rank(sub) != mine.index(rank) or dist.get_world_size(sub) != len(mine):
        print(f"split: rank {dist.get_rank(sub)} of {dist.get_world_size(sub)}", flush=True)
        sys.exit(1)
    for device in ["cpu"] + (["cuda"] if DEV.type == "cuda" else []):
        t = torch.full((4,), float(rank + 1), device=DEV if device == "cuda" else "cpu")
        dist.all_reduce(t, group=sub)
        same(f"split all_reduce ({device})", t.cpu(), torch.full((4,), float(sum(mine) + len(mine))))
    dist.barrier()


def fsdp(rank, world, ref):
    """FSDP2 (fully_shard) training a small transformer: Loom's custom all-gather/reduce-scatter on
    a loom mesh vs the reference backend's default collectives; per-step losses must agree."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard
    import loom.torch

    def train(mesh, custom):
        torch.manual_seed(0)
        layers = [torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
                  for _ in range(2)]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 16)).to(DEV)
        modules = [fully_shard(layer, mesh=mesh) for layer in layers]
        modules.append(fully_shard(model, mesh=mesh))
        if custom:
            for m in modules:
                m.set_custom_all_gather(loom.torch.AllGather())
                m.set_custom_reduce_scatter(loom.torch.ReduceScatter())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
        losses = []
        for _ in range(5):
            x = torch.randn(4, 8, 64, generator=gen).to(DEV)
            y = torch.randn(4, 8, 16, generator=gen).to(DEV)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    ref_losses = train(DeviceMesh.from_group(ref, DEV.type), custom=False)
    loom_losses = train(init_device_mesh(DEV.type, (world,)), custom=True)
    diff = max(abs(a - b) for a, b in zip(loom_losses, ref_losses))
    print(f"rank {rank} fsdp losses loom {loom_losses} reference {ref_losses} "
          f"max difference {diff:.3g} identical {loom_losses == ref_losses}", flush=True)
    if diff > 1e-5 * max(abs(v) for v in ref_losses):
        sys.exit(1)
    dist.barrier()


def registered_segments(rank, world, ref):
    """LOOM_TORCH_REGISTER_SEGMENTS=1: collectives on tensors in registered allocator segments,
    checked against values computed here (no reference group: ranks may share one GPU, which
    NCCL refuses). Segments come and go between rounds (empty_cache, a large new tensor), so
    registrations are made and withdrawn while the group runs."""
    for round_ in range(3):
        for dtype in (torch.float32, torch.bfloat16):
            for n in (1000, 300_000):
                def sum_of(shape, lo=0, hi=None):
                    return sum(value(q, shape, torch.float64)[lo:hi] for q in range(world))
                t = value(rank, (n,), dtype)
                dist.all_reduce(t)
                same(f"all_reduce {dtype} {n}", t, sum_of((n,)).to(dtype))
                out = zeros(world * n, dtype=dtype)
                dist.all_gather_into_tensor(out, value(rank, (n,), dtype))
                same(f"all_gather_into_tensor {dtype} {n}", out,
                     torch.cat([value(q, (n,), dtype) for q in range(world)]))
                out = zeros(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, value(rank, (world * n,), dtype))
                same(f"reduce_scatter_tensor {dtype} {n}", out,
                     sum_of((world * n,), rank * n, (rank + 1) * n).to(dtype))
                out = zeros(world * n, dtype=dtype)
                dist.all_to_all_single(out, value(rank, (world * n,), dtype, salt=1))
                same(f"all_to_all_single {dtype} {n}", out,
                     torch.cat([value(q, (world * n,), dtype, salt=1)[rank * n:(rank + 1) * n]
                                for q in range(world)]))
        torch.cuda.synchronize()
        print(f"round {round_}: calls checked", flush=True)
        torch.cuda.empty_cache()  # frees the cached segments: deregistered
        print(f"round {round_}: cache emptied", flush=True)
        big = torch.ones(64 << 20, device=DEV)  # a new segment: registered
        torch.cuda.synchronize()
        print(f"round {round_}: new segment", flush=True)
        dist.all_reduce(big)
        same(f"all_reduce of a new segment, round {round_}", big,
             torch.full_like(big, float(world)))
        del big
    print("registered_segments ok", flush=True)


def os_exit(code):
    import os
    sys.stdout.flush()
    os._exit(code)  # the process group cannot shut down cleanly with a dead peer


def plans(rank, world, ref):
    """Execution plans reach torch unchanged: with LOOM_PLAN_DIR (and perhaps LOOM_ALGO) set by
    the test, all_reduce on the "loom" group equals the sum (or maximum) of every rank's values
    computed here (small integers: exact in every order; no reference group, so ranks may share a
    GPU), and this rank's flight record shows that LOOM_TEST_PLAN ("plan:NAME") ran every one."""
    import json
    import os
    import pathlib
    name = os.environ["LOOM_TEST_PLAN"]
    calls = 0
    for dtype in (torch.float32, torch.int32, torch.bfloat16):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            t = value(rank, (1001,), dtype)  # odd: chunks of unequal sizes
            dist.all_reduce(t, op=op)
            every = torch.stack([value(q, (1001,), dtype) for q in range(world)])
            want = every.sum(0).to(dtype) if op == dist.ReduceOp.SUM else every.max(0).values
            same(f"all_reduce {dtype} {op} by {name}", t, want)
            calls += 1
    out = pathlib.Path(os.environ["LOOM_TEST_FLIGHT_DIR"]) / f"r{rank}"
    out.mkdir(parents=True)
    loom.dump_flight(str(out))
    records = [json.loads(f.read_text()) for f in out.glob("*.json")]
    ran = [c for r in records for c in r["calls"]
           if c["op"] == "allreduce" and c["count"] == 1001]
    if len(ran) != calls or any(c["algorithm"] != name for c in ran):
        print(f"rank {rank}: the flight record's allreduces of 1001 elements: "
              f"{[(c['algorithm'], c['state']) for c in ran]}, not {calls} by {name}", flush=True)
        sys.exit(1)


def main():
    global DEV, PORT
    case, world, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    PORT = port
    device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    if device == "cuda":
        DEV = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(DEV)
        if case == "never_joins":
            import os
            os.environ["LOOM_TORCH_BLOCKING_WAIT"] = "1"  # wait() itself raises at the timeout
    timeout = timedelta(seconds={"rank_exits": 20, "never_joins": 5, "abort": 20,
                                 "registered_segments": 30}.get(case, 120))
    dist.init_process_group("loom", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timeout,
                            device_id=DEV if case == "split" and DEV.type == "cuda" else None)
    # No reference group for split: with device_id bound, torch 2.11's new_group(backend="nccl")
    # tries to split the NCCL group from loom's communicator (a torch limitation).
    ref = None if case in ("split", "registered_segments", "plans") else dist.new_group(
        backend="nccl" if DEV.type == "cuda" else "gloo")
    cases = {"collectives": collectives, "unsupported": unsupported, "rank_exits": rank_exits,
             "ddp": ddp, "abort": abort, "dtensor": dtensor, "never_joins": never_joins,
             "split": split, "fsdp": fsdp, "registered_segments": registered_segments,
             "plans": plans}
    cases[case](rank, world, ref)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
