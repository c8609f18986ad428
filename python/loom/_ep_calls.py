"""The calls of loom.ep.Buffer (attached to it in loom/ep.py), with DeepEP's arguments and return
tuples. Each checks its tensors, allocates its outputs, and calls Loom's C API through
loom._loom.Ep with their addresses."""

import math

import torch

from .ep import _MIN_ROW_BYTES, EventOverlap, _Handle, _host_view, _ptr, _type_code

__all__ = ["get_dispatch_layout", "dispatch", "internode_dispatch", "combine", "internode_combine",
           "clean_low_latency_buffer", "low_latency_dispatch", "low_latency_combine",
           "get_next_low_latency_combine_buffer", "low_latency_update_mask_buffer",
           "low_latency_query_mask_buffer", "low_latency_clean_mask_buffer"]


def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                        allocate_on_comm_stream=False):
    """(num_tokens_per_rank, None, num_tokens_per_expert, is_token_in_rank, event)."""
    self._check(topk_idx, "topk_idx", 2, torch.int64)
    tokens, topk = topk_idx.shape
    row = self._normal[1] if self._normal is not None else _MIN_ROW_BYTES
    ep = self._normal_ep(row, num_experts)
    out = []
    with self._call(previous_event, async_finish, allocate_on_comm_stream, out) as stream:
        per_rank = self._empty((self.group_size,), torch.int32)
        per_expert = self._empty((num_experts,), torch.int32)
        in_rank = self._empty((tokens, self.group_size), torch.bool)
        out += [topk_idx, per_rank, per_expert, in_rank]
        ep.layout(_ptr(topk_idx), tokens, topk, _ptr(per_rank), _ptr(per_expert),
                  _ptr(in_rank), stream)
    return per_rank, None, per_expert, in_rank, out[-1]


