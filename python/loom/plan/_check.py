"""The checker: runs every rank's operations on symbolic data, as Loom's executor orders them.

Each chunk holds the multiset of (rank, input chunk) contributions it was computed from. An
operation runs once every earlier operation it conflicts with (reads what it writes, writes what
it reads or writes: the dependencies Loom derives, docs/plans.md) has run and its lane (the sends
to one peer, the receives from one peer, a local lane) has reached it; a receive also needs the
matching send. The checker reports by rank, lane and step: a receive without a send or of another
size, a cycle of waits, a chunk read before it is written, an output chunk written more or less
than once or holding the wrong contributions. It marks the reductions that complete a chunk final
(averages divide there).
"""
from collections import deque

from ._program import PlanError


def conflicts(earlier, later):
    """Whether ``later`` must wait for ``earlier`` (same rank, program order)."""
    for w in earlier.writes():
        if any(w.overlaps(r) for r in later.reads()) or any(w.overlaps(x) for x in later.writes()):
            return True
    return any(r.overlaps(w) for r in earlier.reads() for w in later.writes())


def dependencies(ops):
    return [[j for j in range(i) if conflicts(ops[j], ops[i])] for i in range(len(ops))]


def lane_of(op):
    if op.kind == "send":
        return f"send to {op.peer}"
    if op.kind in ("recv", "recv_reduce"):
        return f"recv from {op.peer}"
    return f"local {op.lane}"


class _Rank:
    def __init__(self, program, r):
        self.ops = program.ranks[r].ops
        self.deps = dependencies(self.ops)
        self.lanes = {}
        for i, op in enumerate(self.ops):
            self.lanes.setdefault(lane_of(op), []).append(i)
        self.head = {lane: 0 for lane in self.lanes}
        self.done = [False] * len(self.ops)
        self.values = {}
        for i in range(len(program.input)):
            self.values[("input", i)] = ((r, i),)
        self.writes = {}

    def where(self, i):
        lane = lane_of(self.ops[i])
        return f"lane '{lane}' step {self.lanes[lane].index(i)} (op {i}: {self.ops[i].describe()})"


def _expected(program, r, index):
    n, cpb = program.nranks, program.chunks_per_block
    block, j = divmod(index, cpb)
    if program.collective == "allreduce":
        return tuple((p, index) for p in range(n))
    if program.collective == "reducescatter":
        return tuple((p, r * cpb + j) for p in range(n))
    if program.collective == "allgather":
        return ((block, j),)
    return ((block, r * cpb + j),)  # alltoall


