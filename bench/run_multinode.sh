#!/usr/bin/env bash
# Multi-node benchmark on network namespaces as nodes (tests/multinode/netns_lib.sh): the raw
# TCP bound of the link (tcp_bw), Open MPI across the same namespaces, and loom-bench with each
# algorithm forced in turn, for every shape NODESxRANKS. Writes CSV and a markdown summary.
#
# Usage: bench/run_multinode.sh [-a "ALGOS"] [-s "SHAPES"] [-o "OPS"] [MAXBYTES]
#   -a  algorithms forced through LOOM_ALGO=<op>:<algo> (default "ring hierarchical"); "auto"
#       leaves the selector alone
#   -s  shapes NODESxRANKS (default "2x2 2x4")
#   -o  collectives (default "allreduce allgather")
#   MAXBYTES  largest message (default 256M); sizes go 64K, x4, ... up to it
# Environment: BUILD_DIR, LOOMRUN, LOOM_BENCH, MPIRUN, MPICC, CC, ITERS (10), WARMUP (2),
# TCP_STREAMS ("1 4"), LOOMT_MTU (1500), RESULTS_DIR (bench/results), PER_RUN_TIMEOUT (600).
# Output: $RESULTS_DIR/multinode-<host>.csv (loom-bench columns, source like loom-ring-2x2 or
# mpi-2x2), multinode-<host>-tcp.csv (mode,streams,bytes,us,GBps; mode oneway or bidir, GBps per
# direction) and multinode-<host>.md.
# Exit 77 when namespaces cannot be created; 1 when a piece failed (the rest still runs).
set -uo pipefail

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

ALGOS="ring hierarchical"
SHAPES="2x2 2x4"
OPS="allreduce allgather"
while getopts "a:s:o:h" opt; do
  case "$opt" in
    a) ALGOS=$OPTARG ;;
    s) SHAPES=$OPTARG ;;
    o) OPS=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
