"""One rank of the loomemu torch tests: python torch_emu_worker.py CASE WORLD RANK PORT.

Tensors live on "loomemu", the emulated accelerator as torch's PrivateUse1 device (loom.emu): a
device that is neither the CPU nor CUDA, whose memory the host cannot read. Every op runs on the
"loom" group with loomemu tensors and on a Gloo group with the same values on the CPU; results
must be bit-equal. CASE mixed: ranks in LOOM_TEST_CPU_RANKS have the CPU as home device
(LOOM_TORCH_HOME_DEVICE=cpu), the others loomemu, in one heterogeneous communicator.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import loom.emu  # noqa: F401  torch's "loomemu" device, served by "loom"

EMU = torch.device("loomemu", 0)  # set by main(): this rank's device
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16,
          torch.uint8, torch.int8]


def fail(message):
    print(message, flush=True)
    sys.exit(1)


def same(name, got, want):
    got = got.cpu()
    if got.dtype != want.dtype or not torch.equal(got, want):
        fail(f"{name}: loomemu {got.flatten()[:8].tolist()} gloo {want.flatten()[:8].tolist()}")


def value(rank, n, dtype, salt=0):
    return ((torch.arange(n) * 3 + rank * 7 + salt) % 5 + 1).to(dtype)


def both(op, make, ref):
    """Runs op(tensors, group) on loomemu copies of make() over "loom" and on CPU ones over
    Gloo; returns (the loomemu tensors moved back to the CPU, the CPU ones)."""
    host = make()
    dev = [t.to(EMU) for t in host]
    op(dev, None)
    op(host, ref)
    return [t.cpu() for t in dev], host


def collectives(rank, world, ref):
    for dtype in DTYPES:
        n = 1000 + rank * 0  # the same count on every rank
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
        if dtype.is_floating_point:
            ops.append(dist.ReduceOp.AVG)
        for red in ops:
            got, want = both(lambda ts, g: dist.all_reduce(ts[0], op=red, group=g),
                             lambda: [value(rank, n, dtype)], ref)
            same(f"all_reduce {dtype} {red}", got[0], want[0])
        got, want = both(lambda ts, g: dist.broadcast(ts[0], src=world - 1, group=g),
                         lambda: [value(rank, 301, dtype)], ref)
        same(f"broadcast {dtype}", got[0], want[0])
        got, want = both(lambda ts, g: dist.reduce(ts[0], dst=1 % world, group=g),
                         lambda: [value(rank, 77, dtype, 2)], ref)
        if rank == 1 % world:
            same(f"reduce {dtype}", got[0], want[0])
        got, want = both(lambda ts, g: dist.all_gather_into_tensor(ts[0], ts[1], group=g),
                         lambda: [torch.zeros(world * 6, dtype=dtype), value(rank, 6, dtype)], ref)
        same(f"all_gather_into_tensor {dtype}", got[0], want[0])
        got, want = both(lambda ts, g: dist.reduce_scatter_tensor(ts[0], ts[1], group=g),
                         lambda: [torch.zeros(5, dtype=dtype), value(rank, world * 5, dtype, 1)],
                         ref)
        same(f"reduce_scatter_tensor {dtype}", got[0], want[0])
        got, want = both(lambda ts, g: dist.all_to_all_single(ts[0], ts[1], group=g),
                         lambda: [torch.zeros(world * 3, dtype=dtype),
                                  value(rank, world * 3, dtype, 3)], ref)
        same(f"all_to_all_single {dtype}", got[0], want[0])
    lists(rank, world, ref)


def lists(rank, world, ref):
    """The list forms: all_gather, reduce_scatter, all_to_all, gather, scatter."""
    got, want = both(lambda ts, g: dist.all_gather(ts[:world], ts[world], group=g),
                     lambda: [torch.zeros(4) for _ in range(world)] + [value(rank, 4,
                                                                            torch.float32)],
                     ref)
    for q in range(world):
        same(f"all_gather from {q}", got[q], want[q])
    got, want = both(lambda ts, g: dist.reduce_scatter(ts[0], ts[1:], group=g),
                     lambda: [torch.zeros(3)] + [value(rank, 3, torch.float32, q)
                                                 for q in range(world)], ref)
    same("reduce_scatter", got[0], want[0])
    got, want = both(lambda ts, g: dist.all_to_all(ts[:world], ts[world:], group=g),
                     lambda: [torch.zeros(2) for _ in range(world)] +
                     [value(rank, 2, torch.float32, q) for q in range(world)], ref)
    for q in range(world):
        same(f"all_to_all from {q}", got[q], want[q])
    root = world - 1
    got, want = both(lambda ts, g: dist.gather(ts[0], ts[1:] if rank == root else None,
                                               dst=root, group=g),
                     lambda: [value(rank, 3, torch.int64)] + [torch.zeros(3, dtype=torch.int64)
                                                              for _ in range(world)], ref)
    if rank == root:
        for q in range(world):
            same(f"gather from {q}", got[1 + q], want[1 + q])
    got, want = both(lambda ts, g: dist.scatter(ts[0], ts[1:] if rank == 0 else None, src=0,
                                                group=g),
                     lambda: [torch.zeros(3)] + [value(q, 3, torch.float32, 4)
                                                 for q in range(world)], ref)
    same("scatter", got[0], want[0])


def point_to_point(rank, world, ref):
    """Sends and receives in a ring (rank 0 sends first: on a device they run in issue order on
    Loom's stream, as NCCL's do), and a batch_isend_irecv in any order."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.zeros(1001, dtype=torch.bfloat16, device=EMU)
    payload = value(rank, 1001, torch.bfloat16).to(EMU)
    if rank == 0:
        works = [dist.isend(payload, dst=nxt, tag=5), dist.irecv(got, src=prv, tag=5)]
    else:
        works = [dist.irecv(got, src=prv, tag=5), dist.isend(payload, dst=nxt, tag=5)]
    for work in works:
        work.wait()
    same(f"recv from {prv}", got, value(prv, 1001, torch.bfloat16))
    got = torch.zeros(64, device=EMU)
    ops = [dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend,
                                                        value(rank, 64, torch.float32).to(EMU),
                                                        nxt)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    same(f"batch recv from {prv}", got, value(prv, 64, torch.float32))
    # Blocking send/recv between two ranks.
    if rank in (0, 1):
        t = value(rank, 17, torch.int32).to(EMU)
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
            same("recv from 0", t, value(0, 17, torch.int32))
    # A future completes on loom's stream (DDP comm hooks chain on it).
    fut = dist.all_reduce(torch.ones(4, device=EMU), async_op=True).get_future()
    same("future value", fut.wait()[0], torch.full((4,), float(world)))
    dist.barrier()


