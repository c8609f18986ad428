"""PyTorch's own torch.distributed test suite (_DistTestBase, see dist_suite_runner.py) on CPU, once
with every process group on Gloo and once on Loom, in the same job: every test that passes on Gloo
must pass on Loom, apart from KNOWN_GLOO_ONLY below. The counts of both runs are printed (pytest
-s shows them).

CI (the default): a selection by name (SELECTED at 2 ranks, SELECTED_3 at 3), ranks forked from
the runner (LOOM_DIST_SUITE_START=fork, a few seconds per test instead of a torch import per rank
per test). The whole suite is opt-in: `make test-torch-suite` (LOOM_DIST_SUITE_SELECT="" and
LOOM_DIST_SUITE_WORLDS=2,3,4, ranks spawned as PyTorch's test_distributed_spawn.py does).
"""
import json
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

# By name, to keep CI time small: of the tests that run on CPU with Gloo at 2 ranks (91 of 285
# in torch 2.15; the rest are skipped on CPU by the suite itself), every point-to-point test,
# every DDP test, and per collective its plain, complex, coalesced, object and argument-check
# tests. LOOM_DIST_SUITE_SELECT (a pytest -k expression) overrides it; "" runs the whole suite.
SELECTED = [
    # collectives
    "test_all_reduce_sum", "test_all_reduce_sum_async", "test_all_reduce_sum_complex",
    "test_all_reduce_complex_unsupported_ops", "test_all_reduce_full_group_min",
    "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_max_complex_unsupported",
    "test_sparse_all_reduce_sum", "test_all_gather", "test_all_gather_complex",
    "test_all_gather_coalesced_simple", "test_all_gather_coalesced_with_empty",
    "test_all_gather_coalesced_complex", "test_all_gather_object_subgroup", "test_broadcast",
    "test_reduce_sum", "test_reduce_sum_twice", "test_gather", "test_gather_checks",
    "test_scatter", "test_scatter_checks", "test_scatter_complex", "test_scatter_object_list",
    "test_barrier", "test_barrier_timeout_global", "test_get_future",
    # point-to-point: all of them
    "test_send_recv", "test_send_recv_with_tag", "test_send_recv_any_source",
    "test_send_recv_autograd_profiler", "test_send_recv_torch_profiler",
    "test_send_recv_with_tag_autograd_profiler", "test_send_recv_with_tag_torch_profiler",
    "test_send_recv_any_source_autograd_profiler", "test_send_recv_any_source_torch_profiler",
    "test_isend", "test_irecv", "test_isend_autograd_profiler", "test_isend_torch_profiler",
    "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    # DDP: all of them (test_ddp_logging_data_cpu is in KNOWN_GLOO_ONLY)
    "test_DistributedDataParallelCPU", "test_DistributedDataParallelCPU_grad_is_view",
    "test_DistributedDataParallel_requires_grad", "test_accumulate_gradients_no_sync",
    "test_accumulate_gradients_no_sync_allreduce_hook",
    "test_accumulate_gradients_no_sync_allreduce_with_then_hook",
    "test_accumulate_gradients_no_sync_grad_is_view", "test_ddp_create_graph",
    "test_grads_same_across_ranks_with_no_sync", "test_static_graph_api_cpu",
]

# At 3 ranks (odd rings, a subgroup of 2 of 3, any-source among 2 senders), a smaller set: one
# test per collective, the point-to-point tests without the profiler variants, and DDP.
SELECTED_3 = [
    "test_all_reduce_sum", "test_all_reduce_full_group_sum", "test_all_reduce_coalesced_sum",
    "test_sparse_all_reduce_sum", "test_all_gather", "test_all_gather_coalesced_simple",
    "test_all_gather_object_subgroup", "test_broadcast", "test_reduce_sum", "test_gather",
    "test_scatter", "test_barrier_timeout_full_group", "test_send_recv",
    "test_send_recv_with_tag", "test_send_recv_any_source", "test_isend", "test_irecv",
    "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    "test_DistributedDataParallelCPU", "test_accumulate_gradients_no_sync",
]

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
    # Asserts DDP's logged backend_name equals dist.get_backend() ("gloo"). The loom run registers
    # its groups as a custom backend type (a GLOO-typed one would be cast to ProcessGroupGloo by
    # DDP's logger), so the logged name is "custom"; with init_process_group("loom") it is "loom".
    "test_ddp_logging_data_cpu": "checks the backend's name is Gloo's",
}