def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
             is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
             expert_alignment=1, num_worst_tokens=0, config=None, previous_event=None,
             async_finish=False, allocate_on_comm_stream=False):
    """(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle,
    event); recv_x is a (values, scales) tuple when x is. With a handle (cached): the handle's
    layout again, and only recv_x (the rest None)."""
    x, x_scales = x if isinstance(x, tuple) else (x, None)
    self._check(x, "x", 2)
    tokens, hidden = x.shape
    num_scales = 0
    if x_scales is not None:
        self._check(x_scales, "x_scales", 2, torch.float32)
        num_scales = x_scales.shape[1]
    if handle is not None:
        assert topk_idx is None and topk_weights is None, "a cached dispatch takes no top-k"
        rank_prefix, _, _, recv_src_idx, is_token_in_rank, send_head = handle
        num_recv = getattr(handle, "num_recv_tokens", recv_src_idx.shape[0])
        capacity = recv_src_idx.shape[0]
        num_experts = self._normal[2] if self._normal is not None else self.group_size
    else:
        if is_token_in_rank is None:
            raise ValueError("dispatch needs is_token_in_rank (get_dispatch_layout's) or a handle")
        if num_tokens_per_expert is None and topk_idx is None:
            raise ValueError("dispatch needs num_tokens_per_expert or topk_idx")
        num_experts = (num_tokens_per_expert.shape[0] if num_tokens_per_expert is not None
                       else self._normal[2])
        for t, name, dtype in ((topk_idx, "topk_idx", torch.int64),
                               (topk_weights, "topk_weights", torch.float32),
                               (num_tokens_per_expert, "num_tokens_per_expert", torch.int32)):
            if t is not None:
                self._check(t, name, None, dtype)
    self._check(is_token_in_rank, "is_token_in_rank", 2, torch.bool)
    ep = self._normal_ep(hidden * x.element_size(), num_experts)
    topk = topk_idx.shape[1] if topk_idx is not None else 0
    local = num_experts // self.group_size
    out = []
    with self._call(previous_event, async_finish, allocate_on_comm_stream, out) as stream:
        if handle is None:
            rank_prefix = self._empty((self.group_size, self.group_size), torch.int32)
            send_head = self._empty((tokens, self.group_size), torch.int32)
            num_recv, counts = -1, []
            if num_worst_tokens <= 0:  # count first: the receive tensors of the exact size
                num_recv, counts = ep.dispatch(
                    True, 0, _type_code(x, "x"), hidden, tokens, _ptr(x_scales), num_scales,
                    _ptr(topk_idx), _ptr(topk_weights), topk, _ptr(num_tokens_per_expert),
                    expert_alignment, 0, 0, 0, 0, 0, _ptr(rank_prefix), 0,
                    _ptr(send_head), _ptr(is_token_in_rank), -1, local, stream)
            capacity = num_worst_tokens if num_worst_tokens > 0 else num_recv
            recv_src_idx = self._empty((capacity,), torch.int32)
        recv_x = self._empty((capacity, hidden), x.dtype)
        recv_scales = (self._empty((capacity, num_scales), torch.float32)
                       if x_scales is not None else None)
        recv_topk = self._empty((capacity, topk), torch.int64) if topk_idx is not None else None
        recv_weights = (self._empty((capacity, topk), torch.float32)
                        if topk_weights is not None else None)
        out += [t for t in (x, x_scales, topk_idx, topk_weights, is_token_in_rank, rank_prefix,
                            send_head, recv_src_idx, recv_x, recv_scales, recv_topk, recv_weights)
                if t is not None]
        num_recv, worst_counts = ep.dispatch(
            False, _ptr(x), _type_code(x, "x"), hidden, tokens, _ptr(x_scales), num_scales,
            _ptr(topk_idx), _ptr(topk_weights), topk, _ptr(num_tokens_per_expert),
            expert_alignment, _ptr(recv_x), _ptr(recv_scales), _ptr(recv_topk),
            _ptr(recv_weights), capacity, _ptr(rank_prefix), _ptr(recv_src_idx),
            _ptr(send_head), _ptr(is_token_in_rank), num_recv, local, stream)
    recv = (recv_x, recv_scales) if x_scales is not None else recv_x
    if handle is not None:
        return recv, None, None, None, None, out[-1]
    # DeepEP's handle, one channel: the per-channel prefixes are the per-rank counts.
    per_rank = rank_prefix.diff(dim=0, prepend=torch.zeros_like(rank_prefix[:1]))
    channel_prefix = per_rank[self.rank].reshape(-1, 1).contiguous()
    recv_channel_prefix = per_rank[:, self.rank].reshape(-1, 1).contiguous()
    new_handle = _Handle((rank_prefix, channel_prefix, recv_channel_prefix, recv_src_idx,
                          is_token_in_rank, send_head), num_recv)
    counts = [] if num_worst_tokens > 0 else counts
    return recv, recv_topk, recv_weights, counts, new_handle, out[-1]


def internode_dispatch(self, *args, **kwargs):
    """DeepEP's internode entry point: the same call here (Loom picks its path itself)."""
    return dispatch(self, *args, **kwargs)


