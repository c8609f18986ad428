"""One rank of the loom.ep GPU tests: python ep_gpu_worker.py CASE WORLD RANK PORT.

The same calls on a CPU buffer (its results checked against all_to_all_single on Gloo by
ep_worker.py) and on a CUDA buffer (src/device/cuda/ep/ where every rank is a GPU with its own
process): the CUDA path's outputs must be the same bytes, since both follow docs/ep.md's orders
and sums. Ranks beyond the GPU count share GPUs (round robin).
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import ep_worker as w
import loom.ep
from loom import LoomError


def same(name, gpu, cpu):
    if gpu is None or cpu is None:
        w.expect(gpu is None and cpu is None, f"{name}: one path returned None")
        return
    w.same_bits(name, gpu.cpu(), cpu)


def normal(cpu_buf, gpu_buf, dev):
    tokens = [0 if (w.WORLD > 2 and r == 1) else 40 + 23 * r for r in range(w.WORLD)][w.RANK]
    cases = [("random", 7168, torch.bfloat16, 8), ("sparse", 129, torch.float32, 3),
             ("one_rank", 64, torch.bfloat16, 2), ("half_empty", 200, torch.bfloat16, 4)]
    for seed, (shape, hidden, dtype, topk) in enumerate(cases):
        experts = 4 * w.WORLD
        x = w.tokens_x(seed, w.RANK, tokens, hidden, dtype)
        idx, weights = w.routing(seed, w.RANK, tokens, experts, topk, shape)
        results = []
        for buf, d in ((cpu_buf, "cpu"), (gpu_buf, dev)):
            xs, ids, ws = x.to(d), idx.to(d), weights.to(d)
            per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(ids, experts)
            recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
                xs, topk_idx=ids, topk_weights=ws, num_tokens_per_rank=per_rank,
                is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
            cached, *_ = buf.dispatch(xs, handle=handle)
            y = (recv_x.float() * (1 + w.RANK / 8)).to(dtype)
            combined, combined_w, _ = buf.combine(y, handle, topk_weights=recv_w)
            results.append((per_rank, per_expert, in_rank, recv_x, recv_idx, recv_w, counts,
                            handle[0], handle[3], handle[5], cached, combined, combined_w))
        names = ("num_tokens_per_rank", "num_tokens_per_expert", "is_token_in_rank", "recv_x",
                 "recv_topk_idx", "recv_topk_weights", "counts", "rank_prefix_matrix",
                 "recv_src_idx", "send_head", "cached dispatch", "combine", "combined weights")
        for name, g, c in zip(names, results[1], results[0]):
            if name == "counts":
                w.expect(g == c, f"counts {g} != {c}")
            else:
                same(f"case {seed} {name}", g, c)


def low_latency_call(buf, d, x, idx, weights, m, experts, fp8, hook):
    recv, count, handle, _, hook_fn = buf.low_latency_dispatch(
        x.to(d), idx.to(d), m, experts, use_fp8=fp8, return_recv_hook=hook)
    if hook:
        hook_fn()
    recv_x, scales = recv if fp8 else (recv, None)
    y = recv_x.float() if fp8 else recv_x
    if fp8:  # combine the dequantized rows
        y = y * torch.repeat_interleave(scales, 128, dim=2)[:, :, :x.shape[1]]
    y = y.to(torch.bfloat16)
    combined, _, hook_fn = buf.low_latency_combine(y, idx.to(d), weights.to(d), handle,
                                                   return_recv_hook=hook)
    if hook:
        hook_fn()
    return recv_x, scales, count, handle[0], handle[1], combined


def compare_low_latency(name, g, c, local):
    recv_x, scales, count, src_info, layout, combined = c
    same(f"{name} recv_count", g[2], count)
    same(f"{name} layout_range", g[4], layout)
    for el in range(local):
        n = int(count[el])
        same(f"{name} recv_x {el}", g[0][el, :n], recv_x[el, :n])
        same(f"{name} src_info {el}", g[3][el, :n], src_info[el, :n])
        if scales is not None:
            same(f"{name} scales {el}", g[1][el, :n].contiguous(), scales[el, :n].contiguous())
    same(f"{name} combine", g[5], combined)


def low_latency(cpu_buf, gpu_buf, dev):
    m, hidden, experts, topk = 128, 7168, 4 * w.WORLD, 8
    local = experts // w.WORLD
    tokens = [m, 0, 77, 128, 5][w.RANK % 5]
    modes = [(False, False), (True, False), (False, True), (True, True)]
    for seed, (fp8, hook) in enumerate(modes):
        x = w.tokens_x(seed, w.RANK, tokens, hidden, torch.bfloat16)
        idx, weights = w.routing(seed, w.RANK, tokens, experts, topk, "sparse")
        c = low_latency_call(cpu_buf, "cpu", x, idx, weights, m, experts, fp8, hook)
        g = low_latency_call(gpu_buf, dev, x, idx, weights, m, experts, fp8, hook)
        compare_low_latency(f"fp8={fp8} hook={hook}", g, c, local)


def graph(cpu_buf, gpu_buf, dev):
    """Dispatch + combine captured once (an even number of low-latency calls), replayed on new
    inputs copied into the captured tensors."""
    m, hidden, experts, topk = 32, 512, 2 * w.WORLD, 4
    local = experts // w.WORLD
    x = torch.zeros((m, hidden), dtype=torch.bfloat16, device=dev)
    idx = torch.full((m, topk), -1, dtype=torch.int64, device=dev)
    weights = torch.zeros((m, topk), dtype=torch.float32, device=dev)
    low_latency_call(gpu_buf, dev, x, idx, weights, m, experts, True, False)  # warm up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = low_latency_call(gpu_buf, dev, x, idx, weights, m, experts, True, False)
    for seed in (11, 12, 13):
        xs = w.tokens_x(seed, w.RANK, m, hidden, torch.bfloat16)
        ids, ws = w.routing(seed, w.RANK, m, experts, topk, "random")
        x.copy_(xs)
        idx.copy_(ids)
        weights.copy_(ws)
        g.replay()
        torch.cuda.synchronize()
        c = low_latency_call(cpu_buf, "cpu", xs, ids, ws, m, experts, True, False)
        compare_low_latency(f"graph replay {seed}", captured, c, local)


def errors(gpu_buf, dev):
    experts, topk, tokens = 2 * w.WORLD, 2, 6
    x = w.tokens_x(1, w.RANK, tokens, 32, torch.bfloat16).to(dev)
    idx, weights = w.routing(1, w.RANK, tokens, experts, topk, "random")
    per_rank, _, per_expert, in_rank, _ = gpu_buf.get_dispatch_layout(idx.to(dev), experts)
    bad = idx.clone()
    if w.RANK == w.WORLD - 1:
        bad[2, 1] = experts
    ids, ws = idx.to(dev), weights.to(dev)

    def normal_dispatch(topk_idx):
        gpu_buf.get_dispatch_layout(ids, experts)
        gpu_buf.dispatch(x, topk_idx=topk_idx, topk_weights=ws, is_token_in_rank=in_rank,
                         num_tokens_per_expert=per_expert)

    def low_latency_dispatch(topk_idx):
        gpu_buf.low_latency_dispatch(x, topk_idx, 8, experts, use_fp8=False)

    # A normal dispatch reports at once (its counting waits for its stream); a low-latency one,
    # which never waits, at the rank's next low-latency call (docs/ep.md).
    for call in (normal_dispatch, low_latency_dispatch):
        try:
            call(bad.to(dev))
            torch.cuda.synchronize()
            call(ids)
        except LoomError:
            continue
        w.fail(f"{call.__name__}: a bad expert id on one rank raised nothing on this rank")


def main():
    case, world, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    w.RANK, w.WORLD = rank, world
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    cpu_buf = loom.ep.Buffer(dist.group.WORLD, num_nvl_bytes=256 << 20, low_latency_mode=True,
                             device="cpu")
    gpu_buf = loom.ep.Buffer(dist.group.WORLD, num_nvl_bytes=256 << 20, low_latency_mode=True,
                             device=dev)
    if case == "errors":
        errors(gpu_buf, dev)
    else:
        {"normal": normal, "low_latency": low_latency, "graph": graph}[case](cpu_buf, gpu_buf, dev)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
