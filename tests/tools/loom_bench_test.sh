#!/usr/bin/env bash
# loom-bench as nccl-tests users call it: their flags, one usage error per job, clean CSV under
# loomrun, JSON (-J), an inclusive -e, the rank/host/pid/device header, units, one process
# without a launcher, a clear error instead of the OOM killer, --plot, a device plug-in's device
# and mixed placements. Under a minute.
# Usage: loom_bench_test.sh LOOMRUN LOOM_BENCH
set -uo pipefail
LOOMRUN=$1
BENCH=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# Small and quick: every case measures a few tiny sizes.
SMALL=(-b 8 -e 1K -f 4 -n 2 -w 1)
# No launcher variables from whatever runs this test (ctest under loomrun would set them).
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE LOOM_RANK LOOM_WORLD_SIZE LOOM_COMM_ID \
  OMPI_COMM_WORLD_RANK PMI_RANK SLURM_PROCID MASTER_ADDR MASTER_PORT LOOMRUN_STDOUT_FD

# --version and -h exit 0.
"$BENCH" --version | grep -qE '^loom-bench \(Loom\) [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
"$BENCH" -h >/dev/null || fail "-h exits $?"

# Options first, as with nccl-tests' all_reduce_perf: the error says to name the collective.
"$BENCH" -b 8 -e 1K >"$TMP/out" 2>"$TMP/err"
status=$?
[[ $status -eq 2 ]] || fail "options before OP exit $status, expected 2"
grep -q "name the collective first, before the options: loom-bench allreduce -b" "$TMP/err" ||
  fail "options before OP: $(cat "$TMP/err")"

# A usage error is printed once per job (rank 0), not once per rank, and exits 2.
"$LOOMRUN" -n 3 -- "$BENCH" allreduce -q 1 >"$TMP/out" 2>"$TMP/err"
status=$?
[[ $status -eq 2 ]] || fail "usage error exits $status, expected 2"
# (Lines of the ranks themselves; loomrun's failure summary quotes the first one again.)
count=$(grep -c "^\[[0-9]\] loom-bench: unknown flag '-q'" "$TMP/err")
[[ $count -eq 1 ]] || fail "usage error printed $count times: $(cat "$TMP/err")"

# One process without a launcher: a job of one rank, and the header says who ran where.
"$BENCH" allreduce "${SMALL[@]}" >"$TMP/single" 2>"$TMP/single.err" || fail "single process exits $?"
grep -q "nranks 1" "$TMP/single" || fail "single process: no 'nranks 1': $(cat "$TMP/single")"
grep -q "running as a single rank" "$TMP/single.err" || fail "single process: no note"
grep -qE "^#  Rank  0 Pid +[0-9]+ on +[^ ]+ device cpu" "$TMP/single" ||
  fail "no rank line: $(cat "$TMP/single")"
grep -q "# running on CPUs" "$TMP/single" || fail "no CPU/GPU line"
grep -qE "^# Avg bus bandwidth +: [0-9.e+-]+ GB/s$" "$TMP/single" || fail "no unit on avg busbw"

# -e is inclusive: -b 8 -e 96 -f 4 measures 8, 32 and 96 bytes.
sizes=$("$BENCH" allreduce -b 8 -e 96 -f 4 -n 1 -w 0 2>/dev/null | awk '!/^#/ {print $1}' | xargs)
[[ "$sizes" == "8 32 96" ]] || fail "-b 8 -e 96 -f 4 measured '$sizes'"

# nccl-tests' flags are accepted; those Loom cannot honor say so in one line.
"$BENCH" allreduce "${SMALL[@]}" -g 1 -t 1 -a 1 -z 1 -m 2 -G 0 >"$TMP/flags" 2>&1 ||
  fail "nccl-tests flags: $(cat "$TMP/flags")"
