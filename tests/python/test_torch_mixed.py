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


def test_hetero_torch_bench_checks_every_op():
    """bench/hetero_torch_bench.py, the benchmark of this job against staging through Gloo: its
    bit-exact checks of both paths and its tables, on CPU ranks here (--gpus 0) and with a GPU
    rank on a GPU host. About 6 s: in CI (no GPU) only with LOOM_TEST_WIDE_WORLDS=1 (`make
    test-torch-full`), to keep CI's time."""
    if not loom.torch_backend_registered:
        pytest.skip("loom's torch backend is not built")
    gpus = 1 if torch.cuda.device_count() > 0 and getattr(loom, "torch_cuda", False) else 0
    if gpus == 0 and os.environ.get("LOOM_TEST_WIDE_WORLDS", "0") != "1":
        pytest.skip("CPU ranks only: run by make test-torch-full (LOOM_TEST_WIDE_WORLDS=1)")
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "hetero_torch_bench.py")
    ops = ["allreduce", "broadcast", "allgather", "reducescatter"]
    out = subprocess.run([sys.executable, bench, "-np", "2", "--gpus", str(gpus), "-b", "8",
                          "-e", "512", "-f", "8", "-n", "2", "-w", "1"] + ops,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for op in ops:
        assert f"#### {op}, 2 ranks ({gpus} GPU)" in out.stdout
        # 8 B, 64 B, 512 B (allgather and reduce-scatter skip 8 B: 1 element per rank)
        assert len([line for line in out.stdout.splitlines() if line.startswith(op + ",")]) >= 2
