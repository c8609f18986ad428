"""torch.distributed on the "loom" backend, checked in the same job against Gloo (CPU tensors) and,
on a machine with GPUs, NCCL (CUDA tensors, rank r on GPU r; skipped without enough GPUs)."""
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


def run(case, world, device="cpu", timeout=300, may_share_gpu=False):
    """may_share_gpu: the case has no NCCL reference, so with LOOM_TEST_SHARE_GPU=1 its ranks
    may share GPUs (best under CUDA MPS)."""
    if device == "cuda":
        import loom  # noqa: F811

        if not getattr(loom, "torch_cuda", False):
            pytest.skip("loom's torch backend was built without CUDA")
        sharing = may_share_gpu and os.environ.get("LOOM_TEST_SHARE_GPU") == "1"
        if torch.cuda.device_count() < (1 if sharing else world):
            pytest.skip(f"needs {world} GPUs, this machine has {torch.cuda.device_count()}")
    return run_ranks(WORKER, case, world, [str(free_port()), device], timeout)


def cuda_worlds(*worlds):
    return [pytest.param(w, "cuda", id=f"cuda-{w}") for w in worlds]


@pytest.mark.parametrize("world,device", [(1, "cpu"), (2, "cpu"), (3, "cpu"), (5, "cpu")] +
                         cuda_worlds(1, 2, 3, 4))
def test_collectives_match_reference(world, device):
    codes, outputs = run("collectives", world, device)
    assert codes == [0] * world, "\n".join(outputs)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_unsupported_op_is_a_clear_error(device):
    codes, outputs = run("unsupported", 2, device)
    assert codes == [0, 0], "\n".join(outputs)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_rank_that_exits_makes_the_others_raise(device):
    codes, outputs = run("rank_exits", 3, device)
    assert codes == [0, 3, 0], "\n".join(outputs)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_rank_that_never_joins_times_out_the_others(device):
    codes, outputs = run("never_joins", 3, device)
    assert codes == [0, 0, 0], "\n".join(outputs)
    assert "raised after" in outputs[0] and "raised after" in outputs[2], "\n".join(outputs)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_abort_makes_every_rank_raise(device):
    codes, outputs = run("abort", 3, device)
    assert codes == [0, 0, 0], "\n".join(outputs)


@pytest.mark.parametrize("world,device", [(2, "cpu"), (3, "cpu")] + cuda_worlds(2, 4))
def test_dtensor_and_functional_collectives(world, device):
    codes, outputs = run("dtensor", world, device)
    assert codes == [0] * world, "\n".join(outputs)


@pytest.mark.parametrize("world,device", [(3, "cpu")] + cuda_worlds(2, 4))
def test_ddp_trains_like_the_reference(world, device):
    codes, outputs = run("ddp", world, device)
    assert codes == [0] * world, "\n".join(outputs)


@pytest.mark.parametrize("world,device", [(2, "cpu"), (3, "cpu")] + cuda_worlds(2, 4))
def test_split_group_splits_the_communicators(world, device):
    codes, outputs = run("split", world, device)
    assert codes == [0] * world, "\n".join(outputs)


@pytest.mark.parametrize("world,device", cuda_worlds(2, 4))
def test_fsdp2_with_loom_comms_trains_like_nccl(world, device):
    codes, outputs = run("fsdp", world, device)
    print("\n".join(outputs))
    assert codes == [0] * world, "\n".join(outputs)


def test_torchrun_example():
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_allreduce.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
         f"--master-port={free_port()}", example],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("loom ok") == 2, result.stdout + result.stderr


def test_torchrun_across_namespace_nodes():
    """torchrun on 2 "hosts" (network namespaces, tests/multinode/nodes.sh), 2 ranks each: the
    backend's communicator spans them over TCP."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    nodes = os.path.join(root, "tests", "multinode", "nodes.sh")
    example = os.path.abspath(os.path.join(root, "examples", "torch_allreduce.py"))
    cmd = (f"OMP_NUM_THREADS=1 LOOM_TIMEOUT=60 {sys.executable} -m torch.distributed.run "
           "--nnodes 2 --node-rank $LOOMT_NODE --master-addr $LOOMT_MASTER --master-port 29500 "
           f"--nproc-per-node 2 {example}")
    result = subprocess.run([nodes, "-k", "2", "-t", "240", "--", cmd], capture_output=True,
                            text=True, timeout=300)
    output = result.stdout + result.stderr
    if result.returncode == 77:
        pytest.skip("network namespaces unavailable: " + output.strip().splitlines()[-1])
    assert result.returncode == 0, output
    assert output.count("loom ok") == 4, output


@pytest.mark.parametrize("expandable", [False, True], ids=["cudaMalloc", "expandable"])
@pytest.mark.parametrize("world,device", cuda_worlds(2))
def test_registered_allocator_segments(world, device, expandable, monkeypatch):
    """LOOM_TORCH_REGISTER_SEGMENTS=1: the allocator's segments are registered (zero-copy calls)
    and results stay right while segments are freed and made. With expandable segments the
    allocator maps and unmaps cuMem pages instead, which Loom shares as file descriptors."""
    monkeypatch.setenv("LOOM_TORCH_REGISTER_SEGMENTS", "1")
    if expandable:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        # The registration and mapping lines (stderr, which run() collects with stdout).
        monkeypatch.setenv("LOOM_DEBUG", "INFO")
        monkeypatch.setenv("LOOM_DEBUG_SUBSYS", "COLL")
    else:
        monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    codes, outputs = run("registered_segments", world, device, may_share_gpu=True)
    assert codes == [0] * world, "\n".join(outputs)
    for out in outputs:
        assert "could not be registered" not in out, out
        assert "registered_segments ok" in out, out
    if expandable:
        assert any("cuMem memory shared as descriptors" in out for out in outputs), \
            "\n".join(outputs)
        assert any("mapped rank" in out for out in outputs), "\n".join(outputs)


@pytest.mark.parametrize("forced", [False, True], ids=["by-size", "forced"])
@pytest.mark.parametrize("world,device", [(3, "cpu")] + cuda_worlds(2))
def test_plans_run_all_reduce_unchanged(tmp_path, monkeypatch, forced, world, device):
    """A plan in LOOM_PLAN_DIR is what torch's all_reduce runs on the "loom" backend, without a
    change to the program: chosen by size (the one-shot plan is the narrowest for small calls)
    or forced with LOOM_ALGO=allreduce:plan:NAME (the ring). On CUDA tensors the plan-interpreting
    kernel runs it (ranks may share a GPU: the reference is computed, not another group's)."""
    from loom import plan
    plan.write_examples(str(tmp_path / "plans"), world)
    name = f"ring_allreduce_{world}" if forced else f"one_shot_allreduce_{world}"
    monkeypatch.setenv("LOOM_PLAN_DIR", str(tmp_path / "plans"))
    monkeypatch.setenv("LOOM_TEST_PLAN", "plan:" + name)
    monkeypatch.setenv("LOOM_TEST_FLIGHT_DIR", str(tmp_path / "flight"))
    if forced:
        monkeypatch.setenv("LOOM_ALGO", "allreduce:plan:" + name)
    codes, outputs = run("plans", world, device, may_share_gpu=True)
    assert codes == [0] * world, "\n".join(outputs)
