"""Programs of the plan DSL: ranks, buffers cut into chunks, and each rank's operations in order."""
import copy
import hashlib
import json

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
FORMAT_VERSION = 1


class PlanError(ValueError):
    """A plan that cannot be right, explained by rank, lane and step."""


class Chunks:
    """``count`` consecutive chunks of one buffer from ``index`` (one block at most)."""

    __slots__ = ("buffer", "index", "count")

    def __init__(self, buffer, index, count=1):
        self.buffer, self.index, self.count = buffer, index, count

    def key(self):
        return (self.buffer, self.index, self.count)

    def indices(self):
        return range(self.index, self.index + self.count)

    def overlaps(self, other):
        return (self.buffer == other.buffer and self.index < other.index + other.count
                and other.index < self.index + self.count)

    def to_json(self):
        return [self.buffer, self.index] + ([self.count] if self.count != 1 else [])

    def __eq__(self, other):
        return isinstance(other, Chunks) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        if self.count == 1:
            return f"{self.buffer}[{self.index}]"
        return f"{self.buffer}[{self.index}:{self.index + self.count}]"


class Buffer:
    """A buffer of every rank, indexed by chunk: ``p.input[3]``, ``p.output[0:4]``."""

    def __init__(self, program, name, chunks):
        self.program, self.name, self.chunks = program, name, chunks

    def __len__(self):
        return self.chunks

    def __getitem__(self, item):
        if isinstance(item, slice):
            start, stop, step = item.indices(self.chunks)
            if step != 1 or stop <= start:
                raise PlanError(f"{self.name}[{item}] is not a non-empty run of chunks")
            ref = Chunks(self.name, start, stop - start)
        else:
            index = item + self.chunks if item < 0 else item
            if not 0 <= index < self.chunks:
                raise PlanError(f"{self.name} has {self.chunks} chunks, not index {item}")
            ref = Chunks(self.name, index)
        cpb = self.program.chunks_per_block
        if ref.index // cpb != (ref.index + ref.count - 1) // cpb:
            raise PlanError(f"{ref} crosses a block boundary ({cpb} chunks a block)")
        return ref


class Op:
    """One operation: kind is send, recv, recv_reduce, copy or reduce."""

    __slots__ = ("kind", "peer", "dst", "srcs", "lane", "final")

    def __init__(self, kind, peer=-1, dst=None, srcs=(), lane=0):
        self.kind, self.peer, self.dst, self.srcs, self.lane = kind, peer, dst, list(srcs), lane
        self.final = False

    def reads(self):
        return self.srcs

    def writes(self):
        return [self.dst] if self.dst is not None else []

    def describe(self):
        if self.kind == "send":
            return f"send {self.srcs[0]} to rank {self.peer}"
        if self.kind == "recv":
            return f"recv {self.dst} from rank {self.peer}"
        if self.kind == "recv_reduce":
            return f"recv_reduce {self.dst} = {self.srcs[0]} + data from rank {self.peer}"
        if self.kind == "copy":
            return f"copy {self.dst} = {self.srcs[0]} (lane {self.lane})"
        return f"reduce {self.dst} = {' + '.join(map(str, self.srcs))} (lane {self.lane})"

    def to_json(self):
        out = {"op": self.kind}
        if self.kind in ("send", "recv", "recv_reduce"):
            out["peer"] = self.peer
        else:
            out["lane"] = self.lane
        if self.dst is not None:
            out["dst"] = self.dst.to_json()
        if self.kind == "reduce":
            out["srcs"] = [s.to_json() for s in self.srcs]
        elif self.srcs:
            out["src"] = self.srcs[0].to_json()
        if self.final:
            out["final"] = True
        return out


class Rank:
    """One rank's operations, in program order (what an operation reads, earlier ones wrote)."""

    def __init__(self, program, rank):
        self.program, self.rank, self.ops = program, rank, []

    def _peer(self, peer):
        if not 0 <= peer < self.program.nranks or peer == self.rank:
            raise PlanError(f"rank {self.rank}: peer {peer} is not another rank of "
                            f"{self.program.nranks}")
        return peer

    def _add(self, op):
        for ref in op.srcs + op.writes():
            if not isinstance(ref, Chunks):
                raise PlanError(f"rank {self.rank}: {ref!r} is not a chunk (p.input[i], ...)")
        if op.dst is not None and op.dst.buffer == "input":
            raise PlanError(f"rank {self.rank}: {op.describe()} writes the input, which is "
                            f"read-only")
        self.ops.append(op)
        return op

    def send(self, peer, src):
        return self._add(Op("send", self._peer(peer), None, [src]))

    def recv(self, peer, dst):
        return self._add(Op("recv", self._peer(peer), dst))

    def recv_reduce(self, peer, dst, src):
        """dst = src (+) what arrives from peer (src may be dst)."""
        return self._add(Op("recv_reduce", self._peer(peer), dst, [src]))

    def copy(self, dst, src, lane=0):
        return self._add(Op("copy", -1, dst, [src], lane))

    def reduce(self, dst, srcs, lane=0):
        """dst = srcs[0] (+) srcs[1] (+) ..., in that order."""
        return self._add(Op("reduce", -1, dst, list(srcs), lane))


class Program:
    """A collective for ``nranks`` ranks. Buffers are cut into blocks of the call's count
    (allreduce: one block in and out; allgather: one per rank out; reducescatter: one per rank in;
    alltoall: one per rank both ways), each into ``chunks_per_block`` chunks."""

    def __init__(self, name, collective, nranks, chunks_per_block=1, scratch_chunks=0,
                 min_bytes=0, max_bytes=None, pipeline=None):
        if collective not in COLLECTIVES:
            raise PlanError(f"collective {collective!r} is not one of {', '.join(COLLECTIVES)}")
        if nranks < 1 or chunks_per_block < 1 or scratch_chunks < 0:
            raise PlanError("nranks and chunks_per_block must be at least 1")
        self.name, self.collective, self.nranks = name, collective, nranks
        self.chunks_per_block = chunks_per_block
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self.pipeline = dict(pipeline) if pipeline else None
        in_blocks = nranks if collective in ("reducescatter", "alltoall") else 1
        out_blocks = nranks if collective in ("allgather", "alltoall") else 1
        self.input = Buffer(self, "input", in_blocks * chunks_per_block)
        self.output = Buffer(self, "output", out_blocks * chunks_per_block)
        self.scratch = Buffer(self, "scratch", scratch_chunks)
        self.ranks = [Rank(self, r) for r in range(nranks)]

    def rank(self, r):
        return self.ranks[r]

    def buffer(self, name):
        return {"input": self.input, "output": self.output, "scratch": self.scratch}[name]

    def copy(self):
        return copy.deepcopy(self)

    def to_json(self):
        plan = {"loom_plan": FORMAT_VERSION, "name": self.name, "collective": self.collective,
                "nranks": self.nranks, "min_bytes": self.min_bytes, "max_bytes": self.max_bytes,
                "chunks_per_block": self.chunks_per_block, "scratch_chunks": len(self.scratch)}
        if self.pipeline:
            plan["pipeline"] = {"chunk_bytes": int(self.pipeline["chunk_bytes"]),
                                "max_parts": int(self.pipeline.get("max_parts", 8))}
        plan["ranks"] = [{"ops": [op.to_json() for op in r.ops]} for r in self.ranks]
        return plan

    def digest(self, extra=""):
        text = json.dumps(self.to_json(), sort_keys=True) + extra
        return hashlib.sha256(text.encode()).hexdigest()[:16]
