"""The "loom" torch backend on an accelerator that is neither the CPU nor CUDA: loomemu, the
emulated device as torch's PrivateUse1 device (loom.emu), served through its Loom plug-in's torch
entries (docs/plugins.md, "Torch"). Every collective and send/recv against Gloo on the CPU, DDP
and FSDP2 steps bit-equal to the same steps on the CPU with Gloo, and loomemu ranks beside CPU
ranks in one job (torch_emu_worker.py)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import loom  # noqa: E402
from ranks import free_port, run_ranks, worlds  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "torch_emu_worker.py")


def emu_available():
    if not loom.torch_backend_registered:
        return "loom's torch backend is not built"
    import importlib.util
    if importlib.util.find_spec("loom.emu._C") is None:
        return "loom.emu is not built (the package was built without torch)"
    return None


def run(case, world, timeout=300, ranks=None):
    """Runs CASE on WORLD ranks; every rank (or those in `ranks`) must say it passed."""
    why = emu_available()
    if why:
        pytest.skip(why)
    codes, outputs = run_ranks(WORKER, case, world, [str(free_port())], timeout)
    assert codes == [0] * world, "\n".join(outputs)
    for rank in ranks if ranks is not None else range(world):
        assert f"rank {rank}: {case} ok" in outputs[rank], outputs[rank]
    return outputs


@pytest.mark.parametrize("world", worlds([2, 3], [4]))
def test_collectives_on_loom_emu_tensors(world):
    run("collectives", world)


@pytest.mark.parametrize("world", worlds([2, 3], [4]))
def test_point_to_point_on_loom_emu_tensors(world):
    run("point_to_point", world)


def test_ddp_on_loom_emu_equals_gloo_on_cpu():
    run("ddp", 2)


def test_fsdp2_on_loom_emu_equals_gloo_on_cpu():
    run("fsdp", 2)


@pytest.mark.parametrize("world,cpu_ranks", [(2, "1"), (3, "0,2")])
def test_loom_emu_ranks_beside_cpu_ranks(world, cpu_ranks, monkeypatch):
    monkeypatch.setenv("LOOM_TEST_CPU_RANKS", cpu_ranks)
    outputs = run("mixed", world)
    for rank, out in enumerate(outputs):
        device = "cpu" if str(rank) in cpu_ranks.split(",") else "loomemu"
        assert f"rank {rank} on {device}: ok" in out, out


def test_gpu_rank_beside_loomemu_and_cpu_ranks():
    """cuda, PrivateUse1 and cpu ranks in one group: rank 0 keeps its GPU, rank 1 (no GPU
    visible) is a loomemu rank, rank 2 a CPU rank. Needs a GPU and the backend built with CUDA."""
    why = emu_available()
    if why:
        pytest.skip(why)
    if not getattr(loom, "torch_cuda", False) or torch.cuda.device_count() < 1:
        pytest.skip("needs a GPU and loom's torch backend built with CUDA")
    port = str(free_port())
    procs = []
    for rank in range(3):
        env = dict(os.environ)
        if rank > 0:
            env["CUDA_VISIBLE_DEVICES"] = ""
        if rank == 2:
            env["LOOM_TEST_CPU_RANKS"] = "2"
        procs.append(subprocess.Popen([sys.executable, WORKER, "mixed", "3", str(rank), port],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the cuda + loomemu + cpu job hung")
    assert [p.returncode for p in procs] == [0] * 3, "\n".join(outputs)
    for rank, device in enumerate(["cuda", "loomemu", "cpu"]):
        assert f"rank {rank} on {device}: ok" in outputs[rank], outputs[rank]


def test_init_without_a_backend_picks_loom_for_loomemu():
    run("default_backend", 2)


def test_a_rank_that_exits_makes_the_others_raise():
    outputs = run("rank_exits", 3, ranks=[0, 1])
    for out in outputs[:2]:
        assert "failed" in out, out


def test_loom_emu_device_basics():
    """The device itself: memory the host cannot read, copies both ways, views, resize."""
    why = emu_available()
    if why:
        pytest.skip(why)
    code = """
import torch, loom.emu
x = torch.arange(10, dtype=torch.float32, device="loomemu")
assert x.device.type == "loomemu" and x.is_loomemu
y = x.view(2, 5).t().contiguous()          # a view, then a copy through the CPU
assert torch.equal(y.cpu(), torch.arange(10.).view(2, 5).t())
z = torch.empty(0, device="loomemu"); z.resize_(7); z.fill_(2.5)
assert z.cpu().tolist() == [2.5] * 7
x[2:4] = 0                                 # a strided write
assert x.cpu().tolist() == [0, 1, 0, 0, 4, 5, 6, 7, 8, 9]
s = torch.loomemu.Stream()
with torch.loomemu.stream(s):
    w = x * 2
torch.loomemu.synchronize()
assert w.cpu()[9].item() == 18
print("device ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "device ok" in out.stdout, out.stdout + out.stderr
    # A tensor's memory is the plug-in's: the host reading it faults.
    read = "import ctypes, torch, loom.emu\n" \
           "x = torch.ones(4, device='loomemu')\n" \
           "print('read', ctypes.string_at(x.data_ptr(), 4))\n"
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, timeout=120)
    assert out.returncode == -11 and "read" not in out.stdout, out.stdout + out.stderr


def test_readme_loom_emu_job_under_torchrun(tmp_path):
    """The README's torch job on loomemu, as printed there, under torchrun with 2 ranks."""
    why = emu_available()
    if why:
        pytest.skip(why)
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
    blocks = open(readme).read().split("```python\n")
    job = next((b.split("```")[0] for b in blocks[1:] if "import loom.emu" in b), None)
    assert job is not None, "README.md has no torch job on loomemu"
    (tmp_path / "emu_job.py").write_text(job)
    # --tee: each rank's lines prefixed whole (two ranks' prints do not interleave).
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                          "--tee=3", f"--master-port={free_port()}", str(tmp_path / "emu_job.py")],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        assert f"{rank} loomemu:0 [3.0, 3.0, 3.0, 3.0]" in out.stdout, out.stdout + out.stderr
