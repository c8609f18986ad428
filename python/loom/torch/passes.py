"""Graph passes over torch.fx graphs of distributed programs (any backend; Loom's first).

``fuse_chained_allgathers`` turns all-gathers chained over several dimensions of one
``DeviceMesh`` into one all-gather over the flattened mesh group. A tensor sharded ``S(0)S(0)`` on
a 2-D mesh and gathered back to ``Replicate`` shows up in a traced graph (``make_fx``,
``torch.compile``, DTensor redistribution in a recomputed backward) as::

    a = all_gather_into_tensor(x, n1, group of mesh dim 1); a = wait_tensor(a)
    (views of a that compose to the identity)
    b = all_gather_into_tensor(a, n0, group of mesh dim 0); b = wait_tensor(b)

On rank (i, j) of an (n0, n1) mesh, ``b`` is ``cat_i cat_j x[i, j]``: the blocks in the row-major
order of the mesh coordinates, which is the order of the flattened mesh's ranks. So one gather of
``x`` over the flattened group gives ``b`` bit for bit, with one launch and one synchronization
instead of two. The pass rewrites a chain only when all of these hold (otherwise the graph is left
as it is):

- every node between the first gather's wait and the second gather is a pure view op (permute,
  transpose, t, view, reshape without a copy, unsqueeze, squeeze, expand, alias; a slice only where
  it keeps its whole input, as DTensor's redistribution emits at some sizes, never one that drops
  anything) with a single user, and the views compose to the identity: same shape, strides, storage offset and dtype on
  the nodes' ``meta["val"]`` (FakeTensor) values, and replaying them on a ``meta`` tensor proves
  no step copies;
- each all-gather and its wait have one user each (a gathered intermediate used elsewhere is
  needed, so the first gather stays);
- the groups are dimensions of the same mesh and the later gather's dimensions all come before the
  earlier gather's in the mesh's order (the other order interleaves the blocks differently), and
  the gathers' group sizes are the sizes of those dimensions, so their product is the flattened
  group's size.

Longer chains (three mesh dimensions) fuse into one gather over all of them. The fused gather sits
where the first one was and its single ``wait_tensor`` where the last wait was, so the result is
waited on once, before its first use.

The flattened group is ``mesh[dims]._flatten()`` (cached by torch in the root mesh) where torch has
it, else one ``new_group`` per flattened row, created once per mesh and cached. Creating a group is
collective: every rank must run the pass on the same graph (SPMD programs do), and the first
fusion over a mesh creates the group on every rank.

Under ``torch.compile`` (inductor), enable it once, before compiling::

    import loom.torch.passes
    loom.torch.passes.enable_fuse_chained_allgathers(mesh)   # or: with ...(mesh): compile

It runs as inductor's ``post_grad_custom_post_pass`` on the forward and backward graphs. Because
the pass creates process groups, inductor's FX graph cache is bypassed for graphs compiled while it
is enabled (a cached graph would name a group that a fresh process never created).

Supported torch versions: graphs of the native functional collectives ops
(``torch.ops._c10d_functional.all_gather_into_tensor`` / ``wait_tensor``, what DTensor and
``torch.distributed._functional_collectives`` emit in torch 2.3 and later; the older Python
``c10d_functional`` ops are left alone). ``DeviceMesh._flatten`` is used where the mesh has it and
has dimension names, a cached ``new_group`` otherwise; inductor's ``CustomGraphPass`` where it
exists, a plain callable otherwise. Tested with torch 2.15 only. ``is_supported()`` says whether
the running torch has what the pass needs.
"""
import logging
import math
import weakref

import torch
import torch.distributed as dist
import torch.fx as fx

__all__ = [
    "FuseChainedAllGathers", "enable_fuse_chained_allgathers", "fuse_chained_allgathers",
    "is_supported"
]

log = logging.getLogger(__name__)


def _op(namespace, name, overload):
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    return getattr(packet, overload, None) if packet is not None else None


_ALL_GATHER = _op("_c10d_functional", "all_gather_into_tensor", "default")
_WAIT = _op("_c10d_functional", "wait_tensor", "default")

