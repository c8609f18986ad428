"""loom.ep: Mixture-of-Experts dispatch and combine, a drop-in for DeepEP's (V1) ``deep_ep.Buffer``.

``Buffer(group, ...)`` takes DeepEP's constructor arguments and offers its methods with the same
arguments and return tuples (normal and low-latency modes, handles, events), on tensors of the
group's device: CPU tensors with a Gloo (or Loom) group, CUDA tensors where the group has a CUDA
backend. Under it, Loom's C API (``loomEp*``): its own communicator over the group's ranks, shared
buffers registered once, and results bit-identical from run to run (combine sums in fp32 in rank
order). docs/ep.md lists every difference from DeepEP; in short:

- arguments that tune DeepEP's kernels or transports (``num_qps_per_rank``, ``Config``'s SM and
  chunk counts, ``allow_nvlink_for_low_latency_mode``, ``allow_mnnvl``, ``use_logfmt``) are
  accepted and do nothing; ``enable_shrink``'s masks are not offered;
- ``num_nvl_bytes`` sizes the normal mode's shared staging (capped at 1 GiB; larger calls run in
  rounds), ``num_rdma_bytes`` is only checked against the low-latency size hint;
- on CPU tensors every call completes before it returns; its event is already complete;
- received tokens come in a documented order (by source rank, then token index), where DeepEP's
  depend on timing in low-latency mode.

Example (every rank)::

    buffer = loom.ep.Buffer(group, num_nvl_bytes=256 << 20)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    y = experts(recv_x, recv_idx, recv_w, counts)        # this rank's experts
    combined_x, _, _ = buffer.combine(y, handle)
"""

import contextlib
import ctypes

import torch
import torch.distributed as dist

from . import _loom

__all__ = ["Buffer", "Config", "EventOverlap", "topk_idx_t"]

topk_idx_t = torch.int64

_LOOM_TYPES = {
    torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6,
    torch.float32: 7, torch.float64: 8, torch.bfloat16: 9,
}
if hasattr(torch, "float8_e4m3fn"):
    _LOOM_TYPES[torch.float8_e4m3fn] = 10
    _LOOM_TYPES[torch.float8_e5m2] = 11

_MAX_NORMAL_TOKENS = 1 << 16     # tokens per rank and call, normal mode
_MAX_BUFFER_BYTES = 1 << 30      # normal mode's staging per buffer
_MIN_ROW_BYTES = 16 << 10        # the normal object's first row capacity (grown on need)


def _type_code(t, name):
    code = _LOOM_TYPES.get(t.dtype)
    if code is None:
        raise ValueError(f"{name}: Loom has no data type for {t.dtype}")
    return code


# Loom's C API tells an absent array (NULL) from a present one: an empty tensor (whose data_ptr()
# is 0) passes this placeholder's address instead; nothing is read or written through it.
_PRESENT = torch.zeros(1, dtype=torch.int64)


