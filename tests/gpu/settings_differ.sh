#!/usr/bin/env bash
# A CUDA setting that shapes the kernels, set differently on two ranks (LOOM_CUDA_PLAN_PART_GROUPS
# 0 and 1): init fails on every rank with loomInvalidArgument naming the setting, instead of
# kernels that disagree (a hang or wrong data). Ranks share GPU 0 where there is one GPU.
#   settings_differ.sh LOOMRUN LOOM_BENCH
# Exit 77 without a GPU.
set -u
loomrun=$1 bench=$2
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "no GPU: skipped"; exit 77; }
out=$(LOOM_TEST_SHARE_GPU=1 LOOM_TIMEOUT=60 "$loomrun" -n 2 --timeout 120 -- sh -c \
  'LOOM_CUDA_PLAN_PART_GROUPS=$LOCAL_RANK exec "$0" allreduce --device cuda -b 8 -e 8 -n 1 -w 0' \
  "$bench" 2>&1)
rc=$?
echo "$out" | tail -20
[[ $rc -ne 0 ]] || { echo "FAIL: the job succeeded with different settings on its ranks"; exit 1; }
# Every rank fails alike; loomrun may stop the second before it prints, so one line is enough.
named=$(echo "$out" | grep -c "CUDA settings differ between ranks: LOOM_CUDA_PLAN_PART_GROUPS=")
[[ $named -ge 1 ]] || { echo "FAIL: no rank named the differing setting"; exit 1; }
echo "PASS: the job failed, $named rank(s) naming LOOM_CUDA_PLAN_PART_GROUPS"
