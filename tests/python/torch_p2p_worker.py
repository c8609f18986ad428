"""One rank of the torch backend's point-to-point and pipelining tests:
python torch_p2p_worker.py CASE WORLD RANK PORT [DEVICE].

Cases: "orders" (irecv before isend on every rank, batch_isend_irecv in any order, rings, tags,
receives from any source, allgather_coalesced, sparse and complex allreduce, checked against Gloo
where Gloo has the op), "stress" (random orders of isend/irecv and batches across the ranks, sizes
0 to 64 MiB, tags, bit for bit; LOOM_P2P_STRESS_ITERS iterations), "pipeline" (ScheduleGPipe and
Schedule1F1B over one stage per rank train with the same losses and weights on loom as on Gloo).
DEVICE is cpu (default) or cuda (rank r on GPU r % count: ranks may share a GPU). On CUDA, as on
NCCL, sends and receives between two ranks match in posting order whatever their tags, and only
the ops of one batch (a group) may be posted in any order: the stress keeps each pair's order and
posts every iteration as one batch_isend_irecv.
"""
import os
import random
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import loom  # noqa: F401  registers "loom"

DEV = torch.device("cpu")


def fail(message):
    print(message, flush=True)
    sys.exit(1)


def pattern(n, seed, dtype=torch.int32):
    """n distinct-looking values of dtype; the same for the same seed on every rank."""
    x = torch.arange(n, dtype=torch.int64) * 2654435761 + seed * 97531
    return (x % 2147483629).to(dtype).to(DEV)


def wait_all(works):
    for w in works:
        if w is not None:
            w.wait()


def orders(rank, world, ref):
    n = (1 << 20) + 3  # beyond Loom's channel buffers: a send finishes only while its receive runs
    peers = [p for p in range(world) if p != rank]
    # irecv before isend on every rank, to every peer, with tags.
    for tag in (0, 7):
        got = {p: torch.zeros(n, dtype=torch.int32, device=DEV) for p in peers}
        works = [dist.irecv(got[p], src=p, tag=tag) for p in peers]
        works += [dist.isend(pattern(n, rank * 10 + p + tag), dst=p, tag=tag) for p in peers]
        wait_all(works)
        for p in peers:
            if not torch.equal(got[p], pattern(n, p * 10 + rank + tag)):
                fail(f"irecv from {p} tag {tag} differs")
    # batch_isend_irecv with receives first, on loom and on Gloo.
    for group in (None, ref):
        ops, got = [], {}
        for p in peers:
            got[p] = torch.zeros(n, dtype=torch.int32, device=DEV)
            ops.append(dist.P2POp(dist.irecv, got[p], p, group=group, tag=3))
            ops.append(dist.P2POp(dist.isend, pattern(n, rank * 10 + p), p, group=group, tag=3))
        wait_all(dist.batch_isend_irecv(ops))
        for p in peers:
            if not torch.equal(got[p], pattern(n, p * 10 + rank)):
                fail(f"batch_isend_irecv from {p} differs ({'gloo' if group else 'loom'})")
    # A ring: blocking send to the right after posting the receive from the left.
    right, left = (rank + 1) % world, (rank - 1) % world
    got = torch.zeros(n, dtype=torch.int32, device=DEV)
    w = dist.irecv(got, src=left)
    dist.send(pattern(n, rank), dst=right)
    w.wait()
    if not torch.equal(got, pattern(n, left)):
        fail("ring differs")
    # Receives from any source: rank 0 takes one message from every other rank.
    if rank == 0:
        sources = []
        for _ in peers:
            t = torch.zeros(4, dtype=torch.int64, device=DEV)
            src = dist.recv(t, tag=11)
            if not torch.equal(t, torch.full((4,), src * 5, dtype=torch.int64)):
                fail(f"recv from any source: {t.tolist()} from {src}")
            sources.append(src)
        if sorted(sources) != peers:
            fail(f"any-source senders {sources}")
    else:
        dist.send(torch.full((4,), rank * 5, dtype=torch.int64, device=DEV), dst=0, tag=11)
    # allgather_coalesced, sparse and complex allreduce: as Gloo computes them.
    for group_label, group in (("loom", None), ("gloo", ref)):
        inputs = [pattern(5, rank), pattern(6, rank + 100).reshape(2, 3)]
        outputs = [[torch.zeros(5, dtype=torch.int32), torch.zeros(2, 3, dtype=torch.int32)]
                   for _ in range(world)]
        dist.all_gather_coalesced(outputs, inputs, group=group)
        for r in range(world):
            if not (torch.equal(outputs[r][0], pattern(5, r)) and
                    torch.equal(outputs[r][1], pattern(6, r + 100).reshape(2, 3))):
                fail(f"all_gather_coalesced from {r} differs ({group_label})")
    results = []
    for group in (None, ref):
        i = torch.tensor([[rank, (rank + 1) % world, 0]])
        v = torch.tensor([1.0 + rank, 2.0, 3.0 * rank])
        s = torch.sparse_coo_tensor(i, v, (world,))
        dist.all_reduce(s, group=group)
        results.append(s.to_dense())
    if not torch.equal(results[0], results[1]):
        fail(f"sparse all_reduce: loom {results[0].tolist()} gloo {results[1].tolist()}")
    results = []
    for group in (None, ref):
        c = torch.complex(pattern(6, rank).float(), pattern(6, rank + 1).float())
        dist.all_reduce(c, group=group)
        results.append(c)
    if not torch.equal(results[0], results[1]):
        fail("complex all_reduce differs from Gloo")
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
        fail("BAND was accepted")
    except RuntimeError as e:
        if "Backend loom does not support" not in str(e):
            fail(f"unexpected message: {e}")
    dist.barrier()


