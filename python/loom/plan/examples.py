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


def hierarchical_allreduce(nranks, ranks_per_node, name=None):
    """Nodes of ``ranks_per_node`` consecutive ranks: a ring reduce-scatter inside each node, a
    ring allreduce across the nodes of each column (the ranks with one local index) on the part
    a rank owns, then a ring allgather inside each node. Across nodes each rank moves 1/m of the
    data."""
    m = ranks_per_node
    if m < 1 or nranks % m:
        raise PlanError(f"{nranks} ranks do not make nodes of {m}")
    nodes = nranks // m
    cpb = m * nodes  # node-chunk c, sub-chunk j: chunk c * nodes + j
    p = Program(name or f"hierarchical_allreduce_{nranks}x{m}", "allreduce", nranks,
                chunks_per_block=cpb, scratch_chunks=4 * cpb)
    def run(buffer, c, section=0):  # node-chunk c of a buffer (scratch: of one section)
        base = section * cpb + c * nodes
        return buffer[base:base + nodes]
    partial = lambda c: run(p.scratch, c, 0)  # noqa: E731
    tmp = lambda c: run(p.scratch, c, 1)  # noqa: E731
    for r in range(nranks):
        rank, d, lidx = p.rank(r), r // m, r % m
        left, right = d * m + (lidx - 1) % m, d * m + (lidx + 1) % m
        whole = lambda c: run(p.input, c)  # noqa: E731
        for k in range(m - 1):  # reduce-scatter inside the node
            out, into = (lidx - k) % m, (lidx - k - 1) % m
            rank.send(right, whole(out) if k == 0 else partial(out))
            rank.recv(left, tmp(into))
            rank.reduce(partial(into), [whole(into), tmp(into)])
        owned = (lidx + 1) % m if m > 1 else 0
        node_sum = (lambda j: p.scratch[owned * nodes + j]) if m > 1 else \
            (lambda j: p.input[owned * nodes + j])
        sub = lambda s, j: p.scratch[s * cpb + owned * nodes + j]  # noqa: E731
        out_sub = lambda j: p.output[owned * nodes + j]  # noqa: E731
        left_node, right_node = ((d - 1) % nodes) * m + lidx, ((d + 1) % nodes) * m + lidx
        if nodes == 1:
            # One node: the node's sum is the result.
            src = partial(owned) if m > 1 else whole(owned)
            if m > 1:
                rank.copy(run(p.output, owned), src)
            else:
                rank.reduce(p.output[0:1], [src])
        for k in range(nodes - 1):  # allreduce across the column: reduce-scatter ...
            out, into = (d - k) % nodes, (d - k - 1) % nodes
            rank.send(right_node, node_sum(out) if k == 0 else sub(2, out))
            rank.recv(left_node, sub(3, into))
            rank.reduce(out_sub(into) if k == nodes - 2 else sub(2, into),
                        [node_sum(into), sub(3, into)])
        for k in range(nodes - 1):  # ... and allgather
            rank.send(right_node, out_sub((d + 1 - k) % nodes))
            rank.recv(left_node, out_sub((d - k) % nodes))
        for k in range(m - 1):  # allgather inside the node
            rank.send(right, run(p.output, (lidx + 1 - k) % m))
            rank.recv(left, run(p.output, (lidx - k) % m))
    return p


ALL = {"ring_allreduce": ring_allreduce,
       "recursive_doubling_allreduce": recursive_doubling_allreduce,
       "ring_allgather": ring_allgather, "ring_reducescatter": ring_reducescatter,
       "pairwise_alltoall": pairwise_alltoall, "one_shot_allreduce": one_shot_allreduce}


def all_examples(nranks):
    """Every example that exists for ``nranks`` ranks, by name (the hierarchical allreduce with
    nodes of 2 ranks where that makes 2 nodes or more)."""
    out = {}
    if nranks >= 4 and nranks % 2 == 0:
        out["hierarchical_allreduce"] = hierarchical_allreduce(nranks, 2)
    for name, build in ALL.items():
        try:
            out[name] = build(nranks)
        except PlanError:
            pass
    return out
