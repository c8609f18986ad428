#!/usr/bin/env bash
# Execution plans on CUDA communicators (issue 43's GPU benchmark): the plan-interpreting kernel
# against Loom's hand-written kernels in the same run, and against NCCL where every rank has a
# GPU of its own. Each pair runs twice, interleaved (plan, kernel, plan, kernel):
#   small: plan:one_shot_allreduce_N vs allreduce:ll, 8 B-1 MiB, eager and CUDA graph;
#   large: plan:ring_allreduce_N vs allreduce:simple, 1 MiB-MAXBYTES, eager (+ --vs nccl).
#
#   bench/plans_gpu.sh BUILD_DIR OUTDIR [NRANKS]
#
# NRANKS: default the GPUs of this host; on a one-GPU host 2 ranks share it under CUDA MPS (no
# NCCL then: it refuses two ranks on one GPU). BUILD_DIR: a CUDA build (tools/loomrun,
# tools/loom-bench). The plans are the package's examples (tests/plan/write_examples.py, fused).
# Environment: MAXBYTES (256M), ITERS (20 large, 100 small). Writes a CSV per run in OUTDIR and
# prints per size the median out-of-place time of each side and their ratio (plan / kernel, and
# plan / NCCL where measured).
set -uo pipefail
[[ $# -ge 2 ]] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
((gpus > 0)) || { echo "no GPU here" >&2; exit 77; }
n=${3:-$((gpus > 1 ? gpus : 2))}
vs=()
if ((n > gpus)); then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "cannot start CUDA MPS" >&2; exit 1; }
  trap 'echo quit | nvidia-cuda-mps-control; sleep 1' EXIT
else
  vs=(--vs nccl)
fi
python3 "$root/tests/plan/write_examples.py" "$out/plans" >/dev/null || exit 1
plans=$out/plans/fused

failed=0
run() {  # NAME ALGO loom-bench-args...
  local name=$1 algo=$2
  shift 2
  if ! LOOM_PLAN_DIR=$plans LOOM_ALGO=$algo timeout 600 "$build/tools/loomrun" -n "$n" \
    --timeout 580 -- "$build/tools/loom-bench" allreduce --device cuda -c 0 \
    --csv "$out/$name.csv" "$@" >"$out/$name.txt" 2>&1; then
    echo "FAILED: $name (see $out/$name.txt)"
    failed=1
  fi
}
# Each side checked once first (-c 1: the timed runs below skip the check).
run check-plan "allreduce:plan:ring_allreduce_$n" -b 8 -e 4M -f 64 -n 1 -w 0 -c 1
run check-one-shot "allreduce:plan:one_shot_allreduce_$n" -b 8 -e 256K -f 64 -n 1 -w 0 -c 1
small=(-b 8 -e 1M -f 8 -n "${ITERS:-100}" -w 20)
large=(-b 1M -e "${MAXBYTES:-256M}" -f 4 -n "${ITERS:-20}" -w 5)
for round in 1 2; do
  for graph in 0 1; do
    run "small-plan-g$graph-$round" "allreduce:plan:one_shot_allreduce_$n" "${small[@]}" --graph $graph
    run "small-ll-g$graph-$round" allreduce:ll "${small[@]}" --graph $graph
  done
  run "large-plan-$round" "allreduce:plan:ring_allreduce_$n" "${large[@]}" ${vs[@]+"${vs[@]}"}
  run "large-simple-$round" allreduce:simple "${large[@]}"
done

python3 - "$out" <<'PY'
import csv, glob, statistics, sys
out = sys.argv[1]
def times(pattern, column="oop_us"):
    rows = {}
    for path in glob.glob(f"{out}/{pattern}.csv"):
        for r in csv.DictReader(open(path)):
            v = r.get(column, "")
            if v not in ("", "nan"):
                rows.setdefault(int(r["bytes"]), []).append(float(v))
    return {b: statistics.median(v) for b, v in rows.items()}
def table(title, plan, kernel, kname, nccl=None):
    print(f"\n{title} (median us, out of place)")
    print(f"{'bytes':>11} {'plan':>9} {kname:>9} {'plan/' + kname:>12}" +
          (f" {'nccl':>9} {'plan/nccl':>10}" if nccl else ""))
    for b in sorted(plan):
        if b not in kernel:
            continue
        line = f"{b:>11} {plan[b]:>9.1f} {kernel[b]:>9.1f} {plan[b] / kernel[b]:>12.2f}"
        if nccl and b in nccl:
            line += f" {nccl[b]:>9.1f} {plan[b] / nccl[b]:>10.2f}"
        print(line)
for g in (0, 1):
    table(f"one-shot plan vs LL kernel, graph {g}", times(f"small-plan-g{g}-*"),
          times(f"small-ll-g{g}-*"), "ll")
table("ring plan vs two-shot kernel", times("large-plan-*"), times("large-simple-*"), "simple",
      times("large-plan-*", "oop_nccl_us"))
PY
exit $failed
