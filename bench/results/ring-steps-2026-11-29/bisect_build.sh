#!/usr/bin/env bash
# VM side: build loom-bench + loomrun of each commit given (CPU only, portable, non-unity, ccache)
# into .gpu/bis/<sha>/tools. One source worktree and one build dir, checked out in turn.
set -uo pipefail
ROOT=/work/main
export CCACHE_BASEDIR=/tmp/bis CCACHE_DIR=/tmp/bis/ccache CCACHE_MAXSIZE=5G
mkdir -p /tmp/bis
[[ -d /tmp/bis/src ]] || git -C $ROOT worktree add --detach /tmp/bis/src HEAD >/dev/null 2>&1
for c in "$@"; do
  sha=$(git -C $ROOT rev-parse --short=7 "$c")
  out=$ROOT/.gpu/bis/$sha
  [[ -x $out/tools/loom-bench ]] && { echo "have $sha"; continue; }
  git -C /tmp/bis/src checkout -q --detach "$sha" || { echo "checkout $sha failed"; continue; }
  t0=$SECONDS
  cmake -S /tmp/bis/src -B /tmp/bis/build -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DLOOM_NATIVE=OFF \
    -DLOOM_CUDA=OFF -DLOOM_BUILD_TESTS=OFF -DCMAKE_UNITY_BUILD=OFF \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >/tmp/bis/cmake-$sha.log 2>&1 || { echo "cmake $sha failed"; continue; }
  make -C /tmp/bis/build -j2 loom-bench loomrun >/tmp/bis/make-$sha.log 2>&1 || { echo "make $sha failed"; tail -5 /tmp/bis/make-$sha.log; continue; }
  mkdir -p $out/tools
  for t in loom-bench loomrun; do strip -o $out/tools/$t /tmp/bis/build/tools/$t; done
  echo "built $sha in $((SECONDS - t0)) s"
done
echo ALLDONE
