#!/usr/bin/env bash
# Installs what building and testing Loom needs, from Debian packages, only where missing.
# Usage: scripts/install_deps.sh [bench|plot]   (bench: also Open MPI's compiler for the peer
# benchmark and matplotlib for its plots; plot: matplotlib only, for loom-bench --plot; in a
# virtual environment matplotlib comes from PyPI, into the python3 on PATH)
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have cmake || need+=(cmake)
have ninja || need+=(ninja-build)
have g++ || need+=(g++)
have python3 || need+=(python3)
[[ -f /usr/include/gtest/gtest.h ]] || need+=(libgtest-dev)
# The Python package: a venv and the interpreter's headers for the extension module.
if have python3; then
  python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
  python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" 2>/dev/null || need+=(python3-dev)
else
  need+=(python3-venv python3-dev)
fi
# The multi-node tests: network namespaces as nodes (ip), Loom under mpirun across them.
have ip || need+=(iproute2)
# Packet loss on the rudp transport's links in the namespace tests (nft ... numgen random drop).
have nft || need+=(nftables)
have mpirun || need+=(openmpi-bin)
if [[ "${1:-}" == bench ]]; then
  # mpicc can exist (openmpi-bin's alternative) without the headers: compile against mpi.h.
  echo '#include <mpi.h>' | mpicc -x c -E - >/dev/null 2>&1 || need+=(libopenmpi-dev)
  # bench/rudp_vs_tcp.sh's reordering: an NFQUEUE rule (this kernel's nft has no queue verdict).
  have iptables || need+=(iptables)
fi
if [[ "${1:-}" == bench || "${1:-}" == plot ]] && ! python3 -c "import matplotlib" 2>/dev/null; then
  # The python3 on PATH draws the plots: a virtual environment's never sees Debian's package.
  if python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    echo "install_deps: installing matplotlib into $(python3 -c 'import sys; print(sys.prefix)')" >&2
    python3 -m pip install -q matplotlib
  else
    need+=(python3-matplotlib)
  fi
fi
((${#need[@]} == 0)) && exit 0

echo "install_deps: installing ${need[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  have sudo || { echo "install_deps: need root or sudo to install ${need[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