def stress(rank, world, ref):
    iters = int(os.environ.get("LOOM_P2P_STRESS_ITERS", "100"))
    shared = random.Random(20260)
    mine = random.Random(rank * 7919 + 1)
    large = 0
    for it in range(iters):
        msgs = []
        for _ in range(shared.randint(1, 3 * world)):
            src = shared.randrange(world)
            dst = shared.choice([p for p in range(world) if p != src])
            kind = shared.random()
            # Mostly small, some up to 1 MiB, and about one 16 to 64 MiB message per 40 iterations.
            if kind < 0.1:
                size = 0
            elif kind < 0.7:
                size = shared.randint(1, 4096)
            elif kind < 0.975:
                size = shared.randint(4097, 1 << 20)
            else:
                size = shared.randint(16 << 20, 64 << 20)
            msgs.append((src, dst, shared.randrange(4), size // 4))
        # Messages with one (src, dst, tag) match in posting order: keep their order, shuffle the
        # rest. Half of the iterations post one batch_isend_irecv, the others single ops.
        keys = {}
        for i, (src, dst, tag, n) in enumerate(msgs):
            keys.setdefault((src, dst) if DEV.type == "cuda" else (src, dst, tag), []).append(i)
        chains = list(keys.values())
        mine.shuffle(chains)
        order = []
        while chains:
            c = mine.choice(chains)
            order.append(c.pop(0))
            if not c:
                chains.remove(c)
        got, ops = {}, []
        for i in order:
            src, dst, tag, n = msgs[i]
            large += n * 4 >= (16 << 20) and rank == src
            if rank == dst:
                got[i] = torch.empty(n, dtype=torch.int32, device=DEV).fill_(-1)
                ops.append(dist.P2POp(dist.irecv, got[i], src, tag=tag))
            elif rank == src:
                ops.append(dist.P2POp(dist.isend, pattern(n, it * 1000 + i), dst, tag=tag))
        if (shared.random() < 0.5 or DEV.type == "cuda") and ops:
            works = dist.batch_isend_irecv(ops)
        else:
            works = [op.op(op.tensor, op.peer, tag=op.tag) for op in ops]
        mine.shuffle(works)
        wait_all(works)
        for i, t in got.items():
            if not torch.equal(t, pattern(msgs[i][3], it * 1000 + i)):
                fail(f"iteration {it}: message {i} {msgs[i]} differs")
    dist.barrier()
    print(f"rank {rank}: {iters} iterations, {large} large sends", flush=True)


def pipeline(rank, world, ref):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    def train(schedule_cls, group):
        torch.manual_seed(0)
        layers = [nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(world)]
        stage_module = layers[rank]
        stage = PipelineStage(stage_module, rank, world, DEV, group=group)
        schedule = schedule_cls(stage, n_microbatches=4,
                                loss_fn=lambda out, target: ((out - target) ** 2).mean())
        optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.1)
        losses = []
        generator = torch.Generator().manual_seed(1)
        for _ in range(4):
            x = torch.randn(8, 16, generator=generator)
            y = torch.randn(8, 16, generator=generator)
            optimizer.zero_grad()
            step_losses = []
            if rank == 0:
                schedule.step(x)
            elif rank == world - 1:
                schedule.step(target=y, losses=step_losses)
            else:
                schedule.step()
            optimizer.step()
            losses += [float(loss) for loss in step_losses]
        return losses, [p.detach().clone() for p in stage_module.parameters()]

    for schedule_cls in (ScheduleGPipe, Schedule1F1B):
        loom_losses, loom_params = train(schedule_cls, None)
        gloo_losses, gloo_params = train(schedule_cls, ref)
        if loom_losses != gloo_losses:
            fail(f"{schedule_cls.__name__}: losses loom {loom_losses} gloo {gloo_losses}")
        if not all(torch.equal(a, b) for a, b in zip(loom_params, gloo_params)):
            fail(f"{schedule_cls.__name__}: weights differ")
        if rank == world - 1:
            print(f"{schedule_cls.__name__}: {len(loom_losses)} losses match, last "
                  f"{loom_losses[-1]:.6f}", flush=True)


def main():
    global DEV
    case, world, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5 and sys.argv[5] == "cuda":
        DEV = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(DEV)
    dist.init_process_group("loom", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    ref = dist.new_group(backend="gloo")
    {"orders": orders, "stress": stress, "pipeline": pipeline}[case](rank, world, ref)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