def ddp(rank, world, ref):
    """DDP steps with the model on loomemu over "loom" and on the CPU over Gloo: the same
    parameters, bit for bit (2 ranks: a sum of two is the same in any order)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(device, group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).to(device)
        ddp_model = DDP(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
        for _ in range(3):
            x = torch.randn(8, 16, generator=gen).to(device)
            y = torch.randn(8, 4, generator=gen).to(device)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp_model(x), y).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    for i, (a, b) in enumerate(zip(train(EMU, dist.group.WORLD), train("cpu", ref))):
        same(f"DDP parameter {i}", a, b)
    dist.barrier()


def fsdp(rank, world, ref):
    """FSDP2 (fully_shard, torch's own all-gathers and reduce-scatters) on a loomemu device mesh
    over "loom" and on a CPU mesh over Gloo: the same losses and parameters, bit for bit."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def train(mesh, device):
        torch.manual_seed(0)
        layers = [torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(),
                                      torch.nn.Linear(48, 32)) for _ in range(2)]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(32, 8)).to(device)
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + rank)
        losses = []
        for _ in range(3):
            x = torch.randn(4, 32, generator=gen).to(device)
            y = torch.randn(4, 8, generator=gen).to(device)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        return torch.stack(losses), [p.full_tensor().detach().cpu() for p in model.parameters()]

    emu_losses, emu_params = train(init_device_mesh("loomemu", (world,)), EMU)
    cpu_losses, cpu_params = train(DeviceMesh.from_group(ref, "cpu"), "cpu")
    same("FSDP2 losses", emu_losses, cpu_losses)
    for i, (a, b) in enumerate(zip(emu_params, cpu_params)):
        same(f"FSDP2 parameter {i}", a, b)
    dist.barrier()