grep -q "agg iters: 2 blocking: 1 time: mean" "$TMP/flags" || fail "-m -z -a not in the header"
"$BENCH" allreduce "${SMALL[@]}" -g 2 >/dev/null 2>"$TMP/note" || fail "-g 2 exits $?"
[[ $(grep -c "note: -g 2 ignored" "$TMP/note") -eq 1 ]] || fail "-g 2 note: $(cat "$TMP/note")"

# CSV on stdout under loomrun has no "[0] " prefix: redirecting it gives a clean file.
"$LOOMRUN" -n 2 -- "$BENCH" allgather "${SMALL[@]}" --csv >"$TMP/out.csv" 2>"$TMP/err" ||
  fail "--csv under loomrun: $(cat "$TMP/err")"
head -n 1 "$TMP/out.csv" | grep -q '^op,nranks,bytes,' || fail "CSV header: $(head -n 2 "$TMP/out.csv")"
if grep -vqE '^(op,nranks,|allgather,2,)' "$TMP/out.csv"; then
  fail "CSV has foreign lines: $(cat "$TMP/out.csv")"
fi
# Further down a shell pipeline inside the rank, the CSV goes through that pipeline.
"$LOOMRUN" -n 1 -- sh -c "'$BENCH' allgather ${SMALL[*]} --csv | sed 's/^/piped:/'" >"$TMP/piped" 2>/dev/null
[[ $(grep -c '^\[0\] piped:allgather,1,' "$TMP/piped") -eq 5 ]] || fail "piped CSV: $(cat "$TMP/piped")"
# ... while with --no-prefix it is the same file.
"$LOOMRUN" -n 2 --no-prefix -- "$BENCH" allgather "${SMALL[@]}" --csv >"$TMP/np.csv" 2>/dev/null
[[ $(wc -l <"$TMP/np.csv") -eq $(wc -l <"$TMP/out.csv") ]] || fail "--no-prefix CSV differs"

# -J FILE: JSON with the run's config and one result per size, the largest being -e.
"$LOOMRUN" -n 2 -- "$BENCH" allreduce "${SMALL[@]}" -J "$TMP/run.json" >/dev/null 2>&1 || fail "-J exits $?"
python3 - "$TMP/run.json" <<'EOF' || fail "-J output"
import json, sys
run = json.load(open(sys.argv[1]))
assert run["config"]["op"] == "allreduce" and run["config"]["nranks"] == 2, run["config"]
sizes = [r["size"] for r in run["results"]]
assert sizes == [8, 32, 128, 512, 1024], sizes
assert all(r["out_of_place"]["wrong"] == 0 for r in run["results"])
assert len(run["ranks"]) == 2 and "running on CPUs" in run["runs_on"], run
EOF

# A size that cannot fit is refused before allocating, saying what it needs, once per host.
"$BENCH" allreduce -b 8 -e 100000G >/dev/null 2>"$TMP/mem"
status=$?
[[ $status -eq 1 ]] || fail "-e 100000G exits $status"
grep -q "needs .* of host memory per rank .* only .* is available" "$TMP/mem" ||
  fail "memory message: $(cat "$TMP/mem")"
"$LOOMRUN" -n 3 -- "$BENCH" allreduce -b 8 -e 100000G >/dev/null 2>"$TMP/mem"
status=$?
[[ $status -eq 1 ]] || fail "-e 100000G under loomrun exits $status"
count=$(grep -c "^\[[0-9]\] loom-bench: .*for the 3 ranks on this host" "$TMP/mem")
[[ $count -eq 1 ]] || fail "memory message printed $count times: $(cat "$TMP/mem")"

# --overlap-gemm is eager CUDA only: the CPU, --graph and --vs are usage errors; without a GPU
# the run says what needs one.
for extra in "--device cpu" "--graph 1" "--vs nccl"; do
  # shellcheck disable=SC2086
  "$BENCH" allgather "${SMALL[@]}" --overlap-gemm 512 $extra >/dev/null 2>"$TMP/ov"
  status=$?
  [[ $status -eq 2 ]] || fail "--overlap-gemm with $extra exits $status, expected 2"
  grep -q "overlap-gemm" "$TMP/ov" || fail "--overlap-gemm with $extra: $(cat "$TMP/ov")"