# Ops that return a view of their first argument (never a copy), whatever their other arguments.
# reshape may copy: the replay on meta tensors below rejects it where it does.
_VIEW_OPS = {
    op
    for op in (_op("aten", "view", "default"), _op("aten", "reshape", "default"),
               _op("aten", "permute", "default"), _op("aten", "transpose", "int"),
               _op("aten", "t", "default"), _op("aten", "unsqueeze", "default"),
               _op("aten", "squeeze", "default"), _op("aten", "squeeze", "dim"),
               _op("aten", "squeeze", "dims"), _op("aten", "expand", "default"),
               _op("aten", "alias", "default")) if op is not None
}

_SLICE = _op("aten", "slice", "Tensor")

# Flattened groups made with new_group (torch without DeviceMesh._flatten), per mesh: group
# creation is collective, so it happens once per mesh and dimensions, never per graph.
_FLAT_GROUPS = weakref.WeakKeyDictionary()


def is_supported():
    """Whether this torch has the functional collectives and DeviceMesh the pass works on."""
    try:
        from torch.distributed.device_mesh import DeviceMesh  # noqa: F401
    except ImportError:
        return False
    return _ALL_GATHER is not None and _WAIT is not None and dist.is_available()


class _Gather:
    """One all-gather node whose only user is its wait_tensor."""

    def __init__(self, node, wait):
        self.node, self.wait = node, wait
        self.input, self.size, self.group = node.args[0], node.args[1], node.args[2]
        self.views = []  # the views from `wait` to the next gather of a chain


def _gather_at(node):
    if node.op != "call_function" or node.target is not _ALL_GATHER or node.kwargs:
        return None
    if len(node.args) != 3 or not isinstance(node.args[2], str) or len(node.users) != 1:
        return None
    (wait,) = node.users
    if wait.target is not _WAIT or wait.args != (node,):
        return None
    return _Gather(node, wait)


def _val(node):
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _geometry(t):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def _no_nodes(args):
    found = []
    fx.node.map_arg(args, found.append)
    return not found


def _is_whole_slice(node):
    """A slice that keeps all of its input (DTensor emits `x[0:n]` on n rows at some sizes)."""
    if node.target is not _SLICE:
        return False
    before, after = _val(node.args[0]), _val(node)
    return before is not None and after is not None and _geometry(before) == _geometry(after)


def _views_are_identity(start, views):
    """Whether `views` (a chain from `start`) give back `start` itself: each a view, the composition
    with `start`'s geometry. Checked on the nodes' meta values and by replaying the ops."""
    first = _val(start)
    if first is None:
        return False
    for node in views:
        if _val(node) is None:
            return False
    last = _val(views[-1]) if views else first
    if _geometry(last) != _geometry(first):
        return False
    try:  # the meta values say nothing about copies: replay on a meta tensor, check aliasing
        base = torch.empty_strided(first.shape, first.stride(), dtype=first.dtype, device="meta")
        t = base
        for node in views:
            t = node.target(t, *node.args[1:], **node.kwargs)
            if not torch._C._is_alias_of(t, base):
                return False
        return _geometry(t) == _geometry(first)
    except Exception as e:  # symbolic sizes and the like: not provably the identity
        log.debug("fuse_chained_allgathers: cannot replay views after %s: %s", start, e)
        return False


def _link(gather):
    """The gather fed by `gather`'s result through single-user pure views, with those views; or
    (None, reason)."""
    node, views = gather.wait, []
    while True:
        if len(node.users) != 1:
            return None, f"{node.name} has {len(node.users)} users"
        (user,) = node.users
        if not user.args or user.args[0] is not node or not _no_nodes((user.args[1:], user.kwargs)):
            return None, f"{user.name} is not a view of {node.name}"
        following = _gather_at(user)
        if following is not None:
            return (following, views), None
        if user.op != "call_function" or (user.target not in _VIEW_OPS and
                                          not _is_whole_slice(user)):
            return None, f"{user.name} ({user.target}) is not a pure view"
        views.append(user)
        node = user


