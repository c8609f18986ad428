"""loom.torch.passes.fuse_chained_allgathers.

Graph shapes (which chains fuse, which are left alone) are checked in this process on a "fake"
process group of 8 ranks (torch's test backend: collectives are not run, so graphs are only traced
and rewritten). Results are checked on real ranks, over "loom" and "gloo": 2x2 and 2x3 meshes, and
a training step under torch.compile (graph_pass_worker.py).
"""
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
import loom  # noqa: E402
from ranks import free_port, run_ranks, worlds  # noqa: E402

pytestmark = pytest.mark.skipif(not loom.torch_backend_registered,
                                reason="loom was built without torch")

WORKER = os.path.join(os.path.dirname(__file__), "graph_pass_worker.py")


def passes_module():
    pytest.importorskip("torch.distributed.tensor")  # public DTensor
    pytest.importorskip("torch.fx.experimental.proxy_tensor")
    from loom.torch import passes
    if not passes.is_supported():
        pytest.skip("this torch lacks functional collectives or DeviceMesh")
    return passes


@pytest.fixture(scope="module")
def fake():
    """(passes, funcol, make_fx, 2x2 mesh, 2x2x2 mesh) on a fake 8-rank process group."""
    passes = passes_module()
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
        from torch.fx.experimental.proxy_tensor import make_fx
    except ImportError as e:
        pytest.skip(f"this torch lacks what the test needs: {e}")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        mesh3 = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("a", "b", "c"))
        mesh2 = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("x", "y"))
        yield passes, funcol, make_fx, mesh2, mesh3
    finally:
        dist.destroy_process_group()


AG = "all_gather_into_tensor"


def trace(fake, fn, x=None):
    make_fx = fake[2]
    return make_fx(fn, tracing_mode="fake")(torch.randn(4, 4) if x is None else x)


def group_sizes(gm):
    """Sizes of the all-gathers of `gm`, in graph order."""
    return [n.args[1] for n in gm.graph.nodes if getattr(n.target, "__name__", "").startswith(AG)]


def fused(fake, fn, mesh, x=None):
    """(gather sizes before, after, gathers removed) of `fn`'s graph."""
    gm = trace(fake, fn, x)
    before = group_sizes(gm)
    removed = fake[0].fuse_chained_allgathers(gm, mesh)
    gm.graph.lint()
    return before, group_sizes(gm), removed


def gather(x, group):
    """The all-gather (on dim 0) of functional collectives, as DTensor emits it."""
    c10d = torch.ops._c10d_functional
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, group.size(), group.group_name))


def chained(fake, mesh, first, second, between=lambda y: y):

    def fn(x):
        y = between(gather(x, mesh.get_group(first)))
        return gather(y, mesh.get_group(second)) * 2

    return fn


def test_views_composing_to_the_identity_fuse(fake):
    mesh2 = fake[3]
    views = chained(fake, mesh2, 1, 0, lambda y: y.t().unsqueeze(0).squeeze(0).t().view(8, 4)
                    .reshape(8, 4).permute(1, 0).transpose(0, 1).expand(8, 4))
    assert fused(fake, views, mesh2) == ([2, 2], [4], 1)


def test_dtensor_redistribution_on_three_dims_fuses_into_one(fake):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    # A mesh of its own: once a mesh has flattened dimensions, DTensor gathers over them itself.
    mesh3 = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("d", "e", "f"))

    def fn(local):
        d = DTensor.from_local(local, mesh3, [Shard(0)] * 3, run_check=False)
        return d.redistribute(mesh3, [Replicate()] * 3).to_local()

    assert fused(fake, fn, mesh3) == ([2, 2, 2], [8], 2)


def test_a_slice_between_is_left_alone(fake):
    mesh2 = fake[3]
    for cut in (lambda y: y[:4], lambda y: y[1:], lambda y: y[::2], lambda y: y[:, :2]):
        assert fused(fake, chained(fake, mesh2, 1, 0, cut), mesh2) == ([2, 2], [2, 2], 0)


def test_a_slice_that_keeps_everything_fuses(fake):
    mesh2 = fake[3]  # DTensor's redistribution emits these at some sizes
    assert fused(fake, chained(fake, mesh2, 1, 0, lambda y: y[0:8]), mesh2) == ([2, 2], [4], 1)


def test_a_view_with_a_second_user_is_left_alone(fake):
    funcol, mesh2 = fake[1], fake[3]

    def fn(x):
        y = gather(x, mesh2.get_group(1)).view(8, 4)
        return gather(y, mesh2.get_group(0)), y + 1

    assert fused(fake, fn, mesh2) == ([2, 2], [2, 2], 0)


def test_views_that_are_not_the_identity_are_left_alone(fake):
    mesh2 = fake[3]
    # Same shape, transposed strides (the data would be read in another order).
    x = torch.randn(4, 8)
    assert fused(fake, chained(fake, mesh2, 1, 0, lambda y: y.t()), mesh2, x) == ([2, 2], [2, 2],
                                                                                  0)
    # A reshape that copies (the transposed data, laid out anew), viewed back to the original
    # shape and strides: make_fx writes it as clone + _unsafe_view (not views), pre-dispatch
    # graphs as aten.reshape, which the pass replays on a meta tensor to see the copy.
    x = torch.randn(2, 8)
    copy = chained(fake, mesh2, 1, 0, lambda y: y.t().reshape(32).view(4, 8))
    assert fused(fake, copy, mesh2, x) == ([2, 2], [2, 2], 0)
    gm = trace(fake, copy, x)
    clone = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default)
    unsafe = next(iter(clone.users))
    with gm.graph.inserting_before(clone):
        reshape = gm.graph.call_function(torch.ops.aten.reshape.default, (clone.args[0], [32]))
    reshape.meta.update(unsafe.meta)
    unsafe.replace_all_uses_with(reshape)
    gm.graph.erase_node(unsafe)
    gm.graph.erase_node(clone)
    assert fake[0].fuse_chained_allgathers(gm, mesh2) == 0
    assert group_sizes(gm) == [2, 2]


