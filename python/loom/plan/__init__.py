"""Execution plans: collectives written in Python, compiled to JSON plans that Loom's executor
runs (docs/plans.md). No torch needed.

    from loom import plan
    p = plan.Program("my_allreduce", "allreduce", nranks=4, chunks_per_block=4)
    r = p.rank(0)
    r.send(1, p.input[0]); r.recv_reduce(3, p.output[3], p.input[3]); ...
    text = plan.compile(p)                 # checked, fused, JSON
    plan.register(comm, text)              # collective: every rank registers the same plan

``compile`` checks the plan before writing it (every receive matched by a send of its size, no
cycle of waits, no chunk read before it is written, every output chunk written once with exactly
the collective's contributions) and explains a failure by rank, lane and step; it then applies the
fusion passes (``fuse=False`` or a list of pass names to choose) and checks the result again.
Results are cached by a hash of the program and the options.
"""
import json
import os

from . import examples
from ._check import check, dependencies
from ._fuse import PASSES, fuse
from ._program import COLLECTIVES, FORMAT_VERSION, Buffer, Chunks, PlanError, Program, Rank

__all__ = ["Program", "Rank", "Buffer", "Chunks", "PlanError", "check", "fuse", "compile",
           "register", "set_selector", "examples", "PASSES", "COLLECTIVES", "FORMAT_VERSION",
           "dependencies", "to_text", "write_examples"]

_cache = {}


def _passes(option):
    if option is True:
        return PASSES
    if option is False or option is None:
        return ()
    return tuple(option)


def compile(program, fuse=True, cache_dir=None):
    """The plan as JSON text: checked, fused (``fuse``: True, False, or pass names), checked
    again. Cached in memory, and in ``cache_dir`` (or $LOOM_PLAN_CACHE) as NAME-HASH.json."""
    passes = _passes(fuse)
    key = program.digest(repr(passes))
    cache_dir = cache_dir or os.environ.get("LOOM_PLAN_CACHE")
    path = os.path.join(cache_dir, f"{program.name}-{key}.json") if cache_dir else None
    text = _cache.get(key)
    if text is None and path and os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if text is None:
        work = program.copy()
        check(work)
        if passes:
            globals()["fuse"](work, passes)
            check(work)
        text = to_text(work.to_json())
    if path and not os.path.exists(path):
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    _cache[key] = text
    return text


def to_text(plan):
    """A plan dict as JSON text, one operation per line."""
    head = {k: v for k, v in plan.items() if k != "ranks"}
    lines = [json.dumps(head)[:-1] + ', "ranks": [']
    for r, rank in enumerate(plan["ranks"]):
        ops = [json.dumps(op, separators=(",", ":")) for op in rank["ops"]]
        lines.append(' {"ops": [' + (("\n  " + ",\n  ".join(ops)) if ops else "") + "]}" +
                     ("," if r + 1 < len(plan["ranks"]) else ""))
    return "\n".join(lines) + "]}\n"


def write_examples(directory, nranks, fuse=True, names=None):
    """Compiles the example plans for ``nranks`` into ``directory`` (NAME.json, for
    LOOM_PLAN_DIR); returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, program in examples.all_examples(nranks).items():
        if names is not None and name not in names:
            continue
        path = os.path.join(directory, f"{program.name}.json")
        with open(path, "w") as f:
            f.write(compile(program, fuse=fuse))
        paths.append(path)
    return paths


def _text(plan):
    if isinstance(plan, Program):
        return compile(plan)
    if isinstance(plan, dict):
        return json.dumps(plan)
    return str(plan)


def register(comm, plan):
    """Registers a plan (a Program, JSON text, or a file's path) on ``comm`` (a loom.Comm).
    Collective: every rank passes the same plan. Returns its algorithm name, "plan:NAME"."""
    return comm.register_plan(_text(plan))


def set_selector(comm, selector):
    """``selector(collective, nbytes, nranks)`` -> an algorithm name ("plan:NAME", "ring", ...)
    or None for Loom's own choice, per call; None removes it. It must choose the same on every
    rank."""
    comm.set_plan_selector(selector)
