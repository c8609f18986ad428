"""Starts one process per rank for the Python tests (no launcher needed) and collects them."""
import os
import socket
import subprocess
import sys

import pytest


def worlds(ci, wide):
    """The world sizes a multi-rank test runs at: `ci` in `make test`, which must fit a 2-core CI
    machine, and also `wide` (more ranks than cores, minutes each there) with
    LOOM_TEST_WIDE_WORLDS=1, which `make test-torch-full` sets."""
    if os.environ.get("LOOM_TEST_WIDE_WORLDS", "0") == "1":
        return sorted(set(ci) | set(wide))
    return list(ci)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, case, world, rest, timeout):
    """Runs `python worker case world rank *rest` for every rank; returns (exit codes, outputs).
    Fails the test, killing every rank, if one runs past `timeout` seconds."""
    procs = [subprocess.Popen([sys.executable, worker, case, str(world), str(r), *rest],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outputs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{case} with {world} ranks hung")
        outputs.append(out)
        codes.append(p.returncode)
    return codes, outputs
