"""What a newcomer runs into first: import time, arrays Loom cannot use, a missing backend, a
README example that needs a package pip did not install."""
import importlib.metadata
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import loom


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_import_loom_does_not_import_torch():
    r = run_python("import sys, loom; print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


@pytest.fixture(scope="module")
def comm():
    c = loom.Comm.init_rank(1, loom.get_unique_id(), 0)
    yield c
    c.destroy()


def test_read_only_output_is_refused_clearly(comm):
    x = np.zeros(4, np.float32)
    x.setflags(write=False)
    with pytest.raises(ValueError, match="send is read-only, but Loom writes the result into it"):
        comm.allreduce(x)
    with pytest.raises(ValueError, match="recv is read-only"):
        comm.allgather(np.ones(4, np.float32), x)


def test_read_only_input_is_fine(comm):
    x = np.arange(4, dtype=np.float32)
    x.setflags(write=False)
    out = np.zeros(4, np.float32)
    comm.allgather(x, out)
    assert np.array_equal(out, x)
    comm.allreduce(x, out)
    assert np.array_equal(out, x)


def test_non_contiguous_is_refused_clearly(comm):
    with pytest.raises(ValueError, match="not C-contiguous.*ascontiguousarray"):
        comm.allreduce(np.zeros((4, 4), np.float32)[:, 1])


def test_wrong_dtype_is_refused_clearly(comm):
    with pytest.raises(ValueError, match="dtype complex64, which Loom does not.*float32"):
        comm.allreduce(np.zeros(4, np.complex64))
    with pytest.raises(ValueError, match="dtype bool"):
        comm.allreduce(np.zeros(4, bool))


def test_missing_torch_backend_explains_itself():
    pytest.importorskip("torch")
    # As if the package had been built without torch: init_process_group("loom") says why and
    # how to rebuild, instead of torch's "Unknown backend type".
    code = """
import importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "loom._loom_torch" else real(name, *a)
import loom, torch, torch.distributed as dist
assert loom.register_torch_backend() is False
try:
    dist.init_process_group("loom", store=dist.HashStore(), rank=0, world_size=1)
except Exception as e:
    print(e)
    sys.exit(0)
sys.exit("init_process_group succeeded")
"""
    r = run_python(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "built without its torch backend" in r.stdout, r.stdout
    assert "pip install --force-reinstall --no-deps ." in r.stdout, r.stdout


def test_import_torch_registers_the_backend():
    pytest.importorskip("torch")
    if not loom.torch_backend_registered:
        pytest.skip("built without the torch backend")
    # No `import loom`: torch's backend autoload (the entry point) registers "loom".
    r = run_python("import torch.distributed as dist; print('loom' in dist.Backend.backend_list)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def readme_imports():
    """Top-level modules the README's Python examples import."""
    text = open(README).read()
    modules = set()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0]  # a comment may hold commas or words after "import"
            m = re.match(r"\s*(?:import\s+(.+)|from\s+(\S+)\s+import)", line)
            if not m:
                continue
            names = m.group(1).split(",") if m.group(1) else [m.group(2)]
            modules |= {n.split()[0].split(".")[0] for n in names}
    return modules


def test_readme_examples_need_only_what_pip_installs():
    # In a fresh virtual environment `pip install .` brings the package and its declared
    # requirements; torch is the one the README says to install first. numpy was once missing.
    declared = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower()
                for r in importlib.metadata.requires("loomccl") or [] if "extra ==" not in r}
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    missing = {m for m in readme_imports() if m not in stdlib | declared | {"loom", "torch"}}
    assert not missing, f"the README imports {sorted(missing)}, which pip install . does not install"
