"""Example plans. Each builder returns a Program written the plain way (receive into scratch,
then reduce); compile() fuses it."""
from ._program import PlanError, Program


def ring_allreduce(nranks, chunk_bytes=1 << 20, max_parts=8, name=None):
    """Reduce-scatter ring then allgather ring (N-1 steps each), pipelined in parts. Partial sums
    travel in scratch, so each output chunk is written once."""
    n = nranks
    p = Program(name or f"ring_allreduce_{n}", "allreduce", n, chunks_per_block=n,
                scratch_chunks=2 * n,
                pipeline={"chunk_bytes": chunk_bytes, "max_parts": max_parts})
    for r in range(n):
        rank, left, right = p.rank(r), (r - 1) % n, (r + 1) % n
        if n == 1:
            rank.reduce(p.output[0], [p.input[0]])
            continue
        for k in range(n - 1):
            out, into = (r - k) % n, (r - k - 1) % n
            rank.send(right, (p.input if k == 0 else p.scratch)[out])
            rank.recv(left, p.scratch[n + into])
            rank.reduce(p.output[into] if k == n - 2 else p.scratch[into],
                        [p.input[into], p.scratch[n + into]])
        for k in range(n - 1):
            rank.send(right, p.output[(r + 1 - k) % n])
            rank.recv(left, p.output[(r - k) % n])
    return p


def recursive_doubling_allreduce(nranks, name=None):
    """log2(N) exchanges of the whole vector with the partner r ^ 2^k; N a power of two. Partial
    sums alternate between two scratch chunks; the last step writes the output."""
    n = nranks
    if n & (n - 1):
        raise PlanError(f"recursive doubling needs a power-of-two rank count, not {n}")
    steps = n.bit_length() - 1
    p = Program(name or f"recursive_doubling_allreduce_{n}", "allreduce", n, scratch_chunks=4)
    for r in range(n):
        rank, current = p.rank(r), p.input[0]
        if n == 1:
            rank.reduce(p.output[0], [current])
        for step in range(steps):
            partner, tmp = r ^ (1 << step), p.scratch[step % 2]
            rank.send(partner, current)
            rank.recv(partner, tmp)
            # Lower rank first, so that both partners add in the same order (same bits).
            operands = [current, tmp] if r < partner else [tmp, current]
            current = p.output[0] if step == steps - 1 else p.scratch[2 + step % 2]
            rank.reduce(current, operands)
    return p


def ring_allgather(nranks, name=None):
    n = nranks
    p = Program(name or f"ring_allgather_{n}", "allgather", n)
    for r in range(n):
        rank, left, right = p.rank(r), (r - 1) % n, (r + 1) % n
        rank.copy(p.output[r], p.input[0])
        for k in range(n - 1):
            rank.send(right, p.input[0] if k == 0 else p.output[(r - k) % n])
            rank.recv(left, p.output[(r - k - 1) % n])
    return p


def ring_reducescatter(nranks, name=None):
    """Partial sums travel around the ring in scratch; the last step lands in the output."""
    n = nranks
    p = Program(name or f"ring_reducescatter_{n}", "reducescatter", n, scratch_chunks=2 * n)
    for r in range(n):
        rank, left, right = p.rank(r), (r - 1) % n, (r + 1) % n
        if n == 1:
            rank.reduce(p.output[0], [p.input[0]])
            continue
        for k in range(n - 1):
            out, into = (r - k - 1) % n, (r - k - 2) % n
            last = k == n - 2
            rank.send(right, (p.input if k == 0 else p.scratch)[out])
            rank.recv(left, p.scratch[n + into])
            rank.reduce(p.output[0] if last else p.scratch[into],
                        [p.input[into], p.scratch[n + into]])
    return p


def pairwise_alltoall(nranks, name=None):
    n = nranks
    p = Program(name or f"pairwise_alltoall_{n}", "alltoall", n)
    for r in range(n):
        rank = p.rank(r)
        rank.copy(p.output[r], p.input[r])
        for s in range(1, n):
            to, frm = (r + s) % n, (r - s) % n
            rank.send(to, p.input[to])
            rank.recv(frm, p.output[frm])
    return p


def one_shot_allreduce(nranks, max_bytes=256 << 10, name=None):
    """Small sizes: every rank sends its input to every other, then reduces all N in rank order
    (the same order, so the same bits, on every rank)."""
    n = nranks
    p = Program(name or f"one_shot_allreduce_{n}", "allreduce", n, scratch_chunks=n,
                max_bytes=max_bytes)
    for r in range(n):
        rank = p.rank(r)
        for s in range(1, n):
            rank.send((r + s) % n, p.input[0])
        for s in range(1, n):
            frm = (r - s) % n
            rank.recv(frm, p.scratch[frm])
        rank.reduce(p.output[0], [p.input[0] if q == r else p.scratch[q] for q in range(n)])
    return p


ALL = {"ring_allreduce": ring_allreduce,
       "recursive_doubling_allreduce": recursive_doubling_allreduce,
       "ring_allgather": ring_allgather, "ring_reducescatter": ring_reducescatter,
       "pairwise_alltoall": pairwise_alltoall, "one_shot_allreduce": one_shot_allreduce}


def all_examples(nranks):
    """Every example that exists for ``nranks`` ranks, by name."""
    out = {}
    for name, build in ALL.items():
        try:
            out[name] = build(nranks)
        except PlanError:
            pass
    return out