def mixed(rank, world, ref):
    """Ranks with different home devices pass tensors on their own: one heterogeneous
    communicator (CPU ranks and loomemu ranks)."""
    if os.environ.get("LOOM_TORCH_HOME_DEVICE") == "cpu":
        dev = torch.device("cpu")
    elif torch.cuda.is_available():  # a GPU rank (the test hides GPUs from the others)
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
    else:
        dev = EMU
    for dtype in (torch.float32, torch.int64):
        t = value(rank, 1000, dtype).to(dev)
        dist.all_reduce(t)
        same(f"mixed all_reduce {dtype}", t, sum(value(q, 1000, dtype) for q in range(world)))
        out = torch.zeros(world * 6, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, value(rank, 6, dtype).to(dev))
        same(f"mixed all_gather {dtype}", out, torch.cat([value(q, 6, dtype)
                                                          for q in range(world)]))
        t = value(rank, 300, dtype).to(dev)
        dist.broadcast(t, src=world - 1)
        same(f"mixed broadcast {dtype}", t, value(world - 1, 300, dtype))
        out = torch.zeros(4, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, value(rank, world * 4, dtype, 1).to(dev))
        full = sum(value(q, world * 4, dtype, 1) for q in range(world))
        same(f"mixed reduce_scatter {dtype}", out, full[rank * 4:(rank + 1) * 4])
    if rank in (0, 1):
        got = torch.zeros(100, device=dev)
        recv = dist.irecv(got, src=1 - rank)
        dist.isend(value(rank, 100, torch.float32).to(dev), dst=1 - rank).wait()
        recv.wait()
        same("mixed recv", got, value(1 - rank, 100, torch.float32))
    dist.barrier()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"rank {rank} on {dev.type}: ok", flush=True)


def rank_exits(rank, world, ref):
    """The last rank exits after one op; the others' next op raises (blocking wait) naming the
    failure, within the timeout, instead of hanging."""
    t = torch.ones(1000, device=EMU)
    dist.all_reduce(t)
    same("all_reduce before the exit", t, torch.full((1000,), float(world)))
    if rank == world - 1:
        sys.stdout.flush()
        os._exit(0)  # no shutdown: as a crashed rank
    try:
        dist.all_reduce(torch.ones(1000, device=EMU))  # waits, LOOM_TORCH_BLOCKING_WAIT=1
    except RuntimeError as e:
        print(f"rank {rank}: raised {e}", flush=True)
        print(f"rank {rank}: rank_exits ok", flush=True)
        os._exit(0)  # the group cannot shut down cleanly with a dead peer
    fail("the op after a peer exited did not raise")


def default_backend(rank, world, ref):
    """init_process_group() without a backend on a loomemu rank: torch's default for its
    accelerator, which loom.emu made "loom"."""
    config = dist.get_backend_config()
    if config != "loomemu:loom":
        fail(f"the group's backends are {config}, not loomemu:loom")
    t = torch.ones(8, device=EMU)
    dist.all_reduce(t)
    same("all_reduce on the default backend", t, torch.full((8,), float(world)))


def main():
    global EMU
    case, world, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if case == "mixed" and str(rank) in os.environ.get("LOOM_TEST_CPU_RANKS", "").split(","):
        os.environ["LOOM_TORCH_HOME_DEVICE"] = "cpu"
    EMU = torch.device("loomemu", rank % torch.loomemu.device_count())
    torch.loomemu.set_device(EMU)
    if case == "rank_exits":
        os.environ["LOOM_TORCH_BLOCKING_WAIT"] = "1"
    dist.init_process_group(None if case == "default_backend" else "loom",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world,
                            timeout=timedelta(seconds=30 if case == "rank_exits" else 120))
    ref = None if case in ("mixed", "rank_exits", "default_backend") else dist.new_group(
        backend="gloo")
    {"collectives": collectives, "point_to_point": point_to_point, "ddp": ddp, "fsdp": fsdp,
     "mixed": mixed, "rank_exits": rank_exits, "default_backend": default_backend}[case](
        rank, world, ref)
    dist.destroy_process_group()
    print(f"rank {rank}: {case} ok", flush=True)


if __name__ == "__main__":
    main()
