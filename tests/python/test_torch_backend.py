"""torch.distributed on the "loom" backend (CPU tensors), checked against Gloo in the same job."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import loom  # noqa: E402
from ranks import free_port, run_ranks  # noqa: E402

pytestmark = pytest.mark.skipif(not loom.torch_backend_registered,
                                reason="loom was built without torch")

WORKER = os.path.join(os.path.dirname(__file__), "torch_worker.py")


def run(case, world, timeout=300):
    return run_ranks(WORKER, case, world, [str(free_port())], timeout)


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_collectives_match_gloo(world):
    codes, outputs = run("collectives", world)
    assert codes == [0] * world, "\n".join(outputs)


def test_unsupported_op_is_a_clear_error():
    codes, outputs = run("unsupported", 2)
    assert codes == [0, 0], "\n".join(outputs)


def test_a_rank_that_exits_makes_the_others_raise():
    codes, outputs = run("rank_exits", 3)
    assert codes == [0, 3, 0], "\n".join(outputs)


def test_a_rank_that_never_joins_times_out_the_others():
    codes, outputs = run("never_joins", 3)
    assert codes == [0, 0, 0], "\n".join(outputs)
    assert "raised after" in outputs[0] and "raised after" in outputs[2], "\n".join(outputs)


def test_abort_makes_every_rank_raise():
    codes, outputs = run("abort", 3)
    assert codes == [0, 0, 0], "\n".join(outputs)


@pytest.mark.parametrize("world", [2, 3])
def test_dtensor_and_functional_collectives(world):
    codes, outputs = run("dtensor", world)
    assert codes == [0] * world, "\n".join(outputs)


def test_ddp_trains_like_gloo():
    codes, outputs = run("ddp", 3)
    assert codes == [0, 0, 0], "\n".join(outputs)


def test_torchrun_example():
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_allreduce.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
         f"--master-port={free_port()}", example],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("loom ok") == 2, result.stdout + result.stderr