done
if ! command -v nvidia-smi >/dev/null 2>&1; then
  "$BENCH" allgather "${SMALL[@]}" --overlap-gemm 512 >/dev/null 2>"$TMP/ov"
  status=$?
  [[ $status -eq 2 ]] || fail "--overlap-gemm without a GPU exits $status, expected 2"
  grep -q "overlap-gemm" "$TMP/ov" || fail "--overlap-gemm without a GPU: $(cat "$TMP/ov")"
fi

# --register is CUDA only and excludes --window.
for extra in "--device cpu" "--window 1"; do
  # shellcheck disable=SC2086
  "$BENCH" allgather "${SMALL[@]}" --register 1 $extra >/dev/null 2>"$TMP/reg"
  status=$?
  [[ $status -eq 2 ]] || fail "--register 1 with $extra exits $status, expected 2"
  grep -q -- "--register" "$TMP/reg" || fail "--register 1 with $extra: $(cat "$TMP/reg")"
done

# --plot hands python3 its script intact (once, passed through a shell in quotes, the script's own
# quotes ended the string: NameError), checked with a stand-in matplotlib that writes a file.
mkdir -p "$TMP/mpl/matplotlib" "$TMP/nompl/matplotlib"
echo 'def use(backend): pass' >"$TMP/mpl/matplotlib/__init__.py"
cat >"$TMP/mpl/matplotlib/pyplot.py" <<'EOF'
class _Drawing:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None
    def savefig(self, path, **kwargs):
        open(path, "w").write("stand-in plot\n")
def subplots(*args, **kwargs):
    return _Drawing(), _Drawing()
EOF
PYTHONPATH="$TMP/mpl" "$BENCH" allreduce "${SMALL[@]}" --plot "$TMP/it's.png" >"$TMP/plot.out" 2>&1 ||
  fail "--plot with matplotlib exits $?: $(cat "$TMP/plot.out")"
grep -q "stand-in plot" "$TMP/it's.png" 2>/dev/null || fail "--plot drew nothing: $(cat "$TMP/plot.out")"
# Without matplotlib: the hint installs it for the python3 that runs the script (a virtual
# environment's python3 never sees Debian's python3-matplotlib), before anything is measured.
echo 'raise ImportError("no matplotlib here")' >"$TMP/nompl/matplotlib/__init__.py"
PYTHONPATH="$TMP/nompl" "$BENCH" allreduce "${SMALL[@]}" --plot "$TMP/p.png" >"$TMP/plot.out" 2>&1
status=$?
[[ $status -eq 2 ]] || fail "--plot without matplotlib exits $status, expected 2"
python=$(command -v python3)
grep -qF "$python -m pip install matplotlib" "$TMP/plot.out" ||
  fail "--plot without matplotlib: no pip hint for $python: $(cat "$TMP/plot.out")"
grep -q "install_deps.sh" "$TMP/plot.out" && fail "--plot hints at Debian's package: $(cat "$TMP/plot.out")"
# And with the real matplotlib where this machine has it.
if python3 -c "import matplotlib" 2>/dev/null; then
  "$BENCH" allreduce "${SMALL[@]}" --plot "$TMP/p.png" >/dev/null 2>&1 || fail "--plot exits $?"
  [[ -s "$TMP/p.png" ]] || fail "--plot wrote no PNG"
fi

