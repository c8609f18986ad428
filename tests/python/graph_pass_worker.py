"""One rank of the graph pass tests:
python graph_pass_worker.py CASE WORLD RANK PORT[,PORT...] BACKEND[,BACKEND...]
runs CASE over each backend in turn, each with its own rendezvous port.

fuse: on a 2x2 (4 ranks) or 2x3 (6 ranks) CPU mesh, graphs traced with make_fx from a DTensor
S(0)S(0) -> RR redistribution and from functional collectives with views between the gathers hold
two all-gathers; after fuse_chained_allgathers they hold one, and give the same tensor bit for bit
as the original graph and as the gathered shards themselves.
train: a linear layer sharded S(0)S(0) trained under torch.compile (inductor) for a few steps with
and without the pass gives the same losses, and the pass removed a gather.
"""
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")  # ranks share a few cores
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import loom  # noqa: F401,E402  (registers "loom")
from loom.torch import passes  # noqa: E402

AG = torch.ops._c10d_functional.all_gather_into_tensor.default


def fail(msg):
    print(f"rank {dist.get_rank()}: {msg}", flush=True)
    sys.exit(1)


def gather(x, group):
    """The all-gather (on dim 0) of functional collectives, as DTensor emits it."""
    c10d = torch.ops._c10d_functional
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, group.size(), group.group_name))


def gathers(gm):
    return sum(1 for n in gm.graph.nodes if n.target is AG)


def shard(rank, dtype, rows=3):
    # Distinct per rank and per element, exact in every dtype used.
    return ((torch.arange(rows * 4).reshape(rows, 4) + 16 * rank) % 200).to(dtype)


def check(name, fn, x, mesh, want):
    """Traces `fn` twice, fuses one copy; returns a function running the checks (the pass must
    run after every trace: once a mesh has a flattened dimension, DTensor gathers over it)."""
    gm = make_fx(fn, tracing_mode="fake")(x)
    fused = make_fx(fn, tracing_mode="fake")(x)

    def run():
        removed = passes.fuse_chained_allgathers(fused, mesh)
        if gathers(gm) != 2 or gathers(fused) != 1 or removed != 1:
            fail(f"{name}: {gathers(gm)} gathers before, {gathers(fused)} after, removed "
                 f"{removed}\n{fused.graph}")
        got_orig, got_fused = gm(x), fused(x)
        if not torch.equal(got_fused, got_orig) or not torch.equal(got_fused, want):
            fail(f"{name}: fused {got_fused.flatten()[:8].tolist()} original "
                 f"{got_orig.flatten()[:8].tolist()} expected {want.flatten()[:8].tolist()}")

    return run


def fuse(rank, world):
    shape = {4: (2, 2), 6: (2, 3)}[world]
    named = init_device_mesh("cpu", shape, mesh_dim_names=("outer", "inner"))
    # No dimension names: the pass makes the flattened group with new_group (no _flatten).
    unnamed = DeviceMesh("cpu", torch.arange(world).reshape(shape))

    def redistribute(local):
        d = DTensor.from_local(local, named, [Shard(0), Shard(0)], run_check=False)
        return d.redistribute(named, [Replicate(), Replicate()]).to_local() + 0

    def with_views(local):
        y = gather(local, unnamed.get_group(1))
        y = y.t().unsqueeze(0).squeeze(0).t().view(-1, 4)
        return gather(y, unnamed.get_group(0)) + 0

    checks = []
    # 256 rows: torch 2.15's DTensor puts whole-tensor slices between the gathers there.
    for name, fn, mesh, dtype, rows in (("dtensor", redistribute, named, torch.float32, 3),
                                        ("dtensor", redistribute, named, torch.float32, 256),
                                        ("views", with_views, unnamed, torch.bfloat16, 3),
                                        ("views", with_views, unnamed, torch.int64, 3)):
        want = torch.cat([shard(r, dtype, rows) for r in range(world)])
        checks.append(check(f"{name} {dtype} {rows} rows", fn, shard(rank, dtype, rows), mesh,
                            want))
    for run in checks:
        run()


def train(rank, world):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("outer", "inner"))

    def run(with_pass):
        torch._dynamo.reset()
        gen = torch.Generator().manual_seed(0)
        weight = torch.randn(8, 6, generator=gen)
        local = weight.chunk(world)[rank].clone()  # rank (i, j) holds block 2i + j
        w = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(0), Shard(0)],
                                                  run_check=False))
        opt = torch.optim.SGD([w], lr=0.1)

        @torch.compile
        def step(x, y):
            full = w.redistribute(mesh, [Replicate(), Replicate()]).to_local()
            loss = torch.nn.functional.mse_loss(x @ full.t(), y)
            loss.backward()
            return loss

        handle = passes.enable_fuse_chained_allgathers(mesh) if with_pass else None
        losses = []
        try:
            for _ in range(2):
                x, y = torch.randn(4, 6, generator=gen), torch.randn(4, 8, generator=gen)
                opt.zero_grad()
                losses.append(step(x, y).item())
                opt.step()
        finally:
            if handle is not None:
                handle.disable()
        return losses, handle.fuse_pass.removed if handle else 0

    plain, _ = run(False)
    fused, removed = run(True)
    print(f"rank {rank} losses without the pass {plain} with it {fused}, removed {removed}",
          flush=True)
    if removed < 1 or plain != fused:
        fail("the compiled step differs with the pass, or the pass removed nothing")


def main():
    case, world, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # One process per rank runs the case over each backend in turn (torch imports once).
    for port, backend in zip(sys.argv[4].split(","), sys.argv[5].split(",")):
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        {"fuse": fuse, "train": train}[case](rank, world)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