def run_suites(world, select, backends=("gloo", "loom")):
    """Runs the suite once per backend, the runs side by side (they share nothing: a temporary
    directory each, file:// rendezvous), since the suite mostly waits (about a third of CI's two
    cores busy when run alone). Returns {backend: (outcomes, output tail)}."""
    runs = {}
    try:
        for backend in backends:
            tmp = tempfile.TemporaryDirectory(prefix=f"loom-dist-suite-{backend}-")
            os.mkdir(os.path.join(tmp.name, "barrier"))
            os.mkdir(os.path.join(tmp.name, "test_dir"))
            report = os.path.join(tmp.name, "report.xml")
            env = dict(os.environ, BACKEND="gloo", WORLD_SIZE=str(world), TEMP_DIR=tmp.name,
                       INIT_METHOD=f"file://{tmp.name}/shared_init_file", LOOM_DIST_SUITE=backend,
                       LOOM_DIST_SUITE_START=os.environ.get(
                           "LOOM_DIST_SUITE_START", "fork" if select is None else "spawn"),
                       OMP_NUM_THREADS="1", PYTHONPATH=HERE + os.pathsep + os.environ.get(
                           "PYTHONPATH", ""))
            runner = os.path.join(HERE, "dist_suite_runner.py")
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}"]
            if select is None:  # exactly the tests of SELECTED (SELECTED_3 at 3 ranks)
                names = SELECTED if world == 2 else SELECTED_3
                cmd += [f"{runner}::TestDistBackendWithSpawn::{name}" for name in names]
            else:
                cmd += [runner] + (["-k", select] if select else [])
            proc = subprocess.Popen(cmd, env=env, cwd=tmp.name, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            runs[backend] = (tmp, report, proc)
        results = {}
        for backend, (tmp, report, proc) in runs.items():
            try:
                stdout, stderr = proc.communicate(timeout=3000)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the {backend} run of the suite hung")
            if not os.path.exists(report) or "error" in stdout.split("\n")[-2]:
                pytest.fail(f"{backend} run produced no report:\n{stdout[-5000:]}"
                            f"\n{stderr[-5000:]}")
            outcomes = {}
            for case in ET.parse(report).getroot().iter("testcase"):
                kinds = {child.tag for child in case}
                outcome = ("failed" if kinds & {"failure", "error"} else
                           "skipped" if "skipped" in kinds else "passed")
                outcomes[case.get("name")] = (outcome, "".join(
                    (child.get("message") or "") + (child.text or "")[-2000:] for child in case))
            results[backend] = (outcomes, stdout[-3000:])
        return results
    finally:
        for tmp, _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            tmp.cleanup()


def counts(outcomes):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome, _ in outcomes.values():
        c[outcome] += 1
    return c


WORLDS = [int(w) for w in os.environ.get("LOOM_DIST_SUITE_WORLDS", "2,3").split(",") if w]


@pytest.mark.parametrize("world", WORLDS)
def test_loom_passes_what_gloo_passes(world):
    select = os.environ.get("LOOM_DIST_SUITE_SELECT")
    results = run_suites(world, select)
    gloo, _ = results["gloo"]
    assert counts(gloo)["passed"] > 0, "the Gloo run passed nothing: the harness is broken"
    loom_outcomes, tail = results["loom"]
    print(f"\n_DistTestBase at {world} ranks: gloo {counts(gloo)}, loom {counts(loom_outcomes)}")
    record = os.environ.get("LOOM_DIST_SUITE_OUTCOMES")
    if record:  # every test's outcome on both backends, for choosing SELECTED
        with open(f"{record}.{world}.json", "w") as f:
            json.dump({"gloo": {k: v[0] for k, v in gloo.items()},
                       "loom": {k: v[0] for k, v in loom_outcomes.items()}}, f, indent=1)
    regressions = []
    for name, (outcome, _) in sorted(gloo.items()):
        if outcome != "passed" or name in KNOWN_GLOO_ONLY:
            continue
        got, detail = loom_outcomes.get(name, ("missing", tail))
        if got != "passed":
            regressions.append(f"{name}: {got}\n{detail[-1500:]}")
    assert not regressions, (f"{len(regressions)} tests pass on Gloo and not on Loom:\n\n" +
                             "\n\n".join(regressions))
