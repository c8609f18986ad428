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

__all__ = ["Comm", "LoomError", "ReduceOp", "dump_flight", "get_unique_id",
           "register_torch_backend", "version"]


def dump_flight(dir=None):
    """Writes the flight record of every Loom communicator of this process (torch "loom" process
    groups included): each one's last calls, their states and times, as
    ``<dir>/loom-flight-<job>-r<rank>.json``. ``dir`` None: ``LOOM_FLIGHT_DIR``. Run ``loom-info
    --flight DIR`` on the files of every rank to learn which rank hung and where."""
    import sys
    from . import _loom
    _loom.dump_flight(dir)
    torch_backend = sys.modules.get("loom._loom_torch")
    if torch_backend is not None:  # its communicators live in its own copy of Loom
        torch_backend.dump_flight(dir)


# The torch backend is registered without importing torch here (that takes seconds): at once when
# torch is already imported, else by torch itself when it is imported (the "torch.backends" entry
# point, loom._autoload), or at the first look at loom.torch_backend_registered.
_torch_state = None  # None: not tried yet; else (registered, cuda)


def _backend_missing_reason():
    """Why loom._loom_torch cannot be used, with the command that fixes it; None if it can."""
    import importlib.util
    rebuild = ("pip install --force-reinstall --no-deps . (in Loom's source tree, with torch "
               "installed)")
    if importlib.util.find_spec("loom._loom_torch") is None:
        return ("this loom package was built without its torch backend: torch was not installed "
                "(or not visible) when it was built. Rebuild it: " + rebuild)
    try:
        from . import _loom_torch  # noqa: F401
    except ImportError as e:
        return (f"loom's torch backend does not load with this torch ({e}); it was built against "
                f"another torch version. Rebuild it: {rebuild}")
    return None


def _register_torch_backend():
    """Registers "loom" with torch.distributed; returns (registered, serves CUDA tensors)."""
    global _torch_state
    if _torch_state is not None:
        return _torch_state
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            _torch_state = (False, False)
            return _torch_state
        import torch  # noqa: F811
    import torch.distributed as dist
    if not dist.is_available():
        _torch_state = (False, False)
        return _torch_state
    reason = _backend_missing_reason()
    if reason is None:
        from . import _loom_torch
        cuda = bool(_loom_torch.has_cuda)

        def create(store, rank, size, timeout):
            return _loom_torch.ProcessGroupLoom(store, rank, size, timeout)
    else:
        cuda = False

        # init_process_group("loom") then says why, instead of torch's "Unknown backend".
        def create(store, rank, size, timeout):
            raise RuntimeError("the torch.distributed backend 'loom' is not available: " + reason)
    if "loom" not in dist.Backend.backend_list:
        # CUDA tensors where this build has Loom's CUDA kernels and torch has CUDA; the device
        # types of Loom device plug-ins as torch comes to know them (_TorchDevices).
        devices = _TorchDevices(["cpu", "cuda"] if cuda else ["cpu"])
        dist.Backend.register_backend("loom", create, devices=devices)
        # Only now: torch reads the list while registering, and plug-ins are not loaded at
        # `import torch` (torch's autoload registers "loom").
        devices.backend_usable = reason is None
    _torch_state = (reason is None, cuda)
    return _torch_state


class _TorchDevices(list):
    """The device types "loom" serves, as torch reads them (Backend.backend_capability["loom"]):
    cpu, cuda where built, and the torch device type of every loaded Loom device plug-in that
    torch knows at the time it reads the list. A plug-in's device type usually becomes known
    after "loom" registered (a vendor's extension renames PrivateUse1 when it is imported), so
    the list brings itself up to date whenever torch looks at it."""

    backend_usable = False  # the list stays as given until set

    def _refresh(self):
        if not self.backend_usable:
            return
        import torch
        from . import _loom_torch
        try:
            plugins = _loom_torch.device_plugins()
        except RuntimeError:
            return  # a plug-in named in LOOM_DEVICE_PLUGIN that fails: init reports it
        for _, device_type in plugins:
            if list.__contains__(self, device_type):
                continue
            try:
                torch.device(device_type)
            except RuntimeError:
                continue  # torch does not know this device type (yet)
            list.append(self, device_type)
            torch.distributed.Backend.default_device_backend_map.setdefault(device_type, "loom")

    def __iter__(self):
        self._refresh()
        return super().__iter__()

    def __contains__(self, device_type):
        self._refresh()
        return super().__contains__(device_type)

    def __len__(self):
        self._refresh()
        return super().__len__()


def _add_torch_device_plugin(path):
    """Loads the Loom device plug-in at path into the "loom" torch backend (a torch device
    extension calls this once it made its device type known to torch); returns whether the
    backend is usable."""
    registered = _register_torch_backend()[0]
    if registered:
        from . import _loom_torch
        import torch.distributed as dist
        _loom_torch.load_device_plugin(path)
        devices = dist.Backend.backend_capability.get("loom")
        if isinstance(devices, _TorchDevices):
            devices._refresh()  # now: init_process_group() without a backend finds "loom"
    return registered


