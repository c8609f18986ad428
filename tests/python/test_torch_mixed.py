"""A torch job whose ranks have different devices: rank 0 a GPU, the others none (as on CPU-only
hosts: CUDA_VISIBLE_DEVICES=""), every collective on each rank's own device (issue 11's item 4).
Needs a GPU and loom's torch backend built with CUDA; skipped otherwise."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import loom  # noqa: E402
from ranks import free_port  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "torch_mixed_worker.py")


@pytest.mark.parametrize("world", [2, 3])
def test_gpu_rank_beside_cpu_ranks(world):
    if not loom.torch_backend_registered or not getattr(loom, "torch_cuda", False):
        pytest.skip("loom's torch backend was built without CUDA")
    if torch.cuda.device_count() < 1:
        pytest.skip("needs a GPU")
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        if rank > 0:
            env["CUDA_VISIBLE_DEVICES"] = ""
        procs.append(subprocess.Popen([sys.executable, WORKER, str(world), str(rank), port],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"the mixed-device job of {world} ranks hung")
    assert [p.returncode for p in procs] == [0] * world, "\n".join(outputs)
    for rank, out in enumerate(outputs):
        assert f"rank {rank} on {'cuda:0' if rank == 0 else 'cpu'}: ok" in out, out
