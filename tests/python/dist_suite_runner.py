"""PyTorch's own distributed test suite (DistributedTest._DistTestBase, as PyTorch's
test/distributed/test_distributed_spawn.py drives it) on CPU, with every process group either on
Gloo or, with LOOM_DIST_SUITE=loom, on Loom.

The suite's gates read BACKEND: it stays "gloo" in both runs, so the same (CPU) tests are selected;
in the loom run torch's Gloo creator makes ProcessGroupLoom backends instead, so that the default
group, every new_group and every subgroup runs on Loom. Run by test_torch_dist_suite.py (pytest,
-k for the selection); TEMP_DIR, WORLD_SIZE and INIT_METHOD come from there.
"""
import multiprocessing
import os

os.environ.setdefault("BACKEND", "gloo")

import torch.distributed as dist  # noqa: E402


def _use_loom_for_every_group():
    import loom  # noqa: F401  registers "loom"
    from loom import _loom_torch

    ensure = getattr(dist.Backend, "_ensure_backend_registered", None)
    if ensure is not None:  # torch registers its own backends at first use (entry points)
        ensure("gloo")
    plugins = getattr(dist.Backend, "_plugins", {})
    if "GLOO" not in plugins or not hasattr(plugins["GLOO"], "_replace"):
        raise RuntimeError("this torch creates Gloo groups without a plugin entry: "
                           "the loom run cannot take them over")

    def create(opts, backend_options=None):
        # Profiler events carry the name torch knows the group's backend by ("gloo" here),
        # which the suite's profiling checks look for.
        return _loom_torch.ProcessGroupLoom(opts.store, opts.group_rank, opts.group_size,
                                            opts.timeout, profiling_name="gloo")

    plugins["GLOO"] = plugins["GLOO"]._replace(creator_fn=create, extended_api=True)
    # As a custom backend type, not GLOO: torch's C++ side casts a GLOO-typed backend to
    # ProcessGroupGloo (DDP's logger reads Gloo's options), which ProcessGroupLoom is not.
    # dist.get_backend() still answers "gloo", as the suite's gates and profiler checks expect.
    dist.Backend.backend_type_map["gloo"] = dist.ProcessGroup.BackendType.CUSTOM


# At import: the ranks are spawned processes that import this module afresh.
if os.environ.get("LOOM_DIST_SUITE") == "loom":
    _use_loom_for_every_group()

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # LOOM_DIST_SUITE_START=fork: ranks forked from this process (as PyTorch's former
        # test_distributed_fork.py ran the suite), which has torch imported already: a test's
        # ranks start in milliseconds instead of seconds, the difference that fits CI's budget.
        if os.environ.get("LOOM_DIST_SUITE_START") == "fork":
            self._start_processes(multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


if __name__ == "__main__":
    run_tests()
