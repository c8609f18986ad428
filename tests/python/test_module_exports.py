"""The package's extension modules export their PyInit function and nothing else of their own.

Each links static libraries (Loom, the CUDA runtime, and on some toolchains libstdc++). A module
that exported their functions let a process that loaded torch first bind half of them to torch's
copies: on the GPU hosts `_loom.Comm.init_rank` crashed in a stream's `<<` (a locale facet of the
other libstdc++) as soon as torch was imported before loom. Weak symbols (inline functions of
headers) may stay: every copy of those is the same code.
"""
import glob
import os
import shutil
import subprocess

import pytest

import loom

PACKAGE = os.path.dirname(loom.__file__)
MODULES = sorted(glob.glob(os.path.join(PACKAGE, "_loom*.so")) +
                 glob.glob(os.path.join(PACKAGE, "emu", "_C*.so")))


def strong_exports(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True,
                         text=True).stdout
    return [line.split()[-1] for line in out.splitlines()
            if len(line.split()) == 3 and line.split()[1] in "TDBR"]


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
@pytest.mark.parametrize("module", MODULES, ids=os.path.basename)
def test_a_module_exports_only_its_init_function(module):
    exported = [name for name in strong_exports(module) if not name.startswith("PyInit_")]
    assert exported == [], f"{os.path.basename(module)} exports {len(exported)} symbols: " \
                           f"{exported[:8]}"


def test_the_package_has_its_modules():
    assert any(os.path.basename(m).startswith("_loom.") for m in MODULES), MODULES