class Checker:
    def __init__(self, program):
        self.program = program
        self.n = program.nranks
        self.cpb = program.chunks_per_block
        self.ranks = [_Rank(program, r) for r in range(self.n)]
        self.channels = {}

    def fail(self, r, i, what):
        raise PlanError(f"plan '{self.program.name}': rank {r}, {self.ranks[r].where(i)}: {what}")

    def read(self, r, i, ref):
        values = []
        for k in ref.indices():
            v = self.ranks[r].values.get((ref.buffer, k))
            if v is None:
                self.fail(r, i, f"reads {ref.buffer}[{k}] before anything writes it")
            values.append(v)
        return values

    def write(self, r, i, ref, values):
        op = self.ranks[r].ops[i]
        for k, v in zip(ref.indices(), values):
            self.ranks[r].values[(ref.buffer, k)] = v
            if ref.buffer == "output":
                self.ranks[r].writes[k] = self.ranks[r].writes.get(k, 0) + 1
        if op.kind in ("reduce", "recv_reduce") and self.program.collective in (
                "allreduce", "reducescatter"):
            op.final = all(len({c[0] for c in v}) == self.n and len(v) == self.n for v in values)

    def residues(self, ref):
        return [k % self.cpb for k in ref.indices()]

    def ready(self, r, i):
        rank, op = self.ranks[r], self.ranks[r].ops[i]
        if not all(rank.done[j] for j in rank.deps[i]):
            return False
        if op.kind in ("recv", "recv_reduce"):
            return bool(self.channels.get((op.peer, r)))
        return True

    def run_op(self, r, i):
        op = self.ranks[r].ops[i]
        if op.kind == "send":
            self.channels.setdefault((r, op.peer), deque()).append(
                (i, self.read(r, i, op.srcs[0]), self.residues(op.srcs[0])))
            return
        if op.kind in ("recv", "recv_reduce"):
            j, values, residues = self.channels[(op.peer, r)].popleft()
            sender = self.ranks[op.peer].where(j)
            if len(values) != op.dst.count:
                self.fail(r, i, f"receives {op.dst.count} chunk(s) but rank {op.peer} sends "
                                f"{len(values)} there ({sender})")
            if residues != self.residues(op.dst):
                self.fail(r, i, f"receives into chunks of other sizes than rank {op.peer} "
                                f"sends ({sender}): chunk i of a block has the size of slice "
                                f"i % chunks_per_block")
            if op.kind == "recv_reduce":
                if self.residues(op.srcs[0]) != self.residues(op.dst):  # as Loom's loader
                    self.fail(r, i, f"{op.srcs[0]} and {op.dst} are chunks of different sizes")
                mine = self.read(r, i, op.srcs[0])
                values = [tuple(sorted(a + b)) for a, b in zip(mine, values)]
            self.write(r, i, op.dst, values)
            return
        for s in op.srcs:
            if self.residues(s) != self.residues(op.dst):
                self.fail(r, i, f"{s} and {op.dst} are chunks of different sizes")
        operands = [self.read(r, i, s) for s in op.srcs]
        if op.kind == "copy":
            self.write(r, i, op.dst, operands[0])
        else:
            self.write(r, i, op.dst, [tuple(sorted(sum(vs, ()))) for vs in zip(*operands)])

    def step(self):
        moved = False
        for r, rank in enumerate(self.ranks):
            for lane, order in rank.lanes.items():
                while rank.head[lane] < len(order) and self.ready(r, order[rank.head[lane]]):
                    i = order[rank.head[lane]]
                    self.run_op(r, i)
                    rank.done[i] = True
                    rank.head[lane] += 1
                    moved = True
        return moved

    def stuck(self):
        lines = []
        for r, rank in enumerate(self.ranks):
            for lane, order in rank.lanes.items():
                if rank.head[lane] >= len(order):
                    continue
                i = order[rank.head[lane]]
                waits = [j for j in rank.deps[i] if not rank.done[j]]
                why = (f"waits for op {waits[0]} ({rank.ops[waits[0]].describe()})" if waits
                       else f"waits for a send from rank {rank.ops[i].peer} that never comes")
                lines.append(f"rank {r}, {rank.where(i)} {why}")
        return lines

    def check(self):
        while self.step():
            pass
        stuck = self.stuck()
        if stuck:
            raise PlanError(f"plan '{self.program.name}' never finishes (a missing send or a "
                            f"cycle of waits):\n  " + "\n  ".join(stuck))
        for (src, dst), queue in self.channels.items():
            if queue:
                raise PlanError(f"plan '{self.program.name}': rank {src}, "
                                f"{self.ranks[src].where(queue[0][0])}: rank {dst} never "
                                f"receives it")
        for r, rank in enumerate(self.ranks):
            for k in range(len(self.program.output)):
                writes = rank.writes.get(k, 0)
                if writes != 1:
                    raise PlanError(f"plan '{self.program.name}': rank {r} writes output[{k}] "
                                    f"{writes} times (each output chunk must be written once)")
                got, want = rank.values[("output", k)], tuple(sorted(_expected(self.program, r, k)))
                if got != want:
                    raise PlanError(f"plan '{self.program.name}': rank {r} output[{k}] holds "
                                    f"{_contributions(got)} but must hold {_contributions(want)}")


def _contributions(value):
    return "{" + ", ".join(f"rank {r} input[{i}]" for r, i in value) + "}"


def check(program):
    """Checks ``program`` (raises PlanError explaining the first problem) and marks its final
    reductions."""
    Checker(program).check()
    return program
