"""torch.distributed point-to-point and pipeline parallelism on the "loom" backend (CPU tensors, and
CUDA tensors for the stress where a GPU is):
sends and receives complete in any order of posting, and torch.distributed.pipelining trains like
it does on Gloo. See torch_p2p_worker.py for the cases."""
import os

import pytest

torch = pytest.importorskip("torch")
import loom  # noqa: E402
from ranks import free_port, run_ranks, worlds  # noqa: E402

pytestmark = pytest.mark.skipif(not loom.torch_backend_registered,
                                reason="loom was built without torch")

WORKER = os.path.join(os.path.dirname(__file__), "torch_p2p_worker.py")


def run(case, world, timeout=600, device="cpu"):
    codes, outputs = run_ranks(WORKER, case, world, [str(free_port()), device], timeout)
    assert codes == [0] * world, "\n".join(outputs)
    return outputs


@pytest.mark.parametrize("world", [2, 3])
def test_any_order_of_posting_and_the_ops_built_on_p2p(world):
    run("orders", world)


# Iterations per world size, bounded for a 2-core CI machine (LOOM_P2P_STRESS_ITERS overrides).
STRESS = {2: 60, 3: 30, 4: 16, 5: 12}


@pytest.mark.parametrize("world", worlds([2, 3], [4, 5]))
def test_random_orders_sizes_and_tags_bit_exact(world, monkeypatch):
    if "LOOM_P2P_STRESS_ITERS" not in os.environ:
        monkeypatch.setenv("LOOM_P2P_STRESS_ITERS", str(STRESS[world]))
    run("stress", world)


@pytest.mark.parametrize("world", [2, 3])
def test_random_orders_on_cuda_tensors(world, monkeypatch):
    """The stress on CUDA tensors, ranks sharing the GPUs there are (NCCL's rules: see the
    worker). 1000 iterations unless LOOM_P2P_STRESS_ITERS says otherwise."""
    if not getattr(loom, "torch_cuda", False) or torch.cuda.device_count() < 1:
        pytest.skip("needs a GPU and loom's torch backend built with CUDA")
    if "LOOM_P2P_STRESS_ITERS" not in os.environ:
        monkeypatch.setenv("LOOM_P2P_STRESS_ITERS", "1000")
    outputs = run("stress", world, device="cuda")
    iters = os.environ["LOOM_P2P_STRESS_ITERS"]
    assert all(f"{iters} iterations" in o for o in outputs), outputs


@pytest.mark.parametrize("world", worlds([2], [4]))
def test_pipeline_schedules_train_like_gloo(world):
    outputs = run("pipeline", world)
    assert "ScheduleGPipe" in outputs[-1] and "Schedule1F1B" in outputs[-1], outputs[-1]
