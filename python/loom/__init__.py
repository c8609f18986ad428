"""Loom: a collective communication library.

A communicator spans processes (under ``loomrun``, ``torchrun`` or ``mpirun``, or from a unique id
shared out of band) and runs collectives on arrays that speak the buffer protocol or DLPack
(numpy arrays, CPU torch tensors, ...)::

    import numpy as np, loom
    comm = loom.Comm.from_env()
    x = np.arange(4, dtype=np.float32)
    comm.allreduce(x)            # in place: x is now the sum over ranks
    comm.destroy()

Receive arrays are given by the caller (Loom never allocates them); where a collective allows it,
leaving ``recv`` out runs it in place. Failures raise :class:`LoomError` naming the call and the
cause; a bad argument raises :class:`ValueError` and leaves the communicator usable.
"""

from ._loom import LoomError, ReduceOp, get_unique_id, version
from ._loom import Comm as _NativeComm

__all__ = ["Comm", "LoomError", "ReduceOp", "get_unique_id", "version"]


def _register_torch_backend():
    """Registers "loom" with torch.distributed when torch and the backend module are present."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return False
    import torch  # noqa: F401  (loads the libraries the backend module links)
    try:
        from . import _loom_torch
    except ImportError:  # built without torch, or against another torch
        return False
    import torch.distributed as dist
    if not dist.is_available() or "loom" in dist.Backend.backend_list:
        return "loom" in getattr(dist.Backend, "backend_list", [])

    def create(store, rank, size, timeout):
        return _loom_torch.ProcessGroupLoom(store, rank, size, timeout)

    # CUDA tensors where this build has Loom's CUDA kernels and torch has CUDA.
    devices = ["cpu", "cuda"] if _loom_torch.has_cuda else ["cpu"]
    dist.Backend.register_backend("loom", create, devices=devices)
    return True


torch_backend_registered = _register_torch_backend()
# Whether the "loom" torch backend serves CUDA tensors too (built with nvcc, against a CUDA torch).
torch_cuda = bool(torch_backend_registered) and __import__(
    "loom._loom_torch", fromlist=["has_cuda"]).has_cuda


def _op(op):
    if isinstance(op, ReduceOp):
        return op
    try:
        return ReduceOp.__members__[str(op).upper()]
    except KeyError:
        raise ValueError(f"unknown reduction {op!r}: expected one of "
                         f"{', '.join(m.lower() for m in ReduceOp.__members__)}") from None


class Comm:
    """One rank's handle on a communicator (CPU buffers)."""

    def __init__(self, native):
        self._native = native

    @classmethod
    def from_env(cls, timeout_ms=0):
        """Rank, size and rendezvous from LOOM_*/RANK/WORLD_SIZE/MASTER_ADDR (see loomrun)."""
        return cls(_NativeComm.from_env(timeout_ms))

    @classmethod
    def init_rank(cls, nranks, unique_id, rank, timeout_ms=0):
        """Every rank passes the same ``unique_id`` (from :func:`get_unique_id` on one rank)."""
        return cls(_NativeComm.init_rank(nranks, unique_id, rank, timeout_ms))

    @property
    def rank(self):
        return self._native.rank

    @property
    def size(self):
        return self._native.size

    def destroy(self):
        self._native.destroy()

    def abort(self):
        self._native.abort()

    def async_error(self):
        """'no error', or the error that aborted the communicator."""
        return self._native.async_error()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def allreduce(self, send, recv=None, op="sum"):
        recv = send if recv is None else recv
        self._native.allreduce(send, recv, _op(op))
        return recv

    def broadcast(self, buffer, root=0, recv=None):
        """Root's ``buffer`` into every rank's ``recv`` (default: ``buffer`` itself)."""
        recv = buffer if recv is None else recv
        self._native.broadcast(buffer, recv, root)
        return recv

    def reduce(self, send, recv=None, op="sum", root=0):
        recv = send if recv is None else recv
        self._native.reduce(send, recv, _op(op), root)
        return recv

    def allgather(self, send, recv):
        """``recv`` holds size x len(send) elements, rank r's block at r x len(send)."""
        self._native.allgather(send, recv)
        return recv

    def reduce_scatter(self, send, recv, op="sum"):
        """``send`` holds size x len(recv) elements; rank r receives the reduction of block r."""
        self._native.reduce_scatter(send, recv, _op(op))
        return recv

    def alltoall(self, send, recv):
        self._native.alltoall(send, recv)
        return recv

    def gather(self, send, recv=None, root=0):
        """``recv`` (size x len(send) elements) is needed on the root only."""
        self._native.gather(send, send if recv is None else recv, root)
        return recv

    def scatter(self, send, recv, root=0):
        """The root's ``send`` holds size x len(recv) elements; other ranks may pass None."""
        self._native.scatter(recv if send is None else send, recv, root)
        return recv

    def send(self, buffer, peer, tag=0):
        """Blocks until the message is handed to the transport (small ones are buffered)."""
        self._native.send(buffer, peer, tag)

    def recv(self, buffer, peer, tag=0):
        """Takes the oldest message from ``peer`` with ``tag``; others wait for their receive."""
        self._native.recv(buffer, peer, tag)
        return buffer

    def barrier(self):
        self._native.barrier()
