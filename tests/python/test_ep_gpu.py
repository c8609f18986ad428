"""loom.ep.Buffer on CUDA tensors (the kernels of src/device/cuda/ep/) against the CPU path on the
same inputs, bit for bit (tests/python/ep_gpu_worker.py): normal dispatch, cached dispatch and
combine, low latency in bf16 and FP8 with and without hooks, CUDA-graph capture and replay, and
a bad expert id on one rank failing every rank. Skipped without a GPU; more ranks than GPUs
share them."""
import os

import pytest

torch = pytest.importorskip("torch")
from ranks import free_port, run_ranks  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

WORKER = os.path.join(os.path.dirname(__file__), "ep_gpu_worker.py")


def run(case, world, timeout=600):
    codes, outputs = run_ranks(WORKER, case, world, [str(free_port())], timeout)
    assert codes == [0] * world, "\n".join(outputs)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", ["normal", "low_latency", "graph", "errors"])
def test_cuda_matches_cpu(case, world):
    run(case, world)