class _MeshIndex:
    """Process group name -> (mesh, mesh dimension) for the given meshes."""

    def __init__(self, meshes):
        self.meshes = meshes
        self.dims = {}
        for mesh in meshes:
            for d in range(mesh.ndim):
                self.dims.setdefault(mesh.get_group(d).group_name, (mesh, d))

    def flat_group(self, mesh, dims):
        """The group of this rank over mesh dimensions `dims` (ascending), flattened."""
        names = mesh.mesh_dim_names
        if names and hasattr(mesh, "_flatten"):
            sub = mesh if len(dims) == mesh.ndim else mesh[tuple(names[d] for d in dims)]
            return sub._flatten().get_group(0)
        return _new_flat_group(mesh, dims)


def _new_flat_group(mesh, dims):
    groups = _FLAT_GROUPS.setdefault(mesh, {})
    if dims not in groups:
        ranks = mesh.mesh
        others = [d for d in range(ranks.ndim) if d not in dims]
        rows = ranks.permute(*others, *dims).reshape(-1, math.prod(ranks.shape[d] for d in dims))
        me = dist.get_rank()
        for row in rows.tolist():  # every rank creates every row's group, in the same order
            group = dist.new_group(row)
            if me in row:
                groups[dims] = group
    return groups[dims]


def _current_meshes(mesh):
    if mesh is not None:
        return list(mesh) if isinstance(mesh, (list, tuple)) else [mesh]
    try:
        from torch.distributed.device_mesh import _mesh_resources
        stack = _mesh_resources.mesh_stack
    except (ImportError, AttributeError):
        stack = []
    if not stack:
        raise ValueError("fuse_chained_allgathers: no mesh given and none active; pass mesh= "
                         "the DeviceMesh whose groups the graph gathers over, or run the pass "
                         "inside `with mesh:`")
    return [stack[-1]]


def _chain_dims(chain, index):
    """The mesh and the flattened dimensions of a chain of gathers, or (None, reason)."""
    mesh, dims = None, ()
    for g in chain:
        found = index.dims.get(g.group)
        if found is None:
            return None, f"group {g.group} of {g.node.name} is no dimension of the given meshes"
        m, d = found
        if mesh is not None and m is not mesh:
            return None, f"{g.node.name} gathers over another mesh"
        if g.size != m.size(d):
            return None, f"{g.node.name} gathers {g.size} ranks, mesh dimension {d} has {m.size(d)}"
        # Each gather adds the outer blocks: its dimension must come before all earlier ones.
        if dims and d >= dims[0]:
            return None, f"{g.node.name} gathers mesh dimension {d} after dimensions {dims}"
        mesh, dims = m, (d,) + dims
    return (mesh, dims), None


def _fuse(graph, chain, group):
    first, last = chain[0], chain[-1]
    size = math.prod(g.size for g in chain)
    with graph.inserting_before(first.node):
        fused = graph.call_function(_ALL_GATHER, (first.input, size, group.group_name))
    with graph.inserting_before(last.wait):
        wait = graph.call_function(_WAIT, (fused,))
    fused.meta.update(last.node.meta)
    wait.meta.update(last.wait.meta)
    last.wait.replace_all_uses_with(wait)
    # Erase from the end: every node is unused once the ones after it are gone.
    doomed = []
    for g in chain:
        doomed += [g.node, g.wait] + (g.views if g is not last else [])
    for node in reversed(doomed):
        graph.erase_node(node)


