#!/usr/bin/env bash
# The shim's fallback and report without a GPU:
#   fallback_test.sh LOOMRUN NCCL_API_TEST STANDIN_LIB SHIM_LIB
# 1. forced operations (allreduce, allgather, send/recv) on the stand-in "real NCCL": the whole
#    nccl_api_test bit-exact, and LOOM_NCCL_REPORT's counts show where they ran;
# 2. LOOM_NCCL_FORCE_FALLBACK=all: every communicator on the stand-in;
# 3. no real NCCL (LOOM_NCCL_FALLBACK=off; or naming the shim itself, which it refuses to load):
#    a forced operation fails with ncclInvalidUsage and says why, Loom's calls still run.
set -u
loomrun=$1 test=$2 standin=$3 shim=$4
export LOOM_NCCL_DEVICE=cpu LOOM_TIMEOUT=60
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0
run() {  # name, expected regexes (one per line) in the output, then the command
  local name=$1 expect=$2
  shift 2
  local start
  start=$(date +%s.%N)
  "$@" >"$out" 2>&1
  local rc=$?
  local ok=1
  [[ $rc -eq 0 ]] || ok=0
  while IFS= read -r pattern; do
    [[ -z $pattern ]] && continue
    grep -Eq -- "$pattern" "$out" || { echo "  missing: $pattern"; ok=0; }
  done <<<"$expect"
  printf '%-10s %s (rc %d, %s s)\n' "$name" "$([[ $ok == 1 ]] && echo PASS || echo FAIL)" $rc \
    "$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')"
  if [[ $ok == 0 ]]; then
    tail -40 "$out"
    failed=1
  fi
}

# (The failed counts are the test's bad arguments.)
run forced "ncclAllReduce: loom 0, nccl [1-9][0-9]*,
ncclAllGather: loom 0, nccl [1-9][0-9]*, failed 0
ncclSend: loom 0, nccl [1-9]
ncclRecv: loom 0, nccl [1-9]
ncclBroadcast: loom [1-9][0-9]*, nccl 0,
FORCE_FALLBACK names allreduce: such calls run on the real NCCL
passed" \
  env LOOM_NCCL_FALLBACK="$standin" LOOM_NCCL_FORCE_FALLBACK=allreduce,allgather,send \
  LOOM_NCCL_REPORT=1 LOOM_DEBUG=WARN "$loomrun" -n 3 --timeout 120 -- "$test"

run whole "ncclCommInitRankConfig: loom 0, nccl 1,
ncclReduceScatter: loom 0, nccl [1-9]
passed" \
  env LOOM_NCCL_FALLBACK="$standin" LOOM_NCCL_FORCE_FALLBACK=all LOOM_NCCL_REPORT=1 \
  "$loomrun" -n 2 --timeout 120 -- "$test"

run off "passed" env LOOM_NCCL_FALLBACK=off LOOM_NCCL_FORCE_FALLBACK=allgather \
  "$loomrun" -n 2 --timeout 60 -- "$test" "--fallback-missing=LOOM_NCCL_FALLBACK=off"

run self "passed" env LOOM_NCCL_FALLBACK="$shim" LOOM_NCCL_FORCE_FALLBACK=allgather \
  "$loomrun" -n 2 --timeout 60 -- "$test" "--fallback-missing=is this shim itself"
# By name: the loader hands back the library already loaded under that SONAME, the shim.
run self-name "passed" env LOOM_NCCL_FALLBACK=libnccl.so.2 LOOM_NCCL_FORCE_FALLBACK=allgather \
  "$loomrun" -n 1 --timeout 60 -- "$test" "--fallback-missing=is this shim itself"

# 4. LD_PRELOAD: the shim is the process's libnccl.so.2 (its SONAME), so a later load of
#    libnccl.so.2 by name (as a program linked with NCCL does) gets it, and its fallback search
#    (LOOM_NCCL_FALLBACK unset, LD_LIBRARY_PATH at the shim's own symlink) loads a real NCCL
#    (where the machine has one) or says it skipped itself.
if command -v python3 >/dev/null; then
  run preload "version 2[0-9]{4} via libnccl.so.2
fallback: (real NCCL|.*is this shim itself)" \
    env LD_PRELOAD="$shim" LD_LIBRARY_PATH="$(dirname "$shim")" LOOM_DEBUG=INFO \
    LOOM_NCCL_FORCE_FALLBACK=all python3 -c "
import ctypes
nccl = ctypes.CDLL('libnccl.so.2')
v = ctypes.c_int()
nccl.ncclGetVersion(ctypes.byref(v))
print('version', v.value, 'via libnccl.so.2')
uid = ctypes.create_string_buffer(128)
nccl.ncclGetLastError.restype = ctypes.c_char_p
r = nccl.ncclGetUniqueId(uid)
print('fallback:', 'real NCCL' if r == 0 else nccl.ncclGetLastError(None).decode())
"
fi

exit $failed