def register_torch_backend():
    """Registers the "loom" torch.distributed backend (imports torch). ``import torch`` does it
    already, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0; True when the backend is usable."""
    return _register_torch_backend()[0]


def __getattr__(name):
    # torch_backend_registered: whether "loom" works with torch.distributed; torch_cuda: whether
    # it serves CUDA tensors too (built with nvcc, against a CUDA torch). Both import torch.
    if name == "torch_backend_registered":
        return _register_torch_backend()[0]
    if name == "torch_cuda":
        return _register_torch_backend()[1]
    raise AttributeError(f"module 'loom' has no attribute {name!r}")


if "torch" in __import__("sys").modules:
    _register_torch_backend()


_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
           "float64")


def _check(name, a, writes):
    """A clear ValueError for an array Loom cannot use, before the binding's generic TypeError."""
    if a is None:
        return
    dtype = getattr(a, "dtype", None)
    if dtype is not None and str(dtype).replace("torch.", "") not in _DTYPES:
        raise ValueError(f"{name} has dtype {dtype}, which Loom does not reduce or move: use one "
                         f"of {', '.join(_DTYPES)} (e.g. x.astype(numpy.float32))")
    try:
        view = memoryview(a)
    except TypeError:
        return  # DLPack only (torch tensors): the binding checks those itself
    if writes and view.readonly:
        raise ValueError(f"{name} is read-only, but Loom writes the result into it: pass a "
                         f"writable array (numpy.array(x) copies it; x.setflags(write=True) "
                         f"where x owns its memory)")
    if not view.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (a strided view or a transposed array): "
                         f"pass numpy.ascontiguousarray(x) and copy the result back")


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

    def register_plan(self, plan):
        """Registers an execution plan (JSON text or a file's path; see loom.plan.register).
        Collective. Returns its algorithm name, "plan:NAME"."""
        return self._native.register_plan(plan)

    def set_plan_selector(self, selector):
        """selector(collective, nbytes, nranks) -> algorithm name or None (loom.plan)."""
        self._native.set_plan_selector(selector)

    def dump_flight(self, dir=None):
        """Writes this communicator's flight record (its last calls, their states and times) into
        ``dir`` (None: ``LOOM_FLIGHT_DIR``) as ``loom-flight-<job>-r<rank>.json``."""
        self._native.dump_flight(dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def allreduce(self, send, recv=None, op="sum"):
        recv = send if recv is None else recv
        _check("send", send, recv is send)
        _check("recv", recv, True)
        self._native.allreduce(send, recv, _op(op))
        return recv

    def broadcast(self, buffer, root=0, recv=None):
        """Root's ``buffer`` into every rank's ``recv`` (default: ``buffer`` itself)."""
        recv = buffer if recv is None else recv
        _check("buffer", buffer, recv is buffer)
        _check("recv", recv, True)
        self._native.broadcast(buffer, recv, root)
        return recv

    def reduce(self, send, recv=None, op="sum", root=0):
        recv = send if recv is None else recv
        _check("send", send, recv is send)
        _check("recv", recv, True)
        self._native.reduce(send, recv, _op(op), root)
        return recv

    def allgather(self, send, recv):
        """``recv`` holds size x len(send) elements, rank r's block at r x len(send)."""
        _check("send", send, False)
        _check("recv", recv, True)
        self._native.allgather(send, recv)
        return recv

    def reduce_scatter(self, send, recv, op="sum"):
        """``send`` holds size x len(recv) elements; rank r receives the reduction of block r."""
        _check("send", send, False)
        _check("recv", recv, True)
        self._native.reduce_scatter(send, recv, _op(op))
        return recv

    def alltoall(self, send, recv):
        _check("send", send, False)
        _check("recv", recv, True)
        self._native.alltoall(send, recv)
        return recv

    def gather(self, send, recv=None, root=0):
        """``recv`` (size x len(send) elements) is needed on the root only."""
        _check("send", send, False)
        _check("recv", recv, True)
        self._native.gather(send, send if recv is None else recv, root)
        return recv

    def scatter(self, send, recv, root=0):
        """The root's ``send`` holds size x len(recv) elements; other ranks may pass None."""
        _check("send", send, False)
        _check("recv", recv, True)
        self._native.scatter(recv if send is None else send, recv, root)
        return recv

    def send(self, buffer, peer, tag=0):
        """Blocks until the message is handed to the transport (small ones are buffered)."""
        _check("buffer", buffer, False)
        self._native.send(buffer, peer, tag)

    def recv(self, buffer, peer, tag=0):
        """Takes the oldest message from ``peer`` with ``tag``; others wait for their receive."""
        _check("buffer", buffer, True)
        self._native.recv(buffer, peer, tag)
        return buffer

    def barrier(self):
        self._native.barrier()
