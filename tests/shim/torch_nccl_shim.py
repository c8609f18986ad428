"""PyTorch's "nccl" process group through the NCCL shim (run by tests/shim/gpu.sh).

Under torchrun, one GPU per rank (ranks share GPU 0 on a one-GPU host: Loom allows it, NCCL
itself does not): init_process_group(BACKEND), every collective of torch.distributed on CUDA
tensors, then DDP for 20 steps. Every result is saved to OUT/<tag>_rank<r>.pt for gpu.sh to
compare between backends ("nccl" through the shim, "loom", or "nccl" on the real NCCL), and
checked here against values computed from the inputs (small integers: exact in fp32).

    torchrun --nproc-per-node N torch_nccl_shim.py --backend nccl --tag shim --out DIR [--premul]
"""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--premul", action="store_true", help="also PREMUL_SUM (needs a real NCCL)")
    args = parser.parse_args()
    if args.backend == "loom":
        import loom  # noqa: F401  registers the backend

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(args.backend)
    results = {}
    failures = []

    def check(name, got, want):
        results[name] = got.detach().cpu().clone()
        if not torch.equal(got.cpu(), want.cpu()):
            failures.append(f"{name}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")

    n = 1027
    base = torch.arange(n, device=dev, dtype=torch.float32) % 7
    mine = base + rank  # rank r: (i % 7) + r
    ranks_sum = sum(range(world))

    ops = {
        "sum": (dist.ReduceOp.SUM, base * world + ranks_sum),
        "prod": None,
        "max": (dist.ReduceOp.MAX, base + (world - 1)),
        "min": (dist.ReduceOp.MIN, base),
        "avg": (dist.ReduceOp.AVG, None),
    }
    for name, spec in ops.items():
        t = mine.clone()
        if name == "prod":
            want = torch.ones_like(base)
            for r in range(world):
                want = want * (base % 2 + 1 + r % 2)
            t = base % 2 + 1 + rank % 2
            dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
            check("all_reduce_prod", t, want)
            continue
        op, want = spec
        if name == "avg":
            t = (base + rank) * world
            want = base * world + ranks_sum
        dist.all_reduce(t, op=op)
        check(f"all_reduce_{name}", t, want)
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8, torch.uint8,
                  torch.float64):
        t = (mine % 3).to(dtype)
        dist.all_reduce(t)
        want = sum(((base + r) % 3) for r in range(world)).to(dtype)
        check(f"all_reduce_{dtype}", t, want)
    if args.premul:
        t = mine.clone()
        factor = 2.0
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        check("all_reduce_premul", t, (base * world + ranks_sum) * factor)

    for root in {0, world - 1}:
        t = mine.clone()
        dist.broadcast(t, src=root)
        check(f"broadcast_{root}", t, base + root)
        t = mine.clone()
        dist.reduce(t, dst=root)
        if rank == root:
            check(f"reduce_{root}", t, base * world + ranks_sum)
        gathered = [torch.empty_like(mine) for _ in range(world)] if rank == root else None
        dist.gather(mine, gather_list=gathered, dst=root)
        if rank == root:
            check(f"gather_{root}", torch.stack(gathered), torch.stack([base + r for r in range(world)]))
        out = torch.empty_like(mine)
        scatter = [base * 10 + r for r in range(world)] if rank == root else None
        dist.scatter(out, scatter_list=scatter, src=root)
        check(f"scatter_{root}", out, base * 10 + rank)

    everyone = torch.stack([base + r for r in range(world)])
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    check("all_gather", torch.stack(gathered), everyone)
    flat = torch.empty(world * n, device=dev)
    dist.all_gather_into_tensor(flat, mine)
    check("all_gather_into_tensor", flat, everyone.flatten())
    full = torch.cat([base + r for r in range(world)]) + rank  # world blocks
    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, full)
    check("reduce_scatter_tensor", out, (base + rank) * world + ranks_sum)
    out = torch.empty(n, device=dev)
    dist.reduce_scatter(out, [(base + r) + rank for r in range(world)])
    check("reduce_scatter", out, (base + rank) * world + ranks_sum)
    # all_to_all: block d of rank s holds 100*s + d + base
    send = torch.cat([base + 100 * rank + d for d in range(world)])
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    check("all_to_all_single", recv, torch.cat([base + 100 * s + rank for s in range(world)]))
    outs = [torch.empty_like(mine) for _ in range(world)]
    dist.all_to_all(outs, [base + 100 * rank + d for d in range(world)])
    check("all_to_all", torch.stack(outs), torch.stack([base + 100 * s + rank for s in range(world)]))
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        got = torch.empty_like(mine)
        if rank % 2 == 0:
            dist.send(mine, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(mine, nxt)
        check("send_recv", got, base + prv)
        got = torch.empty_like(mine)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt),
                                       dist.P2POp(dist.irecv, got, prv)])
        for r in reqs:
            r.wait()
        check("batch_isend_irecv", got, base + prv)
    dist.barrier()
    # A subgroup (even ranks), exercising ncclCommSplit / a second communicator.
    evens = list(range(0, world, 2))
    group = dist.new_group(evens)
    if rank in evens:
        t = mine.clone()
        dist.all_reduce(t, group=group)
        check("subgroup_all_reduce", t, base * len(evens) + sum(evens))

    # DDP, 20 steps on rank-dependent data; the parameters must stay equal on every rank.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    for _ in range(20):
        x = torch.randn(16, 32, generator=gen).to(dev)
        y = torch.randn(16, 4, generator=gen).to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    results["ddp_params"] = params.cpu()
    copies = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(copies, params)
    if not all(torch.equal(c, params) for c in copies):
        failures.append("ddp: parameters differ between ranks")
    torch.cuda.synchronize()
    torch.save(results, os.path.join(args.out, f"{args.tag}_rank{rank}.pt"))
    dist.destroy_process_group()
    if failures:
        raise SystemExit(f"rank {rank} ({args.tag}): " + "; ".join(failures))
    print(f"rank {rank} ({args.tag}, backend {args.backend}): {len(results)} results checked")


if __name__ == "__main__":
    main()
