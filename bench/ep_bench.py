#!/usr/bin/env python3
"""MoE dispatch + combine on CPU ranks, side by side in one job, as a torch user runs them:

  loom.ep          loom.ep.Buffer (DeepEP's API): get_dispatch_layout, dispatch, combine;
                   low-latency: low_latency_dispatch and low_latency_combine (bf16), against
                   the same two pipelines at the low-latency batch.
  a2a gloo         the pipeline users write without an EP library, on a "gloo" group: the layout
                   from topk_idx, rows gathered per destination (index_select), all_to_all_single
                   of the counts (the host reads them), of the rows and of their top-k ids and
                   weights; combine: all_to_all_single back, then index_add_ in fp32 in
                   destination order and one rounding to bf16.
  a2a loom         the same pipeline on a "loom" group (Loom's torch backend).

Every method runs the same inputs; loom.ep's combined output is checked bit for bit against the
pipeline's (the same fp32 sums in the same order). Each cell is the slowest rank's time per
dispatch + combine: the median of --reps repetitions of -n calls, and their min-max.

    python3 bench/ep_bench.py -np 4 [--tokens 4096 --hidden 7168 --topk 8 --experts 256]
                              [--ll-tokens 128] [-n 5 -w 2 --reps 5] [--device cuda]

--device cuda puts rank r on GPU r (loom.ep on CUDA tensors) and runs the pipelines on NCCL
("a2a nccl") and on Loom's CUDA backend ("a2a loom"). It also prints loom.ep's phases as DeepEP's
tests report them: the mean GPU time per call of each phase (CUDA events on the caller's stream,
the slowest rank's; normal dispatch includes get_dispatch_layout) and, for normal mode, the
bandwidth of the rows this rank received (recv_x bytes / time, DeepEP's "NVL" figure):
  phase,<mode>,<tokens>,<phase>,<us>,<GB/s>
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-np", "--nprocs", type=int, required=True)
    p.add_argument("--tokens", type=int, default=4096, help="per rank, normal mode")
    p.add_argument("--ll-tokens", type=int, default=128, help="per rank, low latency (0: skip)")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256, help="rounded down to a multiple of -np")
    p.add_argument("-n", "--iters", type=int, default=5)
    p.add_argument("-w", "--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--buffer-mib", type=int, default=256, help="loom.ep's num_nvl_bytes")
    p.add_argument("--methods", default=None,
                   help="default: loom.ep,a2a gloo,a2a loom; with --device cuda: "
                   "loom.ep,a2a nccl,a2a loom")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: rank r on GPU r, the pipelines on NCCL and Loom")
    return p.parse_args()


class Pipeline:
    """dispatch + combine with all_to_all_single on `group` (what users write without EP)."""

    def __init__(self, torch, dist, group, world, experts):
        self.torch, self.dist, self.group, self.world = torch, dist, group, world
        self.local = experts // world

    def a2a(self, rows, send_counts, recv_counts):
        t = self.torch
        out = t.empty((sum(recv_counts),) + tuple(rows.shape[1:]), dtype=rows.dtype,
                      device=rows.device)
        self.dist.all_to_all_single(out, rows, recv_counts, send_counts, group=self.group)
        return out

    def run(self, x, topk_idx, topk_weights):
        t = self.torch
        ranks = t.where(topk_idx >= 0, topk_idx // self.local, -1)
        in_rank = t.zeros((x.shape[0], self.world), dtype=t.bool, device=x.device)
        in_rank.scatter_(1, ranks.clamp(min=0), ranks >= 0)
        picks = [in_rank[:, r].nonzero().flatten() for r in range(self.world)]
        order = t.cat(picks)
        send_counts = [len(p) for p in picks]
        recv_counts = t.empty(self.world, dtype=t.int64, device=x.device)
        self.dist.all_to_all_single(recv_counts, t.tensor(send_counts, device=x.device),
                                    group=self.group)
        recv_counts = recv_counts.tolist()  # the host waits for the counts
        recv_x = self.a2a(x.index_select(0, order), send_counts, recv_counts)
        self.a2a(topk_idx.index_select(0, order), send_counts, recv_counts)
        self.a2a(topk_weights.index_select(0, order), send_counts, recv_counts)
        # combine (identity experts): back to the origins, summed in fp32 in destination order
        back = self.a2a(recv_x, recv_counts, send_counts)
        out = t.zeros(x.shape, dtype=t.float32, device=x.device)
        out.index_add_(0, order, back.float())
        return out.to(x.dtype)


def loom_ep(buffer, x, topk_idx, topk_weights, experts):
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, experts)
    recv_x, _, _, _, handle, _ = buffer.dispatch(
        x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    combined, _, _ = buffer.combine(recv_x, handle)
    return combined


def loom_ep_low_latency(buffer, x, topk_idx, topk_weights, experts, max_tokens):
    recv, _, handle, _, _ = buffer.low_latency_dispatch(x, topk_idx, max_tokens, experts,
                                                        use_fp8=False)
    combined, _, _ = buffer.low_latency_combine(recv, topk_idx, topk_weights, handle)
    return combined


def timed(torch, dist, fn, a, host_group):
    """Median and min-max over repetitions of the slowest rank's mean time per call (ms)."""
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    for _ in range(a.warmup):
        fn()
    times = []
    for _ in range(a.reps):
        sync()
        dist.barrier(group=host_group)
        start = time.perf_counter()
        for _ in range(a.iters):
            fn()
        sync()
        elapsed = torch.tensor([(time.perf_counter() - start) / a.iters * 1e3])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=host_group)
        times.append(elapsed.item())
    return statistics.median(times), min(times), max(times)