def test_reversed_dimension_order_is_left_alone(fake):
    mesh2 = fake[3]
    assert fused(fake, chained(fake, mesh2, 0, 1), mesh2) == ([2, 2], [2, 2], 0)


def test_a_different_dtype_is_left_alone(fake):
    mesh2 = fake[3]
    fn = chained(fake, mesh2, 1, 0, lambda y: y.view(torch.int32))
    assert fused(fake, fn, mesh2) == ([2, 2], [2, 2], 0)


def test_sizes_that_do_not_multiply_to_the_mesh_are_left_alone(fake):
    passes, funcol, mesh2, mesh3 = fake[0], fake[1], fake[3], fake[4]
    flat = mesh3["b", "c"]._flatten() if hasattr(mesh3, "_flatten") else None
    if flat is None:
        pytest.skip("this torch has no DeviceMesh._flatten")

    def fn(x):  # a 2-rank then a 4-rank gather: not two dimensions of one mesh
        y = gather(x, mesh3.get_group(2))
        return gather(y, flat.get_group(0)) * 2

    assert fused(fake, fn, [mesh3, flat]) == ([2, 4], [2, 4], 0)
    # A gather whose size argument disagrees with its mesh dimension.
    gm = trace(fake, chained(fake, mesh2, 1, 0))
    second = [n for n in gm.graph.nodes if getattr(n.target, "__name__", "").startswith(AG)][1]
    second.args = (second.args[0], 3, second.args[2])
    assert passes.fuse_chained_allgathers(gm, mesh2) == 0


def test_groups_of_another_mesh_are_left_alone(fake):
    mesh2, mesh3 = fake[3], fake[4]
    assert fused(fake, chained(fake, mesh3, 2, 0), mesh2) == ([2, 2], [2, 2], 0)


def test_on_a_three_dim_mesh_only_the_valid_pair_fuses(fake):
    funcol, mesh3 = fake[1], fake[4]

    def fn(x):  # dim 1, then dim 2 (wrong order), then dim 0: dims 2 and 0 chain validly
        y = gather(x, mesh3.get_group(1)) + 1
        y = gather(y, mesh3.get_group(1))
        y = gather(y, mesh3.get_group(2))
        return gather(y.view(-1, 4), mesh3.get_group(0)) * 2

    before, after, removed = fused(fake, fn, mesh3)
    assert (before, after, removed) == ([2, 2, 2, 2], [2, 2, 4], 1)

    def skip_one(x):  # dims 2 and 0 fuse, the gather over dim 1 after a transpose stays
        y = gather(x, mesh3.get_group(2))
        y = gather(y, mesh3.get_group(0)).t()
        return gather(y, mesh3.get_group(1)) * 2

    assert fused(fake, skip_one, mesh3) == ([2, 2, 2], [4, 2], 1)


def test_the_fused_wait_comes_before_the_first_use(fake):
    mesh2 = fake[3]
    gm = trace(fake, chained(fake, mesh2, 1, 0))
    assert fake[0].fuse_chained_allgathers(gm, mesh2) == 1
    order = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert order == ["_c10d_functional.all_gather_into_tensor.default",
                     "_c10d_functional.wait_tensor.default", "aten.mul.Tensor"], order


def test_the_mesh_comes_from_the_context_or_must_be_given(fake):
    passes, mesh2 = fake[0], fake[3]
    gm = trace(fake, chained(fake, mesh2, 1, 0))
    with pytest.raises(ValueError, match="no mesh given"):
        passes.fuse_chained_allgathers(gm)
    with mesh2:
        assert passes.fuse_chained_allgathers(gm) == 1


def test_the_flattened_group_without_mesh_dim_names_is_made_once(fake):
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from loom.torch.passes import _new_flat_group
    mesh = DeviceMesh("cpu", torch.arange(8).reshape(2, 2, 2))
    group = _new_flat_group(mesh, (0, 2))
    assert dist.get_process_group_ranks(group) == [0, 1, 4, 5]
    assert _new_flat_group(mesh, (0, 2)) is group


def test_enable_sets_and_restores_the_inductor_pass(fake):
    passes = fake[0]
    from torch._inductor import config
    before = config.post_grad_custom_post_pass
    with passes.enable_fuse_chained_allgathers(fake[3]) as handle:
        assert config.post_grad_custom_post_pass is handle.fuse_pass
        assert handle.fuse_pass.uuid() is None  # no FX graph cache: the pass makes groups
    assert config.post_grad_custom_post_pass is before


@pytest.mark.parametrize("world", worlds([4], [6]))
def test_fused_graphs_give_the_same_tensor_over_loom_and_gloo(world):
    passes_module()
    ports = f"{free_port()},{free_port()}"
    codes, outputs = run_ranks(WORKER, "fuse", world, [ports, "loom,gloo"], 300)
    assert codes == [0] * world, "\n".join(outputs)


def test_a_compiled_training_step_gives_the_same_loss_with_the_pass():
    passes_module()
    if shutil.which(os.environ.get("CXX", "g++")) is None and shutil.which("c++") is None:
        pytest.skip("torch.compile (inductor) needs a C++ compiler for CPU code")
    codes, outputs = run_ranks(WORKER, "train", 4, [str(free_port()), "loom"], 540)
    assert codes == [0] * 4, "\n".join(outputs)
