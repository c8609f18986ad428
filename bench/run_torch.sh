#!/usr/bin/env bash
# torch.distributed on CPU tensors: backend "loom" vs "gloo", the same script (bench/peers/
# gloo_bench.py) run back to back in one invocation, one intra-op thread per rank.
#   bench/run_torch.sh NRANKS [MAXBYTES] [OUTDIR]     (python: $PYTHON or .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2} max=${2:-256M} out=${3:-bench/results}
py=${PYTHON:-.venv/bin/python}
iters=${ITERS:-10} warmup=${WARMUP:-3}
mkdir -p "$out"
for backend in loom gloo; do
  "$py" bench/peers/gloo_bench.py -np "$n" allreduce allgather reducescatter -b 1K -e "$max" \
    -f 4 -n "$iters" -w "$warmup" --backend "$backend" --import loom \
    >"$out/torch-$backend-$n.csv"
done
"$py" - "$out/torch-loom-$n.csv" "$out/torch-gloo-$n.csv" <<'PY'
import csv, sys
def load(path):
    return {(r["op"], int(r["bytes"])): float(r["oop_us"]) for r in csv.DictReader(open(path))}
loom, gloo = load(sys.argv[1]), load(sys.argv[2])
def size(b):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return f"{b // n} {unit}"
    return f"{b} B"
for op in ("allreduce", "allgather", "reducescatter"):
    print(f"\n#### torch.distributed {op}: loom vs gloo (us per call, CPU tensors)\n")
    print("| size | loom | gloo | gloo / loom |")
    print("|---:|---:|---:|---:|")
    for (o, b) in sorted(k for k in loom if k[0] == op):
        if (o, b) in gloo:
            print(f"| {size(b)} | {loom[(o, b)]:.1f} | {gloo[(o, b)]:.1f} | {gloo[(o, b)] / loom[(o, b)]:.2f} |")
PY
