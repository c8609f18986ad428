#!/usr/bin/env bash
# The three device-host runs of README.md, as run (detached; the ignored .gpu/ holds the A/B
# source trees: .gpu/wa = c12a6f2, .gpu/wb = run 1's B): driver.sh 1|2|3.
#   1: A = c12a6f2 (.gpu/wa), B = the overlap with blocking waits beside (.gpu/wb), C = this tree
#      (spinning waits); composed c4, c8 and hierarchical h8.
#   2: A vs F = this tree (auto) and A again; h8, c8, c4.
#   3: A vs F with LOOM_BESIDE_WAIT auto, spin, block; hierarchical allreduce 64-256 MiB.
set -u
run=${1:?run 1, 2 or 3}
r=/tmp/r; rm -rf $r; mkdir -p $r
exec >$r/driver.log 2>&1
cd "$(dirname "$0")/../../.." || exit 1
t0=$(date +%s)
b() { [[ -x $2/tools/loom-bench ]] || { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON >$r/cmake_$3.log 2>&1 && cmake --build $2 -j 6 \
  --target loom-bench loomrun >$r/build_$3.log 2>&1 || echo "BUILD $3 FAIL"; }; }
ab() { bench/results/hetero-beside-2026-11-29/abhet.sh "$r/$1"; echo "$1 $(($(date +%s) - t0)) s"; }
export ITERS=10
case $run in
  1) b .gpu/wa /tmp/bA A & b .gpu/wb /tmp/bB B & b . /tmp/bC C & wait
     export SIDES="A=/tmp/bA B=/tmp/bB C=/tmp/bC" ROUNDS=5 MINB=4M MAXB=256M
     SPLIT=2,2 NRANKS=4 NODES="A A B B" ab c4
     SPLIT=4,4 NRANKS=8 NODES="A A A A B B B B" ab c8
     MINB=16M OPS="allreduce allgather" NRANKS=8 NODES="A A A A B B B B" ab h8 ;;
  2) b .gpu/wa /tmp/bA A & b . /tmp/bF F & wait
     export SIDES="A=/tmp/bA F=/tmp/bF A2=/tmp/bA" ROUNDS=4 MINB=16M MAXB=256M
     OPS="allreduce allgather" NRANKS=8 NODES="A A A A B B B B" ab h8
     SPLIT=4,4 NRANKS=8 NODES="A A A A B B B B" ab c8
     MINB=4M SPLIT=2,2 NRANKS=4 NODES="A A B B" ab c4 ;;
  3) b .gpu/wa /tmp/bA A & b . /tmp/bF F & wait
     export SIDES="A=/tmp/bA Fa=/tmp/bF:auto Fs=/tmp/bF:spin Fb=/tmp/bF:block" ROUNDS=5
     MINB=64M MAXB=256M OPS="allreduce" NRANKS=8 NODES="A A A A B B B B" ab h8w ;;
esac
touch $r/done