def fuse_chained_allgathers(graph_module, mesh=None):
    """Fuses chains of all-gathers over dimensions of `mesh` (a DeviceMesh or a list of them;
    default: the mesh active through ``with mesh:``) into one all-gather each over the flattened
    group, in place. `graph_module` is a ``torch.fx.GraphModule`` (recompiled) or a
    ``torch.fx.Graph``. Returns the number of all-gathers removed (0: the graph is unchanged)."""
    graph = graph_module.graph if isinstance(graph_module, fx.GraphModule) else graph_module
    if not is_supported():
        return 0
    chains, seen = [], set()
    for node in list(graph.nodes):
        head = _gather_at(node)
        if head is None or node in seen:
            continue
        chain = [head]
        while True:
            found, reason = _link(chain[-1])
            if found is None:
                break
            following, views = found
            if not _views_are_identity(chain[-1].wait, views):
                reason = f"the views between {chain[-1].node.name} and {following.node.name} are " \
                         "not the identity"
                break
            if _val(chain[-1].input) is None or _val(following.input) is None or \
                    _val(chain[-1].input).dtype != _val(following.input).dtype:
                reason = f"{chain[-1].node.name} and {following.node.name} differ in dtype"
                break
            chain[-1].views = views
            chain.append(following)
        seen.update(g.node for g in chain)
        if len(chain) > 1:
            chains.append(chain)
        elif reason:
            log.debug("fuse_chained_allgathers: %s left alone: %s", node.name, reason)
    if not chains:
        return 0
    index = _MeshIndex(_current_meshes(mesh))
    removed = 0
    for chain in chains:
        # The longest valid prefix, then again from where it stopped.
        while len(chain) > 1:
            n = len(chain)
            while n > 1 and _chain_dims(chain[:n], index)[0] is None:
                n -= 1
            if n > 1:
                m, dims = _chain_dims(chain[:n], index)[0]
                _fuse(graph, chain[:n], index.flat_group(m, dims))
                removed += n - 1
                log.debug("fuse_chained_allgathers: fused %d gathers over mesh dims %s", n, dims)
                chain = chain[n:]  # the rest reads the fused result: a chain of its own
                continue
            log.debug("fuse_chained_allgathers: %s left alone: %s", chain[0].node.name,
                      _chain_dims(chain[:2], index)[1])
            chain = chain[1:]
    graph.lint()
    if isinstance(graph_module, fx.GraphModule):
        graph_module.recompile()
    return removed


try:  # torch >= 2.6: inductor's interface for custom passes (uuid() governs its graph cache)
    from torch._inductor.custom_graph_pass import CustomGraphPass as _CustomGraphPass
except ImportError:  # pragma: no cover - older torch takes any callable
    _CustomGraphPass = object


class FuseChainedAllGathers(_CustomGraphPass):
    """:func:`fuse_chained_allgathers` as an inductor custom graph pass: set it as
    ``torch._inductor.config.post_grad_custom_post_pass`` (what
    :func:`enable_fuse_chained_allgathers` does). ``removed`` counts the all-gathers it removed
    over every graph it ran on."""

    def __init__(self, mesh=None):
        self.mesh = mesh
        self.removed = 0

    def __call__(self, graph):
        self.removed += fuse_chained_allgathers(graph, self.mesh)

    def uuid(self):
        # The pass creates process groups: a graph compiled with it must not come from the cache
        # of another process, where its flattened group was never made. None bypasses the cache.
        return None


class _Enabled:
    """Handle of :func:`enable_fuse_chained_allgathers`: ``disable()`` or leave the ``with``."""

    def __init__(self, fuse_pass, previous):
        self.fuse_pass, self._previous = fuse_pass, previous

    def disable(self):
        from torch._inductor import config
        config.post_grad_custom_post_pass = self._previous

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.disable()


def enable_fuse_chained_allgathers(mesh=None):
    """Runs :func:`fuse_chained_allgathers` on every graph ``torch.compile`` (inductor) compiles
    from now on, as its post-grad custom pass (after any pass already set there). `mesh`: a
    DeviceMesh or a list of them (default: the mesh active through ``with mesh:`` when a graph is
    compiled). Returns a handle: ``handle.disable()``, or use it as a context manager;
    ``handle.fuse_pass.removed`` counts the gathers removed."""
    if not is_supported():
        raise RuntimeError("loom.torch.passes: this torch has no functional collectives "
                           "(torch.ops._c10d_functional, torch >= 2.3) or no DeviceMesh")
    from torch._inductor import config
    previous = config.post_grad_custom_post_pass
    fuse_pass = FuseChainedAllGathers(mesh)
    if previous is None:
        config.post_grad_custom_post_pass = fuse_pass
    else:
        try:  # newer inductors run a list of passes
            from torch._inductor.custom_graph_pass import get_custom_graph_passes
        except ImportError:
            raise RuntimeError("loom.torch.passes: inductor already has a post_grad_custom_post_pass "
                               "and this torch runs one only") from None
        config.post_grad_custom_post_pass = list(get_custom_graph_passes(previous)) + [fuse_pass]
    return _Enabled(fuse_pass, previous)
