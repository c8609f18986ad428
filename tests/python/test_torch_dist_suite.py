"""PyTorch's own torch.distributed test suite (_DistTestBase, see dist_suite_runner.py) on CPU at 2
and 3 ranks, once with every process group on Gloo and once on Loom, in the same job: every test
that passes on Gloo must pass on Loom, apart from KNOWN_GLOO_ONLY below.

The selection keeps CI time small: every collective, point-to-point and DDP test of the suite,
chosen by name (SELECT); LOOM_DIST_SUITE_SELECT="" runs the whole suite instead. The counts of both
runs are printed (pytest -s shows them).
"""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

torch = pytest.importorskip("torch")
import loom  # noqa: E402

pytestmark = pytest.mark.skipif(not loom.torch_backend_registered,
                                reason="loom was built without torch")

HERE = os.path.dirname(os.path.abspath(__file__))

# pytest -k expression: the collectives, point-to-point and DDP tests, the timeouts, groups and the
# ops built on them. (The suite's other tests exercise torch alone: autograd, profiler, RPC-less
# helpers, or skip on CPU.)
SELECT = " or ".join([
    "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "broadcast",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_product", "reduce_full_group",
    "reduce_group", "gather", "scatter", "all_to_all", "barrier", "send_recv", "isend", "irecv",
    "batch_isend_irecv", "p2p", "ddp", "DistributedDataParallel", "sparse", "coalesced",
    "new_subgroups", "backend_group", "backend_full_group", "get_rank_size", "destroy",
    "monitored_barrier", "sequence_num", "group_name",
])

# Tests that pass on Gloo and cannot on Loom, each because it is about Gloo itself.
KNOWN_GLOO_ONLY = {
    # monitored_barrier is a Gloo-only API (c10d's base Backend: "only GLOO supports monitored
    # barrier"); these tests call it on the default group, which is Loom in the loom run.
    "test_monitored_barrier_allreduce_hang": "monitored_barrier is Gloo's own API",
    "test_monitored_barrier_allreduce_hang_wait_all_ranks": "monitored_barrier is Gloo's own API",
    "test_monitored_barrier_failure_order": "monitored_barrier is Gloo's own API",
    "test_monitored_barrier_gloo": "monitored_barrier is Gloo's own API",
    "test_monitored_barrier_gloo_rank_0_timeout": "monitored_barrier is Gloo's own API",
    "test_monitored_barrier_gloo_subgroup": "monitored_barrier is Gloo's own API",
    "test_monitored_barrier_wait_all_ranks": "monitored_barrier is Gloo's own API",
}


def run_suite(backend, world, select):
    with tempfile.TemporaryDirectory(prefix="loom-dist-suite-") as tmp:
        os.mkdir(os.path.join(tmp, "barrier"))
        os.mkdir(os.path.join(tmp, "test_dir"))
        report = os.path.join(tmp, "report.xml")
        env = dict(os.environ, BACKEND="gloo", WORLD_SIZE=str(world), TEMP_DIR=tmp,
                   INIT_METHOD=f"file://{tmp}/shared_init_file", LOOM_DIST_SUITE=backend,
                   OMP_NUM_THREADS="1", PYTHONPATH=HERE + os.pathsep + os.environ.get(
                       "PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", os.path.join(HERE, "dist_suite_runner.py")]
        if select:
            cmd += ["-k", select]
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True,
                              timeout=3000)
        if not os.path.exists(report):
            pytest.fail(f"{backend} run produced no report:\n{proc.stdout[-5000:]}"
                        f"\n{proc.stderr[-5000:]}")
        outcomes = {}
        for case in ET.parse(report).getroot().iter("testcase"):
            kinds = {child.tag for child in case}
            outcome = ("failed" if kinds & {"failure", "error"} else
                       "skipped" if "skipped" in kinds else "passed")
            outcomes[case.get("name")] = (outcome, "".join(
                (child.get("message") or "") + (child.text or "")[-2000:] for child in case))
        return outcomes, proc.stdout[-3000:]


def counts(outcomes):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome, _ in outcomes.values():
        c[outcome] += 1
    return c


@pytest.mark.parametrize("world", [2, 3])
def test_loom_passes_what_gloo_passes(world):
    select = os.environ.get("LOOM_DIST_SUITE_SELECT", SELECT)
    gloo, _ = run_suite("gloo", world, select)
    loom_outcomes, tail = run_suite("loom", world, select)
    print(f"\n_DistTestBase at {world} ranks: gloo {counts(gloo)}, loom {counts(loom_outcomes)}")
    regressions = []
    for name, (outcome, _) in sorted(gloo.items()):
        if outcome != "passed" or name in KNOWN_GLOO_ONLY:
            continue
        got, detail = loom_outcomes.get(name, ("missing", tail))
        if got != "passed":
            regressions.append(f"{name}: {got}\n{detail[-1500:]}")
    assert not regressions, (f"{len(regressions)} tests pass on Gloo and not on Loom:\n\n" +
                             "\n\n".join(regressions))
