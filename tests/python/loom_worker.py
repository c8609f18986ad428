"""One rank of a Python test: python loom_worker.py CASE NRANKS RANK UNIQUE_ID_HEX.

Exits 0 when every check passed; prints what differed otherwise. Inputs are small integers, so
float sums are exact and the expected values do not depend on the reduction order.
"""
import sys
import time

import numpy as np

import loom

DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float16, np.float32, np.float64]


def data(rank, n, dtype, salt=0):
    return ((np.arange(n) * 3 + rank * 7 + salt) % 5 + 1).astype(dtype)


def expect(name, got, want):
    if not np.array_equal(got, want):
        print(f"{name}: got {got[:8]} want {want[:8]}", flush=True)
        sys.exit(1)


def collectives(comm):
    r, n = comm.rank, comm.size
    for dtype in DTYPES:
        count = 13
        inputs = [data(q, count, dtype) for q in range(n)]
        ops = {"sum": np.add, "max": np.maximum, "min": np.minimum}
        if np.dtype(dtype).kind == "f":
            ops["avg"] = None
        for op, fn in ops.items():
            if fn is None:
                want = (np.sum(np.stack(inputs).astype(np.float64), axis=0) / n).astype(dtype)
            else:
                want = inputs[0].copy()
                for q in range(1, n):
                    want = fn(want, inputs[q]).astype(dtype)
            got = inputs[r].copy()
            comm.allreduce(got, op=op)  # in place
            expect(f"allreduce {np.dtype(dtype)} {op}", got, want)
            out = np.zeros(count, dtype)
            comm.reduce(inputs[r], out, op=op, root=n - 1)
            if r == n - 1:
                expect(f"reduce {np.dtype(dtype)} {op}", out, want)
            blocks = [data(q, count * n, dtype, salt=1) for q in range(n)]
            mine = np.zeros(count, dtype)
            comm.reduce_scatter(blocks[r], mine, op=op)
            if fn is not None:
                want_rs = blocks[0][r * count:(r + 1) * count].copy()
                for q in range(1, n):
                    want_rs = fn(want_rs, blocks[q][r * count:(r + 1) * count]).astype(dtype)
                expect(f"reduce_scatter {np.dtype(dtype)} {op}", mine, want_rs)
        gathered = np.zeros(count * n, dtype)
        comm.allgather(inputs[r], gathered)
        expect(f"allgather {np.dtype(dtype)}", gathered, np.concatenate(inputs))
        buf = inputs[r].copy() if r == 0 else np.zeros(count, dtype)
        comm.broadcast(buf, root=0)
        expect(f"broadcast {np.dtype(dtype)}", buf, inputs[0])
        send = np.concatenate([data(r * n + p, 3, dtype) for p in range(n)])
        recv = np.zeros(3 * n, dtype)
        comm.alltoall(send, recv)
        expect(f"alltoall {np.dtype(dtype)}", recv,
               np.concatenate([data(q * n + r, 3, dtype) for q in range(n)]))
        root_out = np.zeros(count * n, dtype) if r == 0 else None
        comm.gather(inputs[r], root_out, root=0)
        if r == 0:
            expect(f"gather {np.dtype(dtype)}", root_out, np.concatenate(inputs))
        piece = np.zeros(count, dtype)
        comm.scatter(np.concatenate(inputs) if r == 0 else None, piece, root=0)
        expect(f"scatter {np.dtype(dtype)}", piece, inputs[r])
    # Point to point: a ring, even ranks send first.
    if n > 1:
        token = np.full(4, r, np.int32)
        got = np.zeros(4, np.int32)
        right, left = (r + 1) % n, (r - 1) % n
        if r % 2 == 0:
            comm.send(token, right)
            comm.recv(got, left)
        else:
            comm.recv(got, left)
            comm.send(token, right)
        expect("send/recv ring", got, np.full(4, left, np.int32))
        # Tags: rank 0 sends tags 1, 2 to rank 1, which receives them the other way round.
        if r == 0:
            comm.send(np.full(3, 10, np.int64), 1, tag=1)
            comm.send(np.full(5, 20, np.int64), 1, tag=2)
        elif r == 1:
            second = comm.recv(np.zeros(5, np.int64), 0, tag=2)
            first = comm.recv(np.zeros(3, np.int64), 0, tag=1)
            expect("tag 2", second, np.full(5, 20, np.int64))
            expect("tag 1", first, np.full(3, 10, np.int64))
    comm.barrier()


def bad_arguments(comm):
    x = np.zeros(4, np.float32)
    checks = [
        lambda: comm.allreduce(x, np.zeros(5, np.float32)),           # size mismatch
        lambda: comm.allreduce(x, np.zeros(4, np.int32)),             # dtype mismatch
        lambda: comm.allreduce(np.zeros((4, 4), np.float32)[:, 1]),   # not contiguous
        lambda: comm.allreduce(x, op="median"),                       # unknown op
        lambda: comm.allreduce(np.zeros(4, np.complex64)),            # no Loom type
        lambda: comm.broadcast(x, root=comm.size),                    # root out of range
    ]
    for i, call in enumerate(checks):
        try:
            call()
        except ValueError:
            continue
        except loom.LoomError as e:
            if "invalid argument" in str(e):
                continue
            print(f"bad argument {i}: LoomError without invalid argument: {e}", flush=True)
            sys.exit(1)
        print(f"bad argument {i} was accepted", flush=True)
        sys.exit(1)
    # Still usable.
    y = np.ones(4, np.float32)
    comm.allreduce(y)
    expect("allreduce after bad arguments", y, np.full(4, comm.size, np.float32))


def rank_exits(comm):
    if comm.rank == 1:
        sys.exit(3)  # leaves without a word, mid-run
    time.sleep(0.2)
    try:
        comm.allreduce(np.ones(1024, np.float32))
    except loom.LoomError as e:
        print(f"rank {comm.rank} saw: {e}", flush=True)
        sys.exit(0)
    print("the collective succeeded without rank 1", flush=True)
    sys.exit(1)


def main():
    case, nranks, rank, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    comm = loom.Comm.init_rank(nranks, bytes.fromhex(uid), rank, timeout_ms=20000)
    {"collectives": collectives, "bad_arguments": bad_arguments, "rank_exits": rank_exits}[case](comm)
    comm.destroy()


if __name__ == "__main__":
    main()
