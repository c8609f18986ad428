"""Low-latency loom.ep on 2 GPUs, what bench/ep_bench.py does not show: the host's cost of an eager
dispatch + combine, the GPU time of captured CUDA graphs ([dispatch, combine], [dispatch,
dispatch] in bf16 and FP8; halve the latter for one dispatch), the kernels' durations in those
graphs, and a plain peer copy's bandwidth (the reference for DeepEP-style bandwidth figures).
128 tokens per rank, hidden 7168, top-8, 256 experts, bf16.

    python3 bench/ep_cuda_graph.py          (a host with 2 GPUs; spawns its 2 ranks)
"""
import os, socket, subprocess, sys, time


def rank_main(rank, world, port):
    import torch, torch.distributed as dist
    import loom.ep
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dev = torch.device("cuda", rank)
    g = torch.Generator().manual_seed(rank)
    experts, topk, hidden, m = 256, 8, 7168, 128
    x = torch.randn((m, hidden), generator=g).to(torch.bfloat16).to(dev)
    idx = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(m)]).to(dev)
    w = torch.rand((m, topk), generator=g).to(dev)
    buf = loom.ep.Buffer(dist.group.WORLD, num_nvl_bytes=256 << 20, low_latency_mode=True, device=dev)
    out = []
    if rank == 0:
        a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
        b = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:1")
        for _ in range(3): b.copy_(a)
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        t = time.perf_counter()
        for _ in range(10): b.copy_(a)
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        out.append(f"peer copy 256 MiB cuda:0->cuda:1: {10 * 256 / 1024 / (time.perf_counter() - t):.1f} GiB/s")
        del a, b

    def call(fp8=False):
        r, _, h, _, _ = buf.low_latency_dispatch(x, idx, m, experts, use_fp8=fp8)
        rows = r if not fp8 else rows_bf16
        return buf.low_latency_combine(rows, idx, w, h)[0]
    rows_bf16 = buf.low_latency_dispatch(x, idx, m, experts, use_fp8=False)[0]
    for _ in range(5): call()
    torch.cuda.synchronize(); dist.barrier()
    # host cost: calls queued without waiting
    n = 200
    t = time.perf_counter()
    for _ in range(n): call()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    total = (time.perf_counter() - t) / n * 1e6
    out.append(f"rank {rank}: eager dispatch+combine: host {host:.1f} us/call issued, {total:.1f} us/call to finish")
    torch.cuda.synchronize(); dist.barrier()
    # graphs: [dispatch, combine], [dispatch, dispatch], [combine, combine]
    def cap(fn):
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            fn()
        return gr
    res = {}
    for name, fn in (("dispatch+combine", lambda: call()),
                     ("2x dispatch bf16", lambda: [buf.low_latency_dispatch(x, idx, m, experts, use_fp8=False) for _ in range(2)]),
                     ("2x dispatch fp8", lambda: [buf.low_latency_dispatch(x, idx, m, experts, use_fp8=True) for _ in range(2)])):
        try:
            torch.cuda.synchronize(); dist.barrier()
            gr = cap(fn)
            torch.cuda.synchronize(); dist.barrier()
            for _ in range(3): gr.replay()
            torch.cuda.synchronize(); dist.barrier()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(50): gr.replay()
            e1.record(); torch.cuda.synchronize()
            res[name] = e0.elapsed_time(e1) / 50 * 1e3
            if name.startswith("2x dispatch bf16") or name == "dispatch+combine":
                dist.barrier()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
                    for _ in range(20): gr.replay()
                    torch.cuda.synchronize()
                if rank == 0:
                    for ev in p.key_averages():
                        if ev.device_time_total > 0:
                            out.append(f"  graph {name}: {ev.key[:60]} n={ev.count} avg {ev.device_time_total / ev.count:.1f} us")
        except Exception as ex:
            res[name] = f"failed: {ex}"
    out.append(f"rank {rank}: graph replay us: " + ", ".join(f"{k} {v if isinstance(v, str) else f'{v:.1f}'}" for k, v in res.items()))
    buf._release()
    print("\n".join(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if "EP_GRAPH_RANK" in os.environ:
        rank_main(int(os.environ["EP_GRAPH_RANK"]), 2, int(os.environ["EP_GRAPH_PORT"]))
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        ps = [subprocess.Popen([sys.executable, __file__], env=dict(os.environ, EP_GRAPH_RANK=str(r), EP_GRAPH_PORT=str(port))) for r in range(2)]
        sys.exit(max(p.wait() for p in ps))
