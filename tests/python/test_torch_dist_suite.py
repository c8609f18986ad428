"""PyTorch's own torch.distributed test suite (_DistTestBase, see dist_suite_runner.py) on CPU at 2
and 3 ranks, once with every process group on Gloo and once on Loom, in the same job: every test
that passes on Gloo must pass on Loom, apart from KNOWN_GLOO_ONLY below.

The selection keeps CI time small (SELECTED, below); the counts of both runs are printed (pytest
-s shows them).
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

# By name, to keep CI time small (every test spawns its ranks, each importing torch): at least one
# test of every collective the suite has for CPU (plain, on a subgroup, coalesced, complex, sparse,
# uneven splits, argument checks, timeouts), every point-to-point test, and DDP's CPU training,
# hooks, buffers, uneven inputs and model checks. LOOM_DIST_SUITE_SELECT (a pytest -k expression)
# overrides it; "" runs the whole suite (about 285 tests, most of them skipped on CPU).
SELECTED = [
    "test_all_reduce_sum", "test_all_reduce_max", "test_all_reduce_product",
    "test_all_reduce_sum_async", "test_all_reduce_sum_complex", "test_all_reduce_group_sum",
    "test_all_reduce_full_group_min", "test_all_reduce_complex_unsupported_ops",
    "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_group_product",
    "test_sparse_all_reduce_sum", "test_all_gather", "test_all_gather_group",
    "test_all_gather_complex", "test_all_gather_coalesced_simple",
    "test_all_gather_coalesced_with_empty", "test_all_gather_object_subgroup", "test_all_to_all",
    "test_all_to_all_single_equal_split_complex", "test_all_to_all_single_unequal_split_group",
    "test_broadcast", "test_broadcast_group", "test_broadcast_object_list", "test_reduce_sum",
    "test_reduce_group_max", "test_reduce_sum_twice", "test_gather", "test_gather_checks",
    "test_gather_object", "test_scatter", "test_scatter_checks", "test_scatter_complex",
    "test_barrier", "test_barrier_group", "test_barrier_timeout_full_group",
    "test_barrier_timeout_global", "test_send_recv", "test_send_recv_with_tag",
    "test_send_recv_any_source", "test_isend", "test_irecv", "test_batch_isend_irecv_gloo",
    "test_batch_isend_irecv_gloo_tags", "test_batch_isend_irecv_op_err",
    "test_batch_isend_irecv_op_list_err", "test_DistributedDataParallelCPU",
    "test_DistributedDataParallelCPU_grad_is_view", "test_ddp_hook_parity_allreduce",
    "test_ddp_hook_parity_allreduce_process_group", "test_ddp_buffer_hook_allreduce",
    "test_ddp_broadcast_buffer", "test_ddp_sync_module_states", "test_ddp_uneven_inputs",
    "test_ddp_join_model_equivalence", "test_ddp_logging_data_cpu",
    "test_ddp_model_diff_shape_across_ranks", "test_accumulate_gradients_no_sync",
]

# At 3 ranks (where subgroups of 2 of 3 and uneven rings start to matter), a smaller set: the
# point-to-point tests, one test per collective, subgroups, a timeout and DDP.
SELECTED_3 = [
    "test_all_reduce_sum", "test_all_reduce_group_sum", "test_all_reduce_coalesced_sum",
    "test_sparse_all_reduce_sum", "test_all_gather_group", "test_all_gather_coalesced_simple",
    "test_all_to_all_single_unequal_split_group", "test_broadcast_group", "test_reduce_group_max",
    "test_gather", "test_scatter", "test_barrier_group", "test_barrier_timeout_full_group",
    "test_send_recv", "test_send_recv_with_tag", "test_send_recv_any_source", "test_isend",
    "test_irecv", "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    "test_DistributedDataParallelCPU", "test_ddp_hook_parity_allreduce_process_group",
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


def run_suite(backend, world, select):
    with tempfile.TemporaryDirectory(prefix="loom-dist-suite-") as tmp:
        os.mkdir(os.path.join(tmp, "barrier"))
        os.mkdir(os.path.join(tmp, "test_dir"))
        report = os.path.join(tmp, "report.xml")
        env = dict(os.environ, BACKEND="gloo", WORLD_SIZE=str(world), TEMP_DIR=tmp,
                   INIT_METHOD=f"file://{tmp}/shared_init_file", LOOM_DIST_SUITE=backend,
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
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True,
                              timeout=3000)
        if not os.path.exists(report) or "error" in proc.stdout.split("\n")[-2]:
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
    select = os.environ.get("LOOM_DIST_SUITE_SELECT")
    gloo, _ = run_suite("gloo", world, select)
    assert counts(gloo)["passed"] > 0, "the Gloo run passed nothing: the harness is broken"
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