def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
            async_finish=False, allocate_on_comm_stream=False):
    """(combined_x, combined_topk_weights, event): each token's rows from the ranks it went to,
    summed in rank order in fp32 (bias added first), and their top-k weights summed likewise."""
    rank_prefix, _, _, recv_src_idx, _, send_head = handle
    num_recv = getattr(handle, "num_recv_tokens", recv_src_idx.shape[0])
    self._check(x, "x", 2)
    if x.shape[0] < num_recv:
        raise ValueError(f"x has {x.shape[0]} rows; the handle received {num_recv}")
    tokens, hidden = send_head.shape[0], x.shape[1]
    bias0, bias1 = (bias, None) if isinstance(bias, torch.Tensor) else (bias or (None, None))
    for b, name in ((bias0, "bias"), (bias1, "bias[1]")):
        if b is not None:
            self._check(b, name, 2, x.dtype)
            if tuple(b.shape) != (tokens, hidden):
                raise ValueError(f"{name} must be [{tokens}, {hidden}]")
    topk = 0
    if topk_weights is not None:
        self._check(topk_weights, "topk_weights", 2, torch.float32)
        topk = topk_weights.shape[1]
    ep = self._normal_ep(hidden * x.element_size(), self._normal[2])
    out = []
    with self._call(previous_event, async_finish, allocate_on_comm_stream, out) as stream:
        combined = self._empty((tokens, hidden), x.dtype)
        combined_weights = (self._empty((tokens, topk), torch.float32)
                            if topk_weights is not None else None)
        out += [t for t in (x, topk_weights, bias0, bias1, rank_prefix, recv_src_idx, send_head,
                            combined, combined_weights) if t is not None]
        ep.combine(_ptr(x), _type_code(x, "x"), hidden, _ptr(topk_weights), topk,
                   _ptr(bias0), _ptr(bias1), _ptr(rank_prefix), _ptr(recv_src_idx),
                   _ptr(send_head), tokens, num_recv, _ptr(combined),
                   _ptr(combined_weights), stream)
    return combined, combined_weights, out[-1]


def internode_combine(self, *args, **kwargs):
    return combine(self, *args, **kwargs)


def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank, hidden, num_experts):
    """Nothing to clean: Loom's low-latency rounds are numbered, not zero-initialized."""
    self._low_latency_ep(num_max_dispatch_tokens_per_rank, hidden, num_experts)


def _scales(self, local, slots, hidden, use_ue8m0):
    groups = math.ceil(hidden / 128)
    if use_ue8m0:
        return self._empty((local, math.ceil(groups / 4), slots), torch.int32).transpose(1, 2)
    return self._empty((local, groups, slots), torch.float32).transpose(1, 2)


def _low_latency_outputs(self, local, slots, hidden, use_fp8, use_ue8m0):
    """The receive tensors of a low-latency dispatch: allocated once per shape, two sets used in
    turn (a call's results stay valid until the next but one, as DeepEP's double buffer), so a
    call allocates nothing (a fresh [local experts, slots, hidden] tensor per call cost more
    than the call on CPU ranks)."""
    key = (local, slots, hidden, use_fp8, use_ue8m0)
    sets = self._low_latency_outputs.get(key)
    if sets is None:
        sets = [(self._empty((local, slots, hidden),
                             torch.float8_e4m3fn if use_fp8 else torch.bfloat16),
                 _scales(self, local, slots, hidden, use_ue8m0) if use_fp8 else None,
                 self._empty((local,), torch.int32),
                 self._empty((local, slots), torch.int32),
                 self._empty((local, self.group_size), torch.int64)) for _ in range(2)]
        self._low_latency_outputs[key] = sets
    self._low_latency_turn ^= 1
    return sets[self._low_latency_turn]


def _receive(self, ep, hook_id, stream):
    """A low-latency call's hook: its receive runs on the communication stream, and the stream
    current at the hook waits for it, since what the caller does next reads what arrived."""
    ep.hook_wait(hook_id, stream)
    if self._comm_stream is not None:
        torch.cuda.current_stream().wait_stream(self._comm_stream)


