"""Fusion passes: each rewrites a rank's operations so that a chunk makes fewer trips through
memory, with a switch of its own (compile(fuse=...)). They only fuse through scratch chunks that
nothing else reads, and only where nothing between the two operations touches what moves.

  recv_reduce: recv T; ...; reduce D = X + T     ->  recv_reduce D = X + incoming
  recv_copy:   recv T; ...; copy D = T           ->  recv D
  reduce_copy: reduce T = srcs; ...; copy D = T  ->  reduce D = srcs
  copy_send:   copy T = S; ...; send T           ->  send S

A send of what a receive (or recv_reduce) just wrote needs no pass: Loom streams it behind the
receive (reduce-copy-send in MSCCL++'s words).
"""
from ._program import Op

PASSES = ("recv_reduce", "recv_copy", "reduce_copy", "copy_send")


def _touches(op, ref):
    return any(ref.overlaps(x) for x in op.reads() + op.writes())


def _writes(op, ref):
    return any(ref.overlaps(x) for x in op.writes())


def _only_reader(ops, i, k, ref):
    """ops[k] is the only operation after ops[i] reading ``ref`` before it is written again."""
    for j in range(i + 1, len(ops)):
        if j == k:
            continue
        if any(ref.overlaps(r) for r in ops[j].reads()):
            if j < k:
                return False
            # A later reader: fine only if something rewrote ref first.
            return any(_writes(ops[m], ref) for m in range(k + 1, j))
        if j > k and _writes(ops[j], ref):
            return True
    return True


def _next_reader(ops, i, ref):
    for k in range(i + 1, len(ops)):
        if any(ref.overlaps(r) for r in ops[k].reads()):
            return k
        if _writes(ops[k], ref):
            return None
    return None


def _quiet_between(ops, i, k, refs, written_only=()):
    """Nothing strictly between i and k touches refs, nor writes written_only."""
    for j in range(i + 1, k):
        if any(_touches(ops[j], ref) for ref in refs):
            return False
        if any(_writes(ops[j], ref) for ref in written_only):
            return False
    return True


def _fuse_once(ops, name):
    for i, op in enumerate(ops):
        produces = op.kind in ("recv", "reduce", "copy") and op.dst.buffer == "scratch"
        if not produces:
            continue
        t = op.dst
        k = _next_reader(ops, i, t)
        if k is None or not _only_reader(ops, i, k, t):
            continue
        use = ops[k]
        if name == "recv_reduce" and op.kind == "recv" and use.kind == "reduce" and \
                len(use.srcs) == 2 and t in use.srcs and use.dst.count == t.count:
            other = use.srcs[1] if use.srcs[0] == t else use.srcs[0]
            if other == t or not _quiet_between(ops, i, k, [use.dst], [other]):
                continue
            fused = Op("recv_reduce", op.peer, use.dst, [other])
        elif name == "recv_copy" and op.kind == "recv" and use.kind == "copy" and \
                use.srcs[0] == t:
            if not _quiet_between(ops, i, k, [use.dst]):
                continue
            fused = Op("recv", op.peer, use.dst)
        elif name == "reduce_copy" and op.kind == "reduce" and use.kind == "copy" and \
                use.srcs[0] == t:
            if not _quiet_between(ops, i, k, [use.dst], op.srcs):
                continue
            fused = Op("reduce", -1, use.dst, op.srcs, op.lane)
        elif name == "copy_send" and op.kind == "copy" and use.kind == "send" and \
                use.srcs[0] == t:
            if not _quiet_between(ops, i, k, [], op.srcs):
                continue
            # The send stays where it was (its channel order); the copy goes.
            return ops[:i] + ops[i + 1:k] + [Op("send", use.peer, None, op.srcs)] + ops[k + 1:]
        else:
            continue
        return ops[:i] + [fused] + ops[i + 1:k] + ops[k + 1:]
    return None


def fuse(program, passes=PASSES):
    """Applies the named passes to every rank until none applies; returns how many fusions."""
    unknown = set(passes) - set(PASSES)
    if unknown:
        raise ValueError(f"unknown fusion pass(es) {sorted(unknown)}: choose from {PASSES}")
    count = 0
    for rank in program.ranks:
        for name in PASSES:
            if name not in passes:
                continue
            while True:
                fused = _fuse_once(rank.ops, name)
                if fused is None:
                    break
                rank.ops = fused
                count += 1
    return count
