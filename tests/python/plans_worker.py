"""One rank of test_plans.py: python plans_worker.py CASE NRANKS RANK UNIQUE_ID_HEX [ARG].

Exits 0 when every check passed; prints what differed otherwise. Inputs are small integers, so
float sums are exact in any order."""
import sys

import numpy as np

import loom
from loom import plan
from loom.plan import examples

DTYPES = [np.float32, np.int32, np.float64]


def data(rank, n, dtype):
    return ((np.arange(n) * 3 + rank * 7) % 5 + 1).astype(dtype)


def fail(what):
    print(what, flush=True)
    sys.exit(1)


def run_examples(comm, fused):
    r, n = comm.rank, comm.size
    chosen = {}
    plan.set_selector(comm, lambda collective, nbytes, nranks: chosen.get(collective))
    for name, program in examples.all_examples(n).items():
        algorithm = plan.register(comm, plan.compile(program, fuse=fused == "fused"))
        chosen[program.collective] = algorithm
        for dtype in DTYPES:
            for count in (1, 13, 1000 + 7, (1 << 18) + 3):
                ins = [data(q, count * (n if program.collective in ("reducescatter", "alltoall")
                                        else 1), dtype) for q in range(n)]
                if program.collective == "allreduce":
                    out = np.zeros(count, dtype)
                    comm.allreduce(ins[r], out)
                    want = np.sum(np.stack(ins), axis=0).astype(dtype)
                    inplace = ins[r].copy()
                    comm.allreduce(inplace)
                    if not np.array_equal(inplace, want):
                        fail(f"{name} in place {np.dtype(dtype)} {count}")
                elif program.collective == "allgather":
                    out = np.zeros(count * n, dtype)
                    comm.allgather(ins[r], out)
                    want = np.concatenate(ins)
                elif program.collective == "reducescatter":
                    out = np.zeros(count, dtype)
                    comm.reduce_scatter(ins[r], out)
                    want = np.sum(np.stack(ins), axis=0).astype(dtype)[r * count:(r + 1) * count]
                else:
                    out = np.zeros(count * n, dtype)
                    comm.alltoall(ins[r], out)
                    want = np.concatenate([ins[q][r * count:(r + 1) * count] for q in range(n)])
                if not np.array_equal(out, want):
                    fail(f"{name} ({algorithm}) {np.dtype(dtype)} count {count}: got {out[:8]} "
                         f"want {want[:8]}")
    plan.set_selector(comm, None)


def different(comm):
    program = (examples.one_shot_allreduce if comm.rank == 1 else examples.ring_allreduce)(2)
    try:
        plan.register(comm, program)
    except (ValueError, loom.LoomError) as e:
        if "ranks register different plans" not in str(e):
            fail(f"unexpected message: {e}")
    else:
        fail("registration of different plans succeeded")
    x = np.ones(5, np.float32)
    comm.allreduce(x)  # still usable
    if not np.array_equal(x, np.full(5, 2, np.float32)):
        fail(f"allreduce after the refusal: {x}")


def selector(comm):
    plan.register(comm, examples.ring_allreduce(2))
    seen = []

    def choose(collective, nbytes, nranks):
        seen.append((collective, nbytes, nranks))
        return "plan:ring_allreduce_2" if nbytes >= 64 else None
    plan.set_selector(comm, choose)
    for count in (4, 100):
        x = np.ones(count, np.float32)
        comm.allreduce(x)
        if not np.array_equal(x, np.full(count, 2, np.float32)):
            fail(f"allreduce {count}: {x[:4]}")
    if ("allreduce", 400, 2) not in seen:
        fail(f"the selector saw {seen}")
    plan.set_selector(comm, lambda *a: 1 / 0)
    try:
        comm.allreduce(np.ones(4, np.float32))
    except (loom.LoomError, ValueError) as e:
        if "selector raised" not in str(e):
            fail(f"unexpected message: {e}")
    else:
        fail("a raising selector went unnoticed")


def main():
    case, n, r, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
    comm = loom.Comm.init_rank(n, uid, r, timeout_ms=60000)
    if case == "examples":
        run_examples(comm, sys.argv[5])
    elif case == "different":
        different(comm)
    elif case == "selector":
        selector(comm)
    comm.destroy()


if __name__ == "__main__":
    main()
