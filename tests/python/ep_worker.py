"""One rank of the loom.ep tests: python ep_worker.py CASE WORLD RANK PORT.

Every result is checked against a reference built in the same job with
torch.distributed.all_to_all_single on Gloo: each rank sends each destination rank its tokens for
it (rows tagged with the source rank and the token index in their first two columns), and the
reference receives them in rank order, token order, which is the order loom.ep documents.
Combine's reference returns the holders' rows the same way and sums them in rank order in fp32.
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import loom.ep
from loom import LoomError

RANK = WORLD = 0


def fail(what):
    print(f"rank {RANK}: {what}", flush=True)
    sys.exit(1)


def expect(cond, what):
    if not cond:
        fail(what)


def same_bits(name, got, want):
    if got.shape == want.shape and got.numel() == 0:
        return
    if got.shape != want.shape or not torch.equal(got.contiguous().view(torch.uint8),
                                                   want.contiguous().view(torch.uint8)):
        fail(f"{name}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()} "
             f"(shapes {tuple(got.shape)} {tuple(want.shape)})")


def routing(seed, rank, tokens, experts, topk, shape):
    """Distinct experts per token (-1 for none in 'sparse'), and weights."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    local = experts // WORLD
    lo, span = 0, experts
    if shape == "one_rank":
        lo, span = ((rank + 1) % WORLD) * local, local
    elif shape == "half_empty":
        span = max(1, WORLD // 2) * local
    idx = torch.stack([torch.randperm(span, generator=g)[:topk] + lo for _ in range(tokens)]) \
        if tokens else torch.empty((0, topk), dtype=torch.int64)
    if shape == "sparse":
        idx[torch.rand(idx.shape, generator=g) < 0.4] = -1
    weights = torch.rand((tokens, topk), generator=g)
    return idx.to(torch.int64), weights


def tokens_x(seed, rank, tokens, hidden, dtype):
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    x = (torch.randint(-32, 33, (tokens, hidden), generator=g).float() / 8)
    x[:, 0] = rank
    if hidden > 1:
        x[:, 1] = torch.arange(tokens, dtype=torch.float32)
    return x.to(dtype)


def a2a(send_rows, send_counts):
    """all_to_all_single of rows (any dtype, as bytes) with per-rank counts; returns the received
    rows and counts."""
    recv_counts = torch.empty(WORLD, dtype=torch.int64)
    dist.all_to_all_single(recv_counts, torch.tensor(send_counts, dtype=torch.int64))
    recv_counts = recv_counts.tolist()
    row_bytes = send_rows.element_size()
    for d in send_rows.shape[1:]:
        row_bytes *= d
    flat = (send_rows.contiguous().view(torch.uint8).reshape(send_rows.shape[0], row_bytes)
            if send_rows.numel() else torch.empty((send_rows.shape[0], row_bytes),
                                                  dtype=torch.uint8))
    out = torch.empty((sum(recv_counts), flat.shape[1]), dtype=torch.uint8)
    dist.all_to_all_single(out, flat, recv_counts, send_counts)
    shape = (sum(recv_counts),) + tuple(send_rows.shape[1:])
    return out.view(send_rows.dtype).reshape(shape), recv_counts


def reference_dispatch(x, idx, weights, in_rank):
    picks = [in_rank[:, r].nonzero().flatten() for r in range(WORLD)]
    order = torch.cat(picks) if picks else torch.empty(0, dtype=torch.int64)
    counts = [len(p) for p in picks]
    tokens = torch.arange(x.shape[0], dtype=torch.int64)[order].reshape(-1, 1)
    recv = {}
    for name, t in (("x", x[order]), ("token", tokens), ("idx", idx[order]),
                    ("weights", weights[order])):
        recv[name], recv_counts = a2a(t, counts)
    recv["counts"] = recv_counts
    return recv, picks


def local_ids(global_idx, local):
    mine = (global_idx >= 0) & (global_idx // local == RANK)
    return torch.where(mine, global_idx % local, torch.full_like(global_idx, -1)), mine


def normal_case(buffer, seed, shape, tokens, hidden, dtype, experts, topk, worst):
    x = tokens_x(seed, RANK, tokens, hidden, dtype)
    idx, weights = routing(seed, RANK, tokens, experts, topk, shape)
    per_rank, _, per_expert, in_rank, event = buffer.get_dispatch_layout(idx, experts,
                                                                         async_finish=True)
    event.current_stream_wait()
    ref, picks = reference_dispatch(x, idx, weights, in_rank)
    expect(per_rank.tolist() == [len(p) for p in picks], "num_tokens_per_rank")
    expect(per_expert.tolist() == [int((idx == e).sum()) for e in range(experts)],
           "num_tokens_per_expert")
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, topk_idx=idx, topk_weights=weights, num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, num_worst_tokens=worst,
        previous_event=buffer.capture())
    n = ref["x"].shape[0]
    if worst:
        expect(recv_x.shape[0] == worst and counts == [], "num_worst_tokens shapes")
        expect(bool((recv_idx[n:] == -1).all()), "rows past the received have top-k -1")
        recv_x, recv_idx, recv_w = recv_x[:n], recv_idx[:n], recv_w[:n]
    else:
        local = experts // WORLD
        want = [int((ref["idx"] == RANK * local + e).sum()) for e in range(local)]
        expect(counts == want, f"num_recv_tokens_per_expert_list {counts} != {want}")
    same_bits("recv_x", recv_x, ref["x"])
    same_bits("recv_src_idx", handle[3][:n].to(torch.int64), ref["token"].flatten())
    want_idx, mine = local_ids(ref["idx"], experts // WORLD)
    same_bits("recv_topk_idx", recv_idx, want_idx)
    same_bits("recv_topk_weights", recv_w, torch.where(mine, ref["weights"], 0.0))
    expect(int(handle[0][-1, RANK]) == n, "rank_prefix_matrix")
    cached, *rest = buffer.dispatch(x, handle=handle, async_finish=True)
    rest[-1].current_stream_wait()
    same_bits("cached dispatch", cached[:n], ref["x"])
    # Identity: each token comes back times the ranks it went to, exactly.
    combined, _, _ = buffer.combine(recv_x if not worst else cached, handle)
    destinations = in_rank.sum(dim=1, keepdim=True).float()
    # (+ 0.0: a token sent nowhere combines to +0, as a sum of no rows)
    same_bits("identity combine", combined, (x.float() * destinations + 0.0).to(dtype))
    # Each holder scales its rows; the reference returns them with all_to_all_single and sums
    # them in rank order in fp32.
    y = (recv_x.float() * (1 + RANK / 8)).to(dtype)
    combined, combined_w, _ = buffer.combine(y, handle, topk_weights=recv_w)
    back, _ = a2a(y, ref["counts"])
    back_w, _ = a2a(torch.where(mine, ref["weights"], 0.0), ref["counts"])
    acc = torch.zeros((tokens, hidden), dtype=torch.float32)
    acc_w = torch.zeros((tokens, topk), dtype=torch.float32)
    start = 0
    for r in range(WORLD):
        rows = picks[r]
        acc[rows] = acc[rows] + back[start:start + len(rows)].float()
        acc_w[rows] = acc_w[rows] + back_w[start:start + len(rows)]
        start += len(rows)
    same_bits("scaled combine", combined, acc.to(dtype))
    same_bits("combined weights", combined_w, acc_w)
    return recv_x, combined


def dispatch_combine():
    buffer = loom.ep.Buffer(dist.group.WORLD, num_nvl_bytes=1 << 20)
    small = loom.ep.Buffer(dist.group.WORLD, num_nvl_bytes=8 << 10)  # many rounds
    tokens = [0 if (WORLD > 2 and r == 1) else 5 + 11 * r for r in range(WORLD)]
    cases = [
        (buffer, "random", 37, torch.bfloat16, 3, 0),
        (buffer, "one_rank", 19, torch.float32, 2, 0),
        (buffer, "half_empty", 70, torch.bfloat16, 2, 0),
        (small, "sparse", 53, torch.float32, 4, 0),
        (small, "random", 129, torch.bfloat16, 3, 0),
        (buffer, "random", 24, torch.bfloat16, 2, 64 * WORLD),
    ]
    for seed, (b, shape, hidden, dtype, topk, worst) in enumerate(cases):
        normal_case(b, seed, shape, tokens[RANK], hidden, dtype, 2 * WORLD, topk, worst)
    normal_case(buffer, 77, "random", 0, 16, torch.bfloat16, WORLD, 1, 0)  # empty batches
    # The same seed twice gives the same bytes.
    first = normal_case(buffer, 5, "random", tokens[RANK], 33, torch.bfloat16, 2 * WORLD, 3, 0)
    again = normal_case(buffer, 5, "random", tokens[RANK], 33, torch.bfloat16, 2 * WORLD, 3, 0)
    for a, b in zip(first, again):
        same_bits("same seed twice", a, b)


def fp8_values(x):
    g = x.float().reshape(x.shape[0], -1, 128)
    amax = g.abs().amax(dim=2).clamp(min=1e-4)
    return amax / 448


def low_latency():
    m, hidden, experts, topk = 8, 200, 2 * WORLD, 3
    hint = loom.ep.Buffer.get_low_latency_rdma_size_hint(m, hidden, WORLD, experts)
    buffer = loom.ep.Buffer(dist.group.WORLD, num_rdma_bytes=hint, low_latency_mode=True)
    local, slots = experts // WORLD, m * WORLD
    tokens = (RANK * 3 + 5) % (m + 1)
    for seed, (fp8, hook, zero_copy) in enumerate([(False, False, False), (False, True, False),
                                                   (False, False, True), (True, False, False)]):
        x = tokens_x(seed, RANK, tokens, hidden, torch.bfloat16)
        idx, weights = routing(seed, RANK, tokens, experts, topk, "sparse")
        in_rank = torch.zeros((tokens, WORLD), dtype=torch.bool)
        for k in range(topk):
            ok = idx[:, k] >= 0
            in_rank[ok.nonzero().flatten(), (idx[ok, k] // local)] = True
        ref, _ = reference_dispatch(x, idx, weights, in_rank)
        recv, count, handle, event, hook_fn = buffer.low_latency_dispatch(
            x, idx, m, experts, use_fp8=fp8, return_recv_hook=hook)
        if hook:
            hook_fn()
        recv_x, scales = recv if fp8 else (recv, None)
        for el in range(local):
            rows = (ref["idx"] == RANK * local + el).any(dim=1).nonzero().flatten()
            expect(int(count[el]) == len(rows), f"recv_count of expert {el}")
            same_bits(f"src_info {el}", handle[0][el, :len(rows)].to(torch.int64),
                      ref["token"].flatten()[rows])
            want = ref["x"][rows]
            if not fp8:
                same_bits(f"recv_x of expert {el}", recv_x[el, :len(rows)], want)
                continue
            scale = fp8_values(torch.nn.functional.pad(want.float(), (0, 56)))
            got_scale = scales[el, :len(rows)]
            same_bits("fp8 scales", got_scale, scale)
            deq = recv_x[el, :len(rows)].float().reshape(len(rows), -1)
            deq = deq * torch.repeat_interleave(got_scale, 128, dim=1)[:, :hidden]
            err = (deq - want.float()).abs()
            bound = torch.maximum(want.float().abs() / 16,
                                  torch.repeat_interleave(got_scale, 128, dim=1)[:, :hidden] / 512)
            expect(bool((err <= bound * 1.0001).all()), "fp8 error beyond e4m3's half step")
        if fp8:
            continue
        factor = 1 + (torch.arange(local) + RANK * local).remainder(4).float() / 4
        y = (recv_x.float() * factor.reshape(-1, 1, 1)).to(torch.bfloat16)
        if zero_copy:
            into = buffer.get_next_low_latency_combine_buffer(handle)
            into.copy_(y)
            y = into
        combined, _, hook_fn = buffer.low_latency_combine(y, idx, weights, handle,
                                                          zero_copy=zero_copy,
                                                          return_recv_hook=hook)
        if hook:
            hook_fn()
        acc = torch.zeros((tokens, hidden), dtype=torch.float32)
        for k in range(topk):
            e = idx[:, k]
            term = weights[:, k:k + 1] * (x.float() * (1 + e.remainder(4).float() / 4)
                                          .reshape(-1, 1)).to(torch.bfloat16).float()
            acc = torch.where((e >= 0).reshape(-1, 1), acc + term, acc)
        same_bits("low-latency combine", combined, acc.to(torch.bfloat16))


def raises_everywhere(call, words):
    try:
        call()
    except LoomError as e:
        expect(words in str(e), f"message lacks {words!r}: {e}")
        return
    fail(f"no error where {words!r} was expected")


def errors():
    buffer = loom.ep.Buffer(dist.group.WORLD, num_nvl_bytes=1 << 20, low_latency_mode=True)
    experts, topk, tokens = 2 * WORLD, 2, 6
    x = tokens_x(1, RANK, tokens, 32, torch.bfloat16)
    idx, weights = routing(1, RANK, tokens, experts, topk, "random")
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, experts)
    bad = idx.clone()
    if RANK == WORLD - 1:
        bad[2, 1] = experts
    raises_everywhere(lambda: buffer.dispatch(x, topk_idx=bad, topk_weights=weights,
                                              is_token_in_rank=in_rank,
                                              num_tokens_per_expert=per_expert),
                      f"rank {WORLD - 1}'s arguments: token 2 names expert {experts}")
    narrow = x[:, :31].contiguous() if RANK == 0 else x
    raises_everywhere(lambda: buffer.dispatch(narrow, topk_idx=idx, topk_weights=weights,
                                              is_token_in_rank=in_rank,
                                              num_tokens_per_expert=per_expert),
                      "calls differ across ranks")
    for hook in (False, True):
        def ll():
            _, _, _, _, h = buffer.low_latency_dispatch(x, bad, 8, experts, use_fp8=False,
                                                        return_recv_hook=hook)
            if h:
                h()
        raises_everywhere(ll, "names expert")
    many = tokens_x(2, RANK, 9 if RANK == 0 else 4, 32, torch.bfloat16)
    many_idx, _ = routing(2, RANK, many.shape[0], experts, topk, "random")
    raises_everywhere(lambda: buffer.low_latency_dispatch(many, many_idx, 8, experts,
                                                          use_fp8=False), "exceed the 8 per rank")
    # Usable afterwards.
    normal_case(buffer, 3, "random", tokens, 32, torch.bfloat16, experts, topk, 0)


def main():
    global RANK, WORLD
    case, WORLD, RANK, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=RANK,
                            world_size=WORLD, timeout=timedelta(seconds=120))
    {"dispatch_combine": dispatch_combine, "low_latency": low_latency, "errors": errors}[case]()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