def _current_raw_stream(device):
    """The current CUDA stream's handle; torch's raw getter (what its compiled kernels use) skips
    the Stream object current_stream() builds."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def _ptr(t):
    if t is None:
        return 0
    return t.data_ptr() or _PRESENT.data_ptr()


class Config:
    """DeepEP's performance config. Loom's paths size their own work: the values are kept (and
    their buffer size hints offered) but change nothing."""

    def __init__(self, num_sms=20, num_max_nvl_chunked_send_tokens=6,
                 num_max_nvl_chunked_recv_tokens=256, num_max_rdma_chunked_send_tokens=6,
                 num_max_rdma_chunked_recv_tokens=256):
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 2 * num_ranks * self.num_max_nvl_chunked_recv_tokens * hidden_bytes

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 0


class EventOverlap:
    """An event after a call (DeepEP's): ``current_stream_wait()`` makes the current stream wait
    for it; ``with event:`` does so on exit. Without a device event (CPU tensors, or a call made
    without ``async_finish``) the work is already done and waiting does nothing."""

    def __init__(self, event=None, extra_tensors=None):
        self.event = event
        self.extra_tensors = extra_tensors
        self.hook_after_wait = None

    def current_stream_wait(self, release_handle=False):
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)
        if self.hook_after_wait is not None:
            self.hook_after_wait()
            self.hook_after_wait = None
        if release_handle:
            self.event = None

    def register_hook_after_wait(self, hook):
        assert self.hook_after_wait is None, "a hook is already registered on this event"
        self.hook_after_wait = hook

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.current_stream_wait()


class _Handle(tuple):
    """A normal dispatch's handle: DeepEP's tuple (rank_prefix_matrix, channel_prefix_matrix,
    recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank, send_head) with one channel, and
    the count of tokens received (recv_src_idx may have num_worst_tokens rows)."""

    def __new__(cls, items, num_recv_tokens):
        self = super().__new__(cls, items)
        self.num_recv_tokens = num_recv_tokens
        return self


def _group_device(group):
    types = getattr(group, "_device_types", None) or []
    if torch.cuda.is_available() and any(getattr(t, "type", t) == "cuda" for t in types):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Buffer:
    """DeepEP's ``Buffer`` over Loom (see the module's notes). ``device`` (a Loom extension)
    overrides the device the buffer serves, else the group's: CUDA if it has a CUDA backend."""

    num_sms = 20

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=24, allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False,
                 explicitly_destroy=False, enable_shrink=False, comm=None, device=None,
                 timeout_ms=0):
        if group is None and comm is None:
            raise ValueError("Either 'group' or 'comm' must be provided.")
        if group is None:
            raise ValueError("loom.ep.Buffer needs a torch.distributed group (mpi4py's comm is "
                             "not supported)")
        if enable_shrink:
            raise NotImplementedError("loom.ep.Buffer: enable_shrink (rank masks) is not offered")
        self.group = group
        self.rank = group.rank()
        self.group_size = group.size()
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self.enable_shrink = enable_shrink
        self.device = torch.device(device) if device is not None else _group_device(group)
        spec = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        uid = [_loom.get_unique_id() if self.rank == 0 else None]
        dist.broadcast_object_list(uid, src=dist.get_global_rank(group, 0), group=group)
        self._comm = _loom.Comm.init_rank(self.group_size, uid[0], self.rank, timeout_ms, spec)
        self._normal = None           # (ep, row capacity in bytes, experts)
        self._low_latency = None      # (ep, (max tokens, hidden, experts))
        # Low-latency dispatch's receive tensors, made once per shape: two sets used in turn, so
        # a dispatch's results stay valid until the next but one (DeepEP's double buffering).
        self._low_latency_outputs = {}
        self._low_latency_turn = 0
        self._comm_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    # ---- life and static helpers ----

    def destroy(self):
        assert self.explicitly_destroy, "`explicitly_destroy` flag must be set"
        self._release()

    def _release(self):
        for part in (self._normal, self._low_latency):
            if part is not None:
                part[0].destroy()
        self._normal = self._low_latency = None
        self._low_latency_outputs = {}
        if getattr(self, "_comm", None) is not None:
            self._comm.destroy()
            self._comm = None

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass

    @staticmethod
    def is_sm90_compiled():
        return False

    @staticmethod
    def set_num_sms(new_num_sms):
        assert new_num_sms % 2 == 0, "The SM count must be even"
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture():
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            event = torch.cuda.Event()
            event.record()
            return EventOverlap(event)
        return EventOverlap(None)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
                                       num_experts):
        return _loom.ep_low_latency_size_hint(num_max_dispatch_tokens_per_rank, hidden,
                                              num_ranks, num_experts)

    @staticmethod
    def get_dispatch_config(num_ranks):
        return Config(Buffer.num_sms, 8, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks):
        return Config(Buffer.num_sms, 8, 256, 6, 128)

    def get_comm_stream(self):
        return self._comm_stream

    def get_local_buffer_tensor(self, dtype, size=None, offset=0, use_rdma_buffer=False):
        raise NotImplementedError("loom.ep.Buffer: the raw buffer is not exposed "
                                  "(get_next_low_latency_combine_buffer is)")

    # ---- the objects behind the calls, made at the first call of each mode ----

    def _normal_ep(self, row_bytes, num_experts):
        if self._normal is not None:
            ep, capacity, experts = self._normal
            if row_bytes <= capacity and num_experts == experts:
                return ep
            ep.destroy()
        capacity = max(row_bytes, _MIN_ROW_BYTES)
        buffer_bytes = min(self.num_nvl_bytes, _MAX_BUFFER_BYTES) if self.num_nvl_bytes else 0
        ep = _loom.Ep(self._comm, _loom.EP_NORMAL, _MAX_NORMAL_TOKENS, capacity, 1, 64,
                      num_experts, buffer_bytes)
        self._normal = (ep, capacity, num_experts)
        return ep

    def _low_latency_ep(self, max_tokens, hidden, num_experts):
        if not self.low_latency_mode:
            raise RuntimeError("low-latency calls need Buffer(..., low_latency_mode=True)")
        key = (max_tokens, hidden, num_experts)
        if self._low_latency is not None and self._low_latency[1] == key:
            return self._low_latency[0]
        if self._low_latency is not None:
            self._low_latency[0].destroy()
        if self.num_rdma_bytes:
            need = Buffer.get_low_latency_rdma_size_hint(max_tokens, hidden, self.group_size,
                                                         num_experts)
            if self.num_rdma_bytes < need:
                raise ValueError(f"num_rdma_bytes {self.num_rdma_bytes} is below "
                                 f"get_low_latency_rdma_size_hint's {need}")
        ep = _loom.Ep(self._comm, _loom.EP_LOW_LATENCY, max_tokens, hidden, 9, 64, num_experts, 0)
        self._low_latency = (ep, key)
        return ep

    # ---- streams and events (CUDA); on the CPU every call has finished when it returns ----

    @contextlib.contextmanager
    def _call(self, previous_event, async_finish, allocate_on_comm_stream, tensors, hook=False):
        """Runs a call on the communication stream: after `previous_event` (else the current
        stream's work), allocating there if asked; ends with the event the call returns. A call
        the caller waits for anyway (no event, no async_finish, no hook) runs on the current
        stream itself: the same order, without the two stream waits that cost a decode step
        more host time than its kernels take."""
        if self._comm_stream is None:
            yield 0
            tensors.append(EventOverlap(None))
            return
        if previous_event is None and not async_finish and not allocate_on_comm_stream \
                and not hook:
            yield _current_raw_stream(self.device)
            tensors.append(EventOverlap(None))
            return
        compute = torch.cuda.current_stream()
        if allocate_on_comm_stream:
            assert previous_event is not None and async_finish
        if previous_event is not None and previous_event.event is not None:
            self._comm_stream.wait_event(previous_event.event)
        else:
            self._comm_stream.wait_stream(compute)
        with torch.cuda.stream(self._comm_stream if allocate_on_comm_stream else compute):
            yield self._comm_stream.cuda_stream
        if async_finish:
            for t in tensors:
                if isinstance(t, torch.Tensor):
                    t.record_stream(self._comm_stream)
            event = torch.cuda.Event()
            event.record(self._comm_stream)
            tensors.append(EventOverlap(event, tuple(tensors)))
        else:
            compute.wait_stream(self._comm_stream)
            tensors.append(EventOverlap(None))

    def _empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _check(self, t, name, dims=None, dtype=None):
        if t.device != self.device:
            raise ValueError(f"{name} is on {t.device}; this buffer serves {self.device}")
        if dims is not None and t.dim() != dims:
            raise ValueError(f"{name} must have {dims} dimensions, has shape {tuple(t.shape)}")
        if dtype is not None and t.dtype != dtype:
            raise ValueError(f"{name} must be {dtype}, is {t.dtype}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")


def _host_view(address, nbytes, dtype, shape):
    """A CPU tensor over `nbytes` of host memory at `address` (Loom's shared buffer)."""
    raw = (ctypes.c_byte * nbytes).from_address(address)
    return torch.frombuffer(raw, dtype=dtype, count=nbytes // torch.empty((), dtype=dtype)
                            .element_size()).view(shape)


# The calls (python/loom/_ep_calls.py) use the names above.
from . import _ep_calls  # noqa: E402

for _name in _ep_calls.__all__:
    setattr(Buffer, _name, getattr(_ep_calls, _name))
