#!/usr/bin/env bash
# Interleaved A/B of two builds of Loom, with the noise of a null A/B beside it: every cell runs
# A then B (then B again, as the null pair) round after round in the same session, on one host
# (loomrun) or across network-namespace nodes (tests/multinode/nodes.sh, root only).
#
# Usage: bench/ab_builds.sh BASE_BUILD NEW_BUILD OUTDIR
# Environment:
#   SHAPES     "1x2 1x4 1x8 2x2 2x4" (NODESxRANKS; 1xN: one host, no namespaces)
#   TRANSPORTS "tcp rudp" (between nodes; one host ignores it)
#   OPS        "allreduce allgather reducescatter broadcast reduce alltoall"
#   MINBYTES 1K, MAXBYTES 256M: loom-bench -b/-e with -f 4 (the summary keeps 1K, 64K, 1M, 16M,
#              256M); ROUNDS 3; ITERS 5; WARMUP 2; ALGO: LOOM_ALGO for both builds (default: none)
#   EXTRA_ENV  more environment for both builds (e.g. "LOOM_DEVICE=...")
# Output: OUTDIR/ab.csv (shape,transport,op,bytes,build,round,us) with build A, B and B2 (the null
# run), and OUTDIR/ab.md: per cell the median of B/A over rounds and the median of B2/B (the
# null), B/A marked when it lies outside the null's range by more than 5 %.
set -uo pipefail
[[ $# -eq 3 ]] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BASE=$(cd "$1" && pwd) NEW=$(cd "$2" && pwd) OUT=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHAPES=${SHAPES:-1x2 1x4 1x8 2x2 2x4}
TRANSPORTS=${TRANSPORTS:-tcp rudp}
OPS=${OPS:-allreduce allgather reducescatter broadcast reduce alltoall}
MINBYTES=${MINBYTES:-1K} MAXBYTES=${MAXBYTES:-256M}
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-5} WARMUP=${WARMUP:-2}
mkdir -p "$OUT"
CSV=$OUT/ab.csv
[[ -f $CSV ]] || echo "shape,transport,op,bytes,build,round,us" >"$CSV"
PORT=29500

# One run of build $1 ("A" or "B"); prints "bytes,us" lines (out-of-place time).
run_one() {
  local build=$1 shape=$2 transport=$3 op=$4 dir
  dir=$([[ $build == A ]] && echo "$BASE" || echo "$NEW")
  local k=${shape%x*} n=${shape#*x}
  local bench="$dir/tools/loom-bench $op -b $MINBYTES -e $MAXBYTES -f 4 -n $ITERS -w $WARMUP -c 0 --device cpu --csv"
  local env="LOOM_TRANSPORT=$transport ${ALGO:+LOOM_ALGO=$ALGO} ${EXTRA_ENV:-}"
  if ((k == 1)); then
    env $env timeout 900 "$dir/tools/loomrun" -n "$n" --no-prefix --timeout 900 -- $bench 2>/dev/null |
      grep -E '^[a-z]+,[0-9]+,' | awk -F, '{print $3 "," $9}'
  else
    local tmp secret
    tmp=$(mktemp -d)
    secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    PORT=$((PORT + 1))
    "$ROOT/tests/multinode/nodes.sh" -q -f -k "$k" -t 900 -o "$tmp" -- \
      "env $env LOOM_JOB_SECRET=$secret LOOM_SOCKET_IFNAME=loomt0 $dir/tools/loomrun --nnodes $k \
       --node-rank \$LOOMT_NODE --master \$LOOMT_MASTER:$PORT -n $n --no-prefix --timeout 900 -- \
       $bench" >/dev/null 2>&1
    grep -hE '^[a-z]+,[0-9]+,' "$tmp/node0.out" 2>/dev/null | awk -F, '{print $3 "," $9}'
    rm -rf "$tmp"
  fi
}

for shape in $SHAPES; do
  transports=$TRANSPORTS
  [[ ${shape%x*} == 1 ]] && transports=tcp
  for transport in $transports; do
    for op in $OPS; do
      for ((round = 1; round <= ROUNDS; ++round)); do
        for build in A B B2; do
          echo "ab: $shape $transport $op round $round build $build" >&2
          run_one "${build:0:1}" "$shape" "$transport" "$op" |
            sed "s/^/$shape,$transport,$op,/; s/\$/,$build,$round/" |
            awk -F, -v OFS=, '{print $1,$2,$3,$4,$6,$7,$5}' >>"$CSV"
        done
      done
    done
  done
done

python3 - "$CSV" >"$OUT/ab.md" <<'EOF'
import csv, statistics, sys
from collections import defaultdict
keep = {1024, 65536, 1 << 20, 16 << 20, 256 << 20}
t = defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    b = int(r["bytes"])
    if b in keep:
        t[(r["shape"], r["transport"], r["op"], b)][(r["build"], r["round"])] = float(r["us"])
print("| shape | transport | op | bytes | A us | B us | B/A | null B2/B (min-max) | |")
print("|---|---|---|---:|---:|---:|---:|---|---|")
for key in sorted(t):
    d = t[key]
    rounds = sorted({r for (_, r) in d})
    ba = [d[("B", r)] / d[("A", r)] for r in rounds if ("A", r) in d and ("B", r) in d]
    nl = [d[("B2", r)] / d[("B", r)] for r in rounds if ("B", r) in d and ("B2", r) in d]
    if not ba:
        continue
    a = statistics.median(d[("A", r)] for r in rounds if ("A", r) in d)
    b = statistics.median(d[("B", r)] for r in rounds if ("B", r) in d)
    med = statistics.median(ba)
    lo, hi = (min(nl), max(nl)) if nl else (1.0, 1.0)
    flag = "slower" if med > hi * 1.05 else ("faster" if med < lo / 1.05 else "")
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {a:.1f} | {b:.1f} | {med:.3f} | "
          f"{statistics.median(nl) if nl else 1:.3f} ({lo:.2f}-{hi:.2f}) | {flag} |")
EOF
echo "ab: $OUT/ab.md"
