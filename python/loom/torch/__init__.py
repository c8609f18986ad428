"""Loom for torch programs, beyond ``init_process_group("loom")``: FSDP2 communication.

``fully_shard`` modules can run their parameter all-gathers and gradient reduce-scatters through
Loom with::

    import loom.torch
    model.set_custom_all_gather(loom.torch.AllGather())
    model.set_custom_reduce_scatter(loom.torch.ReduceScatter())

(on every ``FSDPModule``: each ``fully_shard``-ed submodule and the root). By default the group
FSDP passes must have the ``"loom"`` backend for the tensors' device (``init_process_group("loom")``
or a ``DeviceMesh`` of it). Passing ``group=`` a Loom group instead runs Loom under a mesh of
another backend (say NCCL): that group must hold the same ranks in the same order.
"""
import torch
import torch.distributed as dist

try:  # torch >= 2.8
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGatherBase
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatterBase
except ImportError:  # pragma: no cover - older torch: plain classes with the same protocol
    _AllGatherBase = _ReduceScatterBase = object

from .. import _loom_torch

__all__ = ["AllGather", "ReduceScatter", "is_loom_group"]


def is_loom_group(group, device):
    """True when ``group`` runs collectives on ``device``'s tensors with Loom."""
    try:
        backend = group._get_backend(torch.device(device))
    except RuntimeError:
        return False
    return isinstance(backend, _loom_torch.ProcessGroupLoom)


def _group_for(own, given, device, what):
    group = own if own is not None else given
    if not is_loom_group(group, device):
        raise ValueError(
            f"loom.torch.{what}: the group has no loom backend for {device} tensors; "
            "initialize it with backend 'loom' or pass group= a loom group")
    if own is not None and given is not None and own.size() != given.size():
        raise ValueError(f"loom.torch.{what}: the loom group has {own.size()} ranks, "
                         f"FSDP's group {given.size()}")
    return group


class _LoomComm:
    def __init__(self, group=None):
        self.group = group

    def allocate(self, size, *, dtype, device):
        # Plain caching-allocator memory: Loom stages through its own windows, so any buffer works.
        return torch.empty(*size, dtype=dtype, device=device)


class AllGather(_LoomComm, _AllGatherBase):
    """FSDP2 parameter all-gather (``FSDPModule.set_custom_all_gather``) through Loom."""

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        group = _group_for(self.group, group, output_tensor.device, "AllGather")
        return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group,
                                           async_op=async_op)


class ReduceScatter(_LoomComm, _ReduceScatterBase):
    """FSDP2 gradient reduce-scatter (``FSDPModule.set_custom_reduce_scatter``) through Loom."""

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        group = _group_for(self.group, group, output_tensor.device, "ReduceScatter")
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                          async_op=async_op)