def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                         cumulative_local_expert_recv_stats=None,
                         dispatch_wait_recv_cost_stats=None, use_fp8=True, round_scale=False,
                         use_ue8m0=False, async_finish=False, return_recv_hook=False):
    """(recv_x or (values, scales), recv_count, handle, event, hook): every local expert's
    tokens [local experts, num_max_dispatch_tokens_per_rank * ranks, hidden], grouped by source
    rank in token order. return_recv_hook: the call returns once this rank's tokens are out and
    hook() receives."""
    self._check(x, "x", 2, torch.bfloat16)
    self._check(topk_idx, "topk_idx", 2, torch.int64)
    tokens, hidden = x.shape
    m = num_max_dispatch_tokens_per_rank
    ep = self._low_latency_ep(m, hidden, num_experts)
    local, slots = num_experts // self.group_size, m * self.group_size
    if cumulative_local_expert_recv_stats is not None:
        self._check(cumulative_local_expert_recv_stats, "cumulative_local_expert_recv_stats", 1,
                    torch.int32)
    out = []
    with self._call(None, async_finish, False, out, return_recv_hook) as stream:
        recv_x, scales, count, src_info, layout_range = _low_latency_outputs(
            self, local, slots, hidden, use_fp8, use_ue8m0)
        out += [t for t in (x, topk_idx, recv_x, scales, count, src_info, layout_range,
                            cumulative_local_expert_recv_stats) if t is not None]
        hook_id = ep.low_latency_dispatch(
            _ptr(x), hidden, tokens, _ptr(topk_idx), topk_idx.shape[1], use_fp8,
            round_scale, use_ue8m0, _ptr(recv_x), _ptr(scales), _ptr(count),
            _ptr(src_info), _ptr(layout_range), _ptr(cumulative_local_expert_recv_stats),
            return_recv_hook, stream)
    handle = (src_info, layout_range, m, hidden, num_experts)
    hook = (lambda: _receive(self, ep, hook_id, stream)) if return_recv_hook else None
    return (recv_x, scales) if use_fp8 else recv_x, count, handle, out[-1], hook


def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False,
                        zero_copy=False, async_finish=False, return_recv_hook=False, out=None,
                        combine_wait_recv_cost_stats=None):
    """(combined_x, event, hook): each token's sum over its top-k picks of weight * expert row,
    in top-k order, in fp32, rounded to bf16 once. zero_copy: x is (a view of) the buffer
    get_next_low_latency_combine_buffer returned, already filled."""
    src_info, layout_range, m, hidden, num_experts = handle
    self._check(x, "x", 3, torch.bfloat16)
    self._check(topk_idx, "topk_idx", 2, torch.int64)
    self._check(topk_weights, "topk_weights", 2, torch.float32)
    ep = self._low_latency_ep(m, hidden, num_experts)
    tokens = topk_idx.shape[0]
    tensors = []
    with self._call(None, async_finish, False, tensors, return_recv_hook) as stream:
        combined = out if out is not None else self._empty((tokens, hidden), torch.bfloat16)
        tensors += [x, topk_idx, topk_weights, src_info, layout_range, combined]
        hook_id = ep.low_latency_combine(
            0 if zero_copy else _ptr(x), hidden, tokens, _ptr(topk_idx),
            _ptr(topk_weights), topk_idx.shape[1], _ptr(src_info),
            _ptr(layout_range), _ptr(combined), return_recv_hook, stream)
    hook = (lambda: _receive(self, ep, hook_id, stream)) if return_recv_hook else None
    return combined, tensors[-1], hook


def get_next_low_latency_combine_buffer(self, handle):
    """The buffer the next low-latency combine sends from, [local experts,
    num_max_dispatch_tokens_per_rank * ranks, hidden] bf16 (CPU buffers only): fill it, then
    low_latency_combine(..., zero_copy=True)."""
    src_info, layout_range, m, hidden, num_experts = handle
    if self.device.type != "cpu":
        raise NotImplementedError("get_next_low_latency_combine_buffer: CPU buffers only")
    ep = self._low_latency_ep(m, hidden, num_experts)
    local, slots = num_experts // self.group_size, m * self.group_size
    address = ep.combine_buffer(hidden)
    return _host_view(address, local * slots * hidden * 2, torch.bfloat16, (local, slots, hidden))


def low_latency_update_mask_buffer(self, rank_to_mask, mask=False):
    raise NotImplementedError("loom.ep.Buffer: rank masks (enable_shrink) are not offered")


def low_latency_query_mask_buffer(self, mask_status):
    raise NotImplementedError("loom.ep.Buffer: rank masks (enable_shrink) are not offered")


def low_latency_clean_mask_buffer(self):
    raise NotImplementedError("loom.ep.Buffer: rank masks (enable_shrink) are not offered")
