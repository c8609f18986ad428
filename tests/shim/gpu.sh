#!/usr/bin/env bash
# The NCCL shim on a GPU host (one GPU is enough), one command:
#
#   tests/shim/gpu.sh BUILD_DIR OUTDIR
#
# BUILD_DIR: configured here with CUDA if it is not a build directory yet, then the targets the
# steps need are built (loomrun, libloom-nccl.so, nccl_api_test; incremental when already built).
# PYTHON (default python3): the python with CUDA torch. For the comparison with the "loom" backend
# the loom package must import there; if it does not, it is built with CUDA into a venv of its own
# under OUTDIR (--system-site-packages, pip --no-build-isolation: needs scikit-build-core and
# nanobind in PYTHON's environment; else that comparison is SKIP; SHIM_SKIP_LOOM=1 skips it without
# building, about 5 minutes less). Runs, each log under OUTDIR:
#   1. which nccl* symbols torch's libtorch_cuda.so needs that the shim does not export;
#   2. nccl_api_test on CUDA buffers at 1 rank and at 2 ranks sharing GPU 0 (under CUDA MPS when
#      nvidia-cuda-mps-control is there), fallback to torch's real NCCL at 1 rank;
#   3. torch's "nccl" process group through the shim (LD_PRELOAD) at world size 1 and 2: every
#      collective + DDP 20 steps, checked against computed values, then compared bit for bit with
#      the "loom" backend's results (same script, no preload) where the loom package imports;
#   4. the fallback path with torch's own NCCL: LOOM_NCCL_FORCE_FALLBACK=all and =allreduce at
#      world size 1 (2 ranks on one GPU cannot use NCCL), compared with the shim's results.
# Prints a table; exit status 0 when nothing failed.
set -u
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUTDIR" >&2
  exit 2
fi
mkdir -p "$1" "$2" && build=$(cd "$1" && pwd) && out=$(cd "$2" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
echo "=== build ($build, log: $out/build.log)"
{
  if [[ ! -f $build/CMakeCache.txt ]]; then
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    cmake -S "$repo" -B "$build" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=ON -DPython3_EXECUTABLE="$(command -v "$python")"
  fi
  cmake --build "$build" -j "$(nproc)" --target loomrun loom-nccl nccl_api_test
} >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "build failed" >&2; exit 2; }
shim=$build/shim/nccl/libloom-nccl.so
test=$build/tests/shim/nccl_api_test
loomrun=$build/tools/loomrun
for f in "$shim" "$test" "$loomrun"; do
  [[ -e $f ]] || { echo "missing $f: build first (cmake --build $build)" >&2; exit 2; }
