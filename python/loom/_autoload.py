"""torch's "torch.backends" entry point (pyproject.toml): ``import torch`` registers the "loom"
torch.distributed backend, so ``import loom`` itself need not import torch. Never raises: a
failure here would break ``import torch`` for everyone in the environment."""


def register():
    try:
        import loom
        loom._register_torch_backend()
    except Exception:  # noqa: BLE001  (init_process_group("loom") reports the problem then)
        pass
