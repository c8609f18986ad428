#!/usr/bin/env bash
# What registering buffers saves: each collective timed by loom-bench on buffers that are not
# registered (the slot kernels, one staging copy), on buffers each rank registered alone
# (--register 1: loomCommRegister, the zero-copy kernels find peers' buffers from the call), and
# on symmetric windows (--window 1), in one run on the same GPUs; a table of the three times.
#
#   bench/gpu_registered.sh BUILD_DIR OUTDIR
#
# Environment: RANKS (default: the GPUs there are; on one GPU 2, sharing it), SIZES (loom-bench
# size flags, default "-b 64K -e 256M -f 4"), ITERS (20), OPS ("allgather reducescatter
# allreduce alltoall"), VS ("" or "--vs nccl": NCCL on the same buffers, registered the same way,
# where ranks do not share a GPU). Ranks sharing a GPU run under CUDA MPS, which this starts and
# stops (pipes under OUTDIR/mps). Raw output: OUTDIR/<op>_<variant>.txt; the table:
# OUTDIR/registered.md.
set -uo pipefail
(($# == 2)) || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
# shellcheck source=bench/gpu_ranks.sh
source "$(dirname "$0")/gpu_ranks.sh"
sizes=${SIZES:--b 64K -e 256M -f 4}
status=0
for op in ${OPS:-allgather reducescatter allreduce alltoall}; do
  for variant in plain register window; do
    flags=()
    [[ $variant == register ]] && flags=(--register 1)
    [[ $variant == window ]] && flags=(--window 1)
    # shellcheck disable=SC2086
    "$build/tools/loomrun" -n "$ranks" --timeout 600 -- "$build/tools/loom-bench" "$op" $sizes \
      -n "${ITERS:-20}" -w 5 -c 1 "${flags[@]}" ${VS:-} >"$out/${op}_$variant.txt" 2>&1 ||
      status=1
  done
done
python3 - "$out" >"$out/registered.md" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
times = {}  # (op, bytes, pass) -> {variant: us}
for path in sorted(glob.glob(os.path.join(out, "*_*.txt"))):
    op, variant = os.path.basename(path)[:-4].rsplit("_", 1)
    for line in open(path):
        line = re.sub(r"^\[\d+\] ", "", line)
        f = line.split()
        if len(f) < 12 or not f[0].isdigit():
            continue
        # nccl-tests columns: size count type redop root | out of place: time algbw busbw #wrong | in place: ...
        size = int(f[0])
        for pass_name, col in (("out of place", 5), ("in place", 9)):
            try:
                times.setdefault((op, size, pass_name), {})[variant] = float(f[col])
            except (ValueError, IndexError):
                pass
print("| op | bytes | pass | not registered (us) | registered alone (us) | windows (us) | alone / not registered |")
print("|---|---|---|---|---|---|---|")
for (op, size, pass_name), v in sorted(times.items()):
    ratio = v["register"] / v["plain"] if "register" in v and v.get("plain") else float("nan")
    print(f"| {op} | {size} | {pass_name} | {v.get('plain', '-')} | {v.get('register', '-')} | "
          f"{v.get('window', '-')} | {ratio:.2f} |")
PY
cat "$out/registered.md"
exit $status
