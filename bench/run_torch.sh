#!/usr/bin/env bash
# torch.distributed: backend "loom" vs "gloo" on CPU tensors, or (DEVICE=cuda, one GPU per rank)
# "loom" vs "nccl" on CUDA tensors; the same script (bench/peers/gloo_bench.py) run back to back in
# one invocation, one intra-op thread per rank.
#   [DEVICE=cuda] bench/run_torch.sh NRANKS [MAXBYTES] [OUTDIR]  (python: $PYTHON or .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2} max=${2:-256M} out=${3:-bench/results}
py=${PYTHON:-.venv/bin/python}
iters=${ITERS:-10} warmup=${WARMUP:-3} device=${DEVICE:-cpu}
peer=gloo tag=""
if [[ $device == cuda ]]; then peer=nccl tag="cuda-"; export NCCL_NVLS_ENABLE=0; fi
mkdir -p "$out"
for backend in loom $peer; do
  "$py" bench/peers/gloo_bench.py -np "$n" allreduce allgather reducescatter -b 1K -e "$max" \
    -f 4 -n "$iters" -w "$warmup" --backend "$backend" --import loom --device "$device" \
    >"$out/torch-$tag$backend-$n.csv"
done
"$py" - "$out/torch-${tag}loom-$n.csv" "$out/torch-$tag$peer-$n.csv" "$peer" "$device" <<'PY'
import csv, sys
def load(path):
    return {(r["op"], int(r["bytes"])): (float(r["oop_us"]), float(r["oop_busbw"]))
            for r in csv.DictReader(open(path))}
loom, other = load(sys.argv[1]), load(sys.argv[2])
peer, device = sys.argv[3], sys.argv[4]
def size(b):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return f"{b // n} {unit}"
    return f"{b} B"
for op in ("allreduce", "allgather", "reducescatter"):
    print(f"\n#### torch.distributed {op}: loom vs {peer} ({device.upper()} tensors)\n")
    print(f"| size | loom us | {peer} us | loom busbw GB/s | {peer} busbw GB/s | {peer} time / loom |")
    print("|---:|---:|---:|---:|---:|---:|")
    for (o, b) in sorted(k for k in loom if k[0] == op):
        if (o, b) in other:
            (lt, lb), (pt, pb) = loom[(o, b)], other[(o, b)]
            print(f"| {size(b)} | {lt:.1f} | {pt:.1f} | {lb:.2f} | {pb:.2f} | {pt / lt:.2f} |")
PY