(($# <= 1)) || usage
MAXBYTES=${1:-256M}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
LOOMRUN=${LOOMRUN:-$BUILD_DIR/tools/loomrun}
LOOM_BENCH=${LOOM_BENCH:-$BUILD_DIR/tools/loom-bench}
MPIRUN=${MPIRUN:-mpirun}
MPICC=${MPICC:-mpicc}
CC=${CC:-cc}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
TCP_STREAMS=${TCP_STREAMS:-1 4}
PER_RUN_TIMEOUT=${PER_RUN_TIMEOUT:-600}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
NODES_SH="$ROOT/tests/multinode/nodes.sh"
RSH="$ROOT/bench/netns_rsh.sh"
MINBYTES=64K
HOST=$(hostname -s 2>/dev/null || hostname)
OUT="$RESULTS_DIR/multinode-$HOST.csv"
TCP_OUT="$RESULTS_DIR/multinode-$HOST-tcp.csv"
MD_OUT="$RESULTS_DIR/multinode-$HOST.md"
HEADER="source,op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong"
HEADER+=",ip_us,ip_algbw,ip_busbw,ip_wrong"
PORT=29400

failed=0
note() { echo "run_multinode: $*" >&2; }

source "$ROOT/tests/multinode/netns_lib.sh"
if ! why=$(loomt_can_run); then
  note "SKIP: $why"
  exit 77
fi

build_peer() {
  local name=$1 compiler=$2
  shift 2
  local src="$ROOT/bench/peers/$name.c" bin="$BUILD_DIR/bench/$name"
  if [[ ! -x "$bin" || "$src" -nt "$bin" ]]; then
    command -v "$compiler" >/dev/null 2>&1 || { note "$compiler not found: no $name"; return 1; }
    mkdir -p "$BUILD_DIR/bench"
    "$compiler" -O2 -std=c11 -Wall -o "$bin" "$src" "$@" >&2 || { note "building $name failed"; return 1; }
  fi
  echo "$bin"
}
TCP_BW=$(build_peer tcp_bw "$CC") || failed=1
MPI_BENCH=$(build_peer mpi_bench "$MPICC") || MPI_BENCH=""
have_loom=1
for f in "$LOOMRUN" "$LOOM_BENCH"; do
  [[ -x "$f" ]] || { note "$f not found: skipping Loom"; have_loom=0; }
done

mkdir -p "$RESULTS_DIR"
work=$(mktemp -d "${TMPDIR:-/tmp}/loomt-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "$HEADER" >"$OUT.tmp"
echo "mode,streams,bytes,us,GBps" >"$TCP_OUT.tmp"

# Runs one nodes.sh job; node 0's stdout is the benchmark's CSV. Rows get `source` in front.
run_nodes() {
  local source=$1 k=$2
  shift 2
  local dir="$work/run$RANDOM"
  note "$source: $1"
  if ! "$NODES_SH" -q -f -k "$k" -t "$PER_RUN_TIMEOUT" -o "$dir" -- "$@" 2>"$dir.log"; then
    note "$source failed; its log:"
    sed 's/^/  /' "$dir.log" "$dir"/node*.err 2>/dev/null | tail -20 >&2
    failed=1
  fi
  grep -hE '^[a-z]+,[0-9]+,' "$dir/node0.out" 2>/dev/null | sed "s/^/$source,/" >>"$OUT.tmp"
}

# 1. The bound: one stream and several between node 0 and node 1 over the bridge, one way and
# both ways at once (a ring's links carry both; on a small VM the directions share the CPUs).
if [[ -n "$TCP_BW" ]]; then
  for mode in oneway bidir; do
    for streams in $TCP_STREAMS; do
      dir="$work/tcp$mode$streams"
      note "tcp_bw: $streams stream(s), $mode"
      if "$NODES_SH" -q -f -k 2 -t "$PER_RUN_TIMEOUT" -o "$dir" -- \
        "$TCP_BW client $(loomt_addr 1) $PORT $streams $MINBYTES $MAXBYTES $ITERS $mode" \
        "$TCP_BW server $PORT $streams" 2>"$dir.log"; then
        grep -E '^[0-9]+,' "$dir/node0.out" | sed "s/^/$mode,/" >>"$TCP_OUT.tmp"
      else
        note "tcp_bw failed: $(tail -5 "$dir.log" "$dir"/node*.err 2>/dev/null)"
        failed=1
      fi
    done
  done
fi

SIZES="-b $MINBYTES -e $MAXBYTES -f 4 -n $ITERS -w $WARMUP -d float"
for shape in $SHAPES; do
  if ! [[ "$shape" =~ ^([0-9]+)x([0-9]+)$ ]]; then
    note "bad shape '$shape' (expected NODESxRANKS)"
    failed=1
    continue
  fi
  k=${BASH_REMATCH[1]}
  n=${BASH_REMATCH[2]}
  for op in $OPS; do
    # 2. Open MPI: mpirun inside node 0 starts its daemons in the other nodes through
    # netns_rsh.sh; TCP between nodes, shared memory within one (as on real hosts).
    if [[ -n "$MPI_BENCH" ]] && command -v "$MPIRUN" >/dev/null 2>&1; then
      hostfile="$work/hosts-$k"
      : >"$hostfile"
      for ((i = 0; i < k; ++i)); do echo "loomt-node$i slots=$n" >>"$hostfile"; done
      run_nodes "mpi-$shape" "$k" "$MPIRUN --allow-run-as-root -np $((k * n)) \
        --hostfile $hostfile --map-by slot --mca plm_rsh_agent $RSH \
        --mca oob_tcp_if_include $LOOMT_SUBNET.0/24 --mca btl_tcp_if_include $LOOMT_SUBNET.0/24 \
        --mca btl tcp,vader,self $MPI_BENCH $op $SIZES --csv" "true"
    fi
    # 3. Loom, one loomrun per node, each algorithm forced in turn.
    if ((have_loom)); then
      secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
      for algo in $ALGOS; do
        forced=""
        [[ "$algo" != auto ]] && forced="LOOM_ALGO=$op:$algo"
        run_nodes "loom-$algo-$shape" "$k" "env $forced LOOM_JOB_SECRET=$secret \
          LOOM_SOCKET_IFNAME=loomt0 $LOOMRUN --nnodes $k --node-rank \$LOOMT_NODE \
          --master \$LOOMT_MASTER:$PORT -n $n --no-prefix --timeout $PER_RUN_TIMEOUT -- \
          $LOOM_BENCH $op $SIZES -c 1 --device cpu --csv"
      done
    fi
  done
done
mv "$OUT.tmp" "$OUT"
mv "$TCP_OUT.tmp" "$TCP_OUT"
note "results in $OUT and $TCP_OUT"

# Markdown: per op and shape, busbw of every source by size, and Loom's fraction of the best
# TCP bound at that size.
python3 - "$OUT" "$TCP_OUT" >"$MD_OUT" <<'EOF' || { note "summary failed"; failed=1; }
import csv, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
bound = {"oneway": defaultdict(float), "bidir": defaultdict(float)}
for r in csv.DictReader(open(sys.argv[2])):
    b = bound[r["mode"]]
    b[int(r["bytes"])] = max(b[int(r["bytes"])], float(r["GBps"]))
print("# Multi-node benchmark (namespaces as nodes)\n")
for mode, what in (("oneway", "one way"), ("bidir", "both ways at once, per direction")):
    print(f"Raw TCP bound {what} (best of the stream counts), GB/s: " +
          ", ".join(f"{b >> 10} KiB {g:.2f}" for b, g in sorted(bound[mode].items())) + "\n")
groups = defaultdict(lambda: defaultdict(dict))
for r in rows:
    shape = r["source"].rsplit("-", 1)[1]
    groups[(r["op"], shape)][r["source"].rsplit("-", 1)[0]][int(r["bytes"])] = float(r["oop_busbw"])
for (op, shape), sources in sorted(groups.items()):
    names = sorted(sources)
    print(f"## {op}, {shape} (busbw GB/s; % of the both-ways TCP bound)\n")
    print("| bytes | " + " | ".join(names) + " | TCP both ways | TCP one way |")
    print("|---:|" + "---:|" * (len(names) + 2))
    for size in sorted({s for v in sources.values() for s in v}):
        cells = []
        for name in names:
            v = sources[name].get(size)
            b = bound["bidir"].get(size)
            pct = f" ({100 * v / b:.0f}%)" if v is not None and b else ""
            cells.append("" if v is None else f"{v:.3f}{pct}")
        print(f"| {size} | " + " | ".join(cells) +
              f" | {bound['bidir'].get(size, float('nan')):.3f}"
              f" | {bound['oneway'].get(size, float('nan')):.3f} |")
    print()
EOF
note "summary in $MD_OUT"
exit "$failed"