# A device plug-in's device: every collective on the emulated accelerator (found beside this
# build, no LOOM_DEVICE_PLUGIN), then a mixed placement, one heterogeneous communicator; -c 1.
TINY=(-b 8 -e 4K -f 8 -n 1 -w 0 -c 1)
for op in allreduce allgather reducescatter broadcast reduce alltoall gather scatter sendrecv; do
  env -u LOOM_DEVICE_PLUGIN "$LOOMRUN" -n 2 --timeout 120 -- "$BENCH" "$op" "${TINY[@]}" \
    --device loom-emu >"$TMP/emu" 2>&1 || fail "--device loom-emu $op exits $?: $(tail -5 "$TMP/emu")"
  grep -q "Out of bounds values : 0 OK" "$TMP/emu" || fail "--device loom-emu $op: $(cat "$TMP/emu")"
done
grep -q "device loom-emu:1 (" "$TMP/emu" || fail "--device loom-emu: rank 1 not on loom-emu:1: $(cat "$TMP/emu")"
for placement in CEC cpu,loom-emu,loom-emu:0; do
  for op in allreduce allgather broadcast alltoall; do
    "$LOOMRUN" -n 3 --timeout 120 -- "$BENCH" "$op" "${TINY[@]}" --placement "$placement" \
      >"$TMP/mixed" 2>&1 || fail "--placement $placement $op exits $?: $(tail -5 "$TMP/mixed")"
    grep -q "Out of bounds values : 0 OK" "$TMP/mixed" ||
      fail "--placement $placement $op: $(cat "$TMP/mixed")"
  done
done
grep -q "running on placement cpu,loom-emu,loom-emu:0" "$TMP/mixed" || fail "placement header: $(cat "$TMP/mixed")"
# What cannot run says so once, before any communicator: a placement of the wrong length, a
# device kind nobody provides, CUDA-only options.
"$LOOMRUN" -n 2 -- "$BENCH" allreduce "${TINY[@]}" --placement CEC >"$TMP/out" 2>"$TMP/err"
[[ $? -eq 2 ]] || fail "--placement of 3 for 2 ranks does not exit 2"
grep -q "^\[0\] loom-bench: --placement names 3 devices for 2 ranks" "$TMP/err" || fail "placement length: $(cat "$TMP/err")"
# Only rank 0 fails such a job: had rank 1 failed too, loomrun could stop rank 0 before it said why
# (it did, on a busy CI machine: "rank 1 exited with status 2", the message never printed).
grep -q "rank 1 exited" "$TMP/err" && fail "placement length: rank 1 failed too: $(cat "$TMP/err")"
"$LOOMRUN" -n 2 -- "$BENCH" allreduce "${TINY[@]}" --root 5 >"$TMP/out" 2>"$TMP/err"
[[ $? -eq 2 ]] || fail "--root 5 for 2 ranks does not exit 2"
grep -q "^\[0\] loom-bench: root 5 >= nranks 2" "$TMP/err" || fail "root 5: $(cat "$TMP/err")"
grep -q "rank 1 exited" "$TMP/err" && fail "root 5: rank 1 failed too: $(cat "$TMP/err")"
"$LOOMRUN" -n 2 -- "$BENCH" allreduce "${TINY[@]}" --device no-such-kind >"$TMP/out" 2>"$TMP/err"
[[ $? -eq 2 ]] || fail "--device no-such-kind does not exit 2"
[[ $(grep -c "^\[[0-9]\] loom-bench: no device plug-in of kind 'no-such-kind'" "$TMP/err") -eq 1 ]] ||
  fail "--device no-such-kind: $(cat "$TMP/err")"
"$BENCH" allreduce "${TINY[@]}" --device loom-emu --graph 1 >/dev/null 2>"$TMP/err"
[[ $? -eq 2 ]] || fail "--device loom-emu --graph 1 does not exit 2"
"$BENCH" allreduce "${TINY[@]}" --device cpu --placement CC >/dev/null 2>"$TMP/err"
[[ $? -eq 2 ]] || fail "--device cpu --placement CC does not exit 2"

((failures == 0)) && echo "loom_bench_test: all cases passed"
exit $((failures > 0))