done
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
[[ $ngpu -ge 1 ]] || { echo "no GPU (nvidia-smi -L)" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 LOOM_TIMEOUT=${LOOM_TIMEOUT:-300}

declare -a rows
failed=0
record() {  # name status seconds
  rows+=("$(printf '%-34s %-6s %7s' "$1" "$2" "$3")")
  echo "    $2 ($3 s)"
  [[ $2 == FAIL ]] && failed=1
}
step() {  # name log command...
  local name=$1 log=$2
  shift 2
  echo "=== $name"
  local start rc secs
  start=$(date +%s.%N)
  "$@" >"$out/$log" 2>&1
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  if [[ $rc -eq 0 ]]; then record "$name" PASS "$secs"; else
    record "$name" FAIL "$secs"; tail -25 "$out/$log"; fi
  return $rc
}

if command -v nvidia-cuda-mps-control >/dev/null && [[ ${GPU_MPS:-1} == 1 ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control; sleep 1' EXIT
    echo "CUDA MPS daemon started"
  fi
fi

# torch's own libnccl.so.2 (the fallback) and what libtorch_cuda.so needs.
torch_lib=$("$python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))" 2>/dev/null)
real_nccl=$("$python" - <<'PY' 2>/dev/null
import os, sysconfig
p = os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "nccl", "lib", "libnccl.so.2")
print(p if os.path.exists(p) else "")
PY
)
{
  echo "torch: $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' 2>&1)"
  echo "torch's NCCL: ${real_nccl:-none found}"
  nvidia-smi -L
} | tee "$out/host.txt"
torch_ok=1
if [[ -n $torch_lib && -f $torch_lib/libtorch_cuda.so ]]; then
  nm -D --undefined-only "$torch_lib/libtorch_cuda.so" | awk '$2 ~ /^nccl/ { print $2 }' | sort -u >"$out/torch_needs.txt"
  nm -D --defined-only "$shim" | awk '{ print $3 }' | sort -u >"$out/shim_exports.txt"
  comm -23 "$out/torch_needs.txt" "$out/shim_exports.txt" >"$out/torch_missing.txt"
  echo "=== torch needs $(wc -l <"$out/torch_needs.txt") nccl functions; the shim lacks: $(tr '\n' ' ' <"$out/torch_missing.txt")"
  if [[ -s $out/torch_missing.txt ]]; then
    record "torch symbols" FAIL 0
    torch_ok=0
  else
    record "torch symbols" PASS 0
  fi
else
  echo "no CUDA torch in $python: torch steps skipped"
  torch_ok=0
  record "torch (not installed)" SKIP 0
fi

# 2. The C program on CUDA buffers.
export LOOM_NCCL_DEVICE=cuda
fallback_env=("LOOM_NCCL_FALLBACK=${real_nccl:-off}")
step "nccl_api_test n=1" api_n1.log env "${fallback_env[@]}" LOOM_NCCL_REPORT=1 \
  "$loomrun" -n 1 -- "$test" "--premul=$([[ -n $real_nccl ]] && echo nccl || echo error)"
premul2=error  # two ranks on one GPU: the real NCCL refuses them
[[ $ngpu -ge 2 && -n $real_nccl ]] && premul2=nccl
step "nccl_api_test n=2" api_n2.log env "${fallback_env[@]}" LOOM_NCCL_REPORT=1 \
  "$loomrun" -n 2 -- "$test" --premul=$premul2
if [[ -n $real_nccl ]]; then
  step "nccl_api_test n=1 forced fallback" api_n1_forced.log env "${fallback_env[@]}" \
    LOOM_NCCL_FORCE_FALLBACK=allreduce,allgather,sendrecv LOOM_NCCL_REPORT=1 \
    "$loomrun" -n 1 -- "$test" --premul=nccl
  step "nccl_api_test n=1 all on NCCL" api_n1_all.log env "${fallback_env[@]}" \
    LOOM_NCCL_FORCE_FALLBACK=all LOOM_NCCL_REPORT=1 "$loomrun" -n 1 -- "$test" --premul=nccl
fi

# 2b. Execution plans on the shim's CUDA communicators: the plan-interpreting kernel runs every
# allreduce, allgather, reduce-scatter and alltoall of the unmodified program (2 ranks on GPU 0
# where there is one GPU). Fallback off: the pre-multiplied sum is an error, as at n=2 above.
if "$python" "$repo/tests/plan/write_examples.py" "$out/plans" >"$out/plans.log" 2>&1; then
  step "nccl_api_test n=2 plans" api_plans_n2.log env LOOM_NCCL_DEVICE=cuda \
    "$here/plans_test.sh" "$loomrun" "$test" "$out/plans/fused" 2 --premul=error
else
  record "nccl_api_test n=2 plans" FAIL 0
  tail -5 "$out/plans.log"
fi

# 3. and 4. torch.
compare() {  # tagA tagB world [KEY...]: the KEYs only A's run was asked for
  "$python" - "$out" "$@" <<'PY'
import sys, torch
out, a, b, world = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
only_a = set(sys.argv[5:])
bad = []
for r in range(world):
    x = torch.load(f"{out}/{a}_rank{r}.pt")
    y = torch.load(f"{out}/{b}_rank{r}.pt")
    for k in sorted(set(x) | set(y)):
        if k in only_a and k in x and k not in y:
            continue
        if k not in x or k not in y:
            bad.append(f"rank {r} {k}: only in one")
        elif not torch.equal(x[k], y[k]):
            d = (x[k].double() - y[k].double()).abs().max().item()
            bad.append(f"rank {r} {k}: max diff {d}")
print(f"{a} vs {b}: {'equal' if not bad else 'DIFFERENT'}")
for line in bad:
    print("  " + line)
sys.exit(1 if bad else 0)
PY
}
torchrun_n() {  # world [VAR=value...] script-args...: torchrun with that environment
  local world=$1 run_python=$python
  shift
  local envs=()
  while [[ $# -gt 0 && $1 == *=* ]]; do
    if [[ $1 == PYTHON_FOR_RUN=* ]]; then run_python=${1#PYTHON_FOR_RUN=}; else envs+=("$1"); fi
    shift
  done
  env "${envs[@]}" "$run_python" -m torch.distributed.run --standalone --nproc-per-node "$world" \
    "$here/torch_nccl_shim.py" --out "$out" "$@"
}
if [[ $torch_ok == 1 ]]; then
  have_loom=0
  loom_python=$python
  if "$python" -c "import loom, loom._loom_torch" 2>/dev/null; then
    have_loom=1
  elif [[ -n ${SHIM_SKIP_LOOM:-} ]]; then
    echo "=== SHIM_SKIP_LOOM: no comparison with the loom backend"
  else
    echo "=== the loom package (CUDA) into $out/venv (log: $out/pip.log)"
    if "$python" -m venv --system-site-packages "$out/venv" >"$out/pip.log" 2>&1 &&
       "$out/venv/bin/python" -m pip install --no-build-isolation --no-deps --no-index \
         "$repo" >>"$out/pip.log" 2>&1 &&
       (cd "$out" && "$out/venv/bin/python" -c "import loom._loom_torch") >>"$out/pip.log" 2>&1; then
      have_loom=1
      loom_python=$out/venv/bin/python
    else
      tail -5 "$out/pip.log"
    fi
  fi
  for world in 1 2; do
    premul=()
    [[ -n $real_nccl && ($world -eq 1 || $ngpu -ge 2) ]] && premul=(--premul)
    step "torch nccl via shim ws=$world" torch_shim_$world.log torchrun_n "$world" LD_PRELOAD="$shim" \
      "${fallback_env[@]}" LOOM_NCCL_REPORT=1 --backend nccl \
      --tag shim$world "${premul[@]}"
    grep -q "ncclAllReduce: loom [1-9]" "$out/torch_shim_$world.log" ||
      { echo "    (the report shows no allreduce on Loom: was the shim used?)"; failed=1; }
    if [[ $have_loom == 1 ]]; then
      step "torch loom backend ws=$world" torch_loom_$world.log \
        torchrun_n "$world" PYTHON_FOR_RUN="$loom_python" --backend loom --tag loom$world &&
        step "shim == loom ws=$world" cmp_loom_$world.log compare shim$world loom$world "$world" \
          all_reduce_premul  # NCCL's pre-multiplied sum: the loom backend has no such op
    else
      record "torch loom backend ws=$world" SKIP 0
    fi
  done
  if [[ -n $real_nccl ]]; then
    step "torch real NCCL ws=1" torch_real_1.log torchrun_n 1 --backend nccl --tag real1 --premul
    step "torch shim, all on NCCL ws=1" torch_fall_all.log torchrun_n 1 LD_PRELOAD="$shim" \
      "${fallback_env[@]}" LOOM_NCCL_FORCE_FALLBACK=all LOOM_NCCL_REPORT=1 --backend nccl --tag fallall1 --premul &&
      step "fallback(all) == real ws=1" cmp_fall_all.log compare fallall1 real1 1
    step "torch shim, allreduce on NCCL ws=1" torch_fall_ar.log torchrun_n 1 LD_PRELOAD="$shim" \
      "${fallback_env[@]}" LOOM_NCCL_FORCE_FALLBACK=allreduce LOOM_DEBUG=WARN LOOM_NCCL_REPORT=1 \
      --backend nccl --tag fallar1 --premul &&
      step "fallback(allreduce) == shim ws=1" cmp_fall_ar.log compare fallar1 shim1 1
    if [[ $ngpu -ge 2 ]]; then
      step "torch real NCCL ws=2" torch_real_2.log torchrun_n 2 --backend nccl --tag real2 --premul
      step "torch shim, all on NCCL ws=2" torch_fall_all2.log torchrun_n 2 LD_PRELOAD="$shim" \
        "${fallback_env[@]}" LOOM_NCCL_FORCE_FALLBACK=all --backend nccl \
        --tag fallall2 --premul && step "fallback(all) == real ws=2" cmp_fall_all2.log \
        compare fallall2 real2 2
    fi
  else
    record "torch fallback (no real NCCL found)" SKIP 0
  fi
fi

echo
printf '%-34s %-6s %7s\n' step result seconds
for row in "${rows[@]}"; do echo "$row"; done
echo "logs: $out"
exit $failed
