"""loom.ep.Buffer (DeepEP's API over Loom) against references built with all_to_all_single on
Gloo in the same job (tests/python/ep_worker.py): normal dispatch and combine with random
routings, all experts on one rank, ranks receiving nothing, -1 experts, empty batches, odd hidden
sizes, bf16 and fp32, cached and worst-case dispatches, many rounds; low latency in bf16 and FP8,
with hooks and zero copy; bad arguments on one rank failing every rank."""
import os

import pytest

torch = pytest.importorskip("torch")
from ranks import free_port, run_ranks  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "ep_worker.py")


def run(case, world, timeout=300):
    codes, outputs = run_ranks(WORKER, case, world, [str(free_port())], timeout)
    assert codes == [0] * world, "\n".join(outputs)


@pytest.mark.parametrize("world", [2, 3, 5])
def test_dispatch_and_combine_match_all_to_all(world):
    run("dispatch_combine", world)


@pytest.mark.parametrize("world", [2, 3])
def test_low_latency_matches_all_to_all(world):
    run("low_latency", world)


def test_bad_arguments_fail_every_rank():
    run("errors", 3)