def phase_times(torch, dist, phases, a, host_group):
    """CUDA: each phase's mean GPU time per call in us (events around it on the current stream),
    the slowest rank's. phases: functions taking the previous phase's result."""
    def once(events):
        state = None
        if events:
            events[0].record()
        for i, phase in enumerate(phases):
            state = phase(state)
            if events:
                events[i + 1].record()
    for _ in range(a.warmup):
        once(None)
    runs = [[torch.cuda.Event(enable_timing=True) for _ in range(len(phases) + 1)]
            for _ in range(a.iters * a.reps)]
    torch.cuda.synchronize()
    dist.barrier(group=host_group)
    for events in runs:
        once(events)
    torch.cuda.synchronize()
    means = torch.tensor([statistics.mean(e[i].elapsed_time(e[i + 1]) * 1e3 for e in runs)
                          for i in range(len(phases))])
    dist.all_reduce(means, op=dist.ReduceOp.MAX, group=host_group)
    return means.tolist()


def ep_phases(torch, dist, buffer, mode, x, topk_idx, topk_weights, experts, a, host_group):
    """(phase, us, GB/s or None) rows of loom.ep's dispatch and combine on CUDA."""
    tokens = x.shape[0]
    if mode == "normal":
        def dispatch(_):
            per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, experts)
            recv_x, _, _, _, handle, _ = buffer.dispatch(
                x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
                is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
            return recv_x, handle
        dispatch_us, combine_us = phase_times(
            torch, dist, [dispatch, lambda s: buffer.combine(s[0], s[1])], a, host_group)
        received = dispatch(None)[0].numel() * x.element_size()
        return [("dispatch", dispatch_us, received / dispatch_us / 1e3),
                ("combine", combine_us, received / combine_us / 1e3)]
    rows = []
    expert_rows = buffer.low_latency_dispatch(x, topk_idx, tokens, experts, use_fp8=False)[0]
    for fp8 in (False, True):
        def dispatch(_, fp8=fp8):
            return buffer.low_latency_dispatch(x, topk_idx, tokens, experts, use_fp8=fp8)
        def combine(s):  # after FP8, the bf16 rows of an earlier dispatch
            return buffer.low_latency_combine(expert_rows, topk_idx, topk_weights, s[2])
        d_us, c_us = phase_times(torch, dist, [dispatch, combine], a, host_group)
        rows.append((f"dispatch {'fp8' if fp8 else 'bf16'}", d_us, None))
        if not fp8:
            rows.append(("combine", c_us, None))
    return rows


def rank_main(a, rank, world, port):
    import torch
    import torch.distributed as dist

    import loom.ep

    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    else:
        torch.set_num_threads(1)
    dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    host_group = dist.new_group(backend="gloo")
    methods = (a.methods or ("loom.ep,a2a nccl,a2a loom" if cuda else
                             "loom.ep,a2a gloo,a2a loom")).split(",")
    loom_group = dist.new_group(backend="loom") if "a2a loom" in methods else None
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    experts = a.experts // world * world
    g = torch.Generator().manual_seed(rank)
    rows, phases = [], []
    for mode, tokens in (("normal", a.tokens), ("low latency", a.ll_tokens)):
        if tokens == 0:
            continue
        x = torch.randn((tokens, a.hidden), generator=g).to(torch.bfloat16).to(device)
        topk_idx = torch.stack([torch.randperm(experts, generator=g)[:a.topk]
                                for _ in range(tokens)]).to(device)
        topk_weights = torch.rand((tokens, a.topk), generator=g).to(device)
        buffer = loom.ep.Buffer(host_group, num_nvl_bytes=a.buffer_mib << 20,
                                low_latency_mode=mode == "low latency", device=device)
        runs = {"a2a gloo" if not cuda else "a2a nccl":
                lambda: Pipeline(torch, dist, None, world, experts).run(x, topk_idx, topk_weights),
                "a2a loom": lambda: Pipeline(torch, dist, loom_group, world, experts)
                .run(x, topk_idx, topk_weights)}
        if mode == "normal":
            runs["loom.ep"] = lambda: loom_ep(buffer, x, topk_idx, topk_weights, experts)
            want = runs["a2a nccl" if cuda else "a2a gloo"]()
            got = runs["loom.ep"]()
            if not torch.equal(got.view(torch.int16), want.view(torch.int16)):
                raise SystemExit(f"rank {rank}: loom.ep's combine differs from the pipeline's")
        else:  # the pipelines as above: what a decoder without EP would run
            runs["loom.ep"] = lambda: loom_ep_low_latency(buffer, x, topk_idx, topk_weights,
                                                          experts, tokens)
        for name in methods:
            if name in runs:
                rows.append((mode, tokens, name,
                             *timed(torch, dist, runs[name], a, host_group)))
        if cuda and "loom.ep" in methods:
            phases += [(mode, tokens, *row) for row in ep_phases(
                torch, dist, buffer, mode, x, topk_idx, topk_weights, experts, a, host_group)]
        buffer._release()
    if rank == 0:
        print(f"{a.device} ranks {world}, hidden {a.hidden}, top-{a.topk}, {experts} experts, "
              f"bf16, "
              f"{a.reps} x {a.iters} calls", flush=True)
        for mode, tokens, name, median, low, high in rows:
            print(f"{mode},{tokens},{name},{median:.2f},{low:.2f},{high:.2f}", flush=True)
        for mode, tokens, phase, us, gbps in phases:
            print(f"phase,{mode},{tokens},{phase},{us:.1f},{'' if gbps is None else f'{gbps:.1f}'}",
                  flush=True)
    dist.destroy_process_group()


def main():
    a = parse_args()
    if os.environ.get("EP_BENCH_RANK") is not None:
        return rank_main(a, int(os.environ["EP_BENCH_RANK"]), a.nprocs,
                         int(os.environ["EP_BENCH_PORT"]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable] + sys.argv,
                              env=dict(os.environ, EP_BENCH_RANK=str(r), EP_BENCH_PORT=str(port)))
             for r in range(a.nprocs)]
    codes = [p.wait() for p in procs]
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
