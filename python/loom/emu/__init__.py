"""loom.emu: Loom's emulated accelerator as a torch device, ``"loomemu"``.

Importing it makes torch's PrivateUse1 device ``loomemu`` (letters only: torch's DeviceMesh takes
no other device type names): tensors whose memory is the emulated
device's (plugins/device/emu: an address range the host cannot read, streams as worker threads),
with just the operators a training step's communication needs on the device (empty, copies to
and from the CPU and on the device, resize, views); every other operator runs on the CPU through
torch's CPU fallback. It also loads the device's Loom plug-in into the ``"loom"`` torch backend,
which then serves ``loomemu`` tensors on a communicator of kind ``loom-emu``::

    import torch, torch.distributed as dist, loom.emu
    dist.init_process_group("loom")              # under torchrun: cpu and loomemu tensors
    x = torch.ones(4, device="loomemu")
    dist.all_reduce(x)

This is a vendor's torch extension (torch_npu, an XPU build) in miniature: docs/plugins.md,
"Torch", says what a vendor adds. ``LOOM_EMU_DEVICES`` sets the devices per process (default 4).
"""

import contextlib
import os
import types

import torch

from . import _C

PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libloom-device-emu.so")
DEVICE_TYPE = "loomemu"

_C.load_plugin(PLUGIN)


def _index(device):
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index if device.index is not None else _C.current_device()


def is_available():
    return _C.device_count() > 0


def device_count():
    return _C.device_count()


def current_device():
    return _C.current_device()


def set_device(device):
    _C.set_device(_index(device))


def synchronize(device=None):
    _C.synchronize(_index(device))


def current_stream(device=None):
    return torch.accelerator.current_stream(torch.device(DEVICE_TYPE, _index(device)))


def Stream(device=None, priority=0):  # noqa: N802  (torch.cuda.Stream's spelling)
    return torch.Stream(device=torch.device(DEVICE_TYPE, _index(device)), priority=priority)


def Event(enable_timing=False, blocking=False, interprocess=False):  # noqa: N802
    return torch.Event(device=torch.device(DEVICE_TYPE, _C.current_device()))


@contextlib.contextmanager
def stream(s):
    """Makes s the current stream of its device inside the block."""
    if s is None:
        yield
        return
    previous = torch.accelerator.current_stream(s.device)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


def is_initialized():
    return True


def get_rng_state(device=None):
    """The CPU generator's state (the device's random numbers come from it)."""
    return torch.get_rng_state()


def set_rng_state(state, device=None):
    torch.set_rng_state(state)


def _is_in_bad_fork():
    return False


def manual_seed(seed):
    """Nothing to seed: the device's random numbers come from the CPU's generator, which
    torch.manual_seed seeds (and which calls this)."""


manual_seed_all = manual_seed


def _register():
    if torch._C._get_privateuse1_backend_name() != DEVICE_TYPE:
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    module = types.ModuleType(f"torch.{DEVICE_TYPE}")
    for name in ("is_available", "device_count", "current_device", "set_device", "synchronize",
                 "current_stream", "Stream", "Event", "stream",
                 "_is_in_bad_fork", "manual_seed", "manual_seed_all", "is_initialized",
                 "get_rng_state", "set_rng_state"):
        setattr(module, name, globals()[name])
    torch._register_device_module(DEVICE_TYPE, module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True,
                                                        for_storage=True)
    import loom
    loom._add_torch_device_plugin(PLUGIN)


if not hasattr(torch, DEVICE_TYPE):
    _register()
