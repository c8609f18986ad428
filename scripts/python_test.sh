#!/usr/bin/env bash
# Builds and installs the Python package (pip install .) into a virtual environment that later runs
# reuse, then runs the Python tests. Usage: scripts/python_test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LOOM_VENV:-.venv}
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
# Build and test requirements, once (a later run finds them and skips the network). torch is
# large (PyPI's Linux wheels bring CUDA libraries even for CPU use), hence the reused environment.
# expecttest: torch.testing._internal (PyTorch's own distributed suite) imports it.
if ! "$py" -c "import pytest, numpy, scikit_build_core, nanobind, torch, expecttest" 2>/dev/null; then
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install -q pytest numpy "scikit-build-core>=0.10" "nanobind>=2.0" torch expecttest
fi
# No build isolation: the requirements above are the build's, and the persistent build directory
# (pyproject.toml) makes a rebuild incremental.
"$py" -m pip install -q --no-build-isolation .
# LOOM_INSTALL_ONLY=1: the environment only (make cycles runs its own driver in it).
[[ ${LOOM_INSTALL_ONLY:-0} == 1 ]] && exit 0
"$py" -m pytest -q tests/python "$@"
