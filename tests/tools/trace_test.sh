#!/usr/bin/env bash
# LOOM_TRACE end to end: a 3-rank job (allreduce from 8 B to 64 KiB through the arena's and the
# executor's algorithms, then sendrecv) writes one Chrome/Perfetto trace per rank;
# scripts/loom_trace_merge.py merges them into one file with one process per rank; the files are
# valid JSON with the calls, the executor's lanes and the named tracks. Then loomrun's world-size
# check: a job asking for more ranks than loomrun started fails at once, naming both numbers.
# Usage: trace_test.sh LOOMRUN LOOM_BENCH SOURCE_DIR   (a few seconds)
set -uo pipefail
LOOMRUN=$1
BENCH=$2
SRC=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The ring forced for allreduce: an executor-run schedule, so lanes appear.
LOOM_TRACE=$TMP/trace LOOM_ALGO=allreduce:ring LOOM_TRACE_WAIT_US=0 \
  "$LOOMRUN" -n 3 --timeout 120 -- "$BENCH" allreduce -b 8 -e 64K -f 64 -n 3 -w 1 \
  >"$TMP/out" 2>&1 || fail "traced allreduce: $(tail -5 "$TMP/out")"
LOOM_TRACE=$TMP/trace "$LOOMRUN" -n 3 --timeout 120 -- "$BENCH" sendrecv -b 1K -e 1K -n 2 -w 0 \
  >>"$TMP/out" 2>&1 || fail "traced sendrecv: $(tail -5 "$TMP/out")"
count=$(ls "$TMP"/trace/loom-trace-*-r*-p*.json 2>/dev/null | wc -l)
[[ $count -eq 6 ]] || fail "expected 6 trace files (2 jobs x 3 ranks), found $count"
python3 "$SRC/scripts/loom_trace_merge.py" "$TMP/trace" -o "$TMP/merged.json" >"$TMP/merge" 2>&1 ||
  fail "merge: $(cat "$TMP/merge")"
python3 - "$TMP/trace" "$TMP/merged.json" <<'PY' || fail "trace contents"
import glob, json, sys
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("trace check failed:", what, file=sys.stderr)
        ok = False
for path in glob.glob(sys.argv[1] + "/loom-trace-*.json"):
    events = json.load(open(path))  # whole files: each closed its array at destroy
    calls = [e for e in events if e.get("cat") == "call"]
    check(calls, f"{path}: no call events")
    for e in calls:
        args = e["args"]
        check({"seq", "bytes", "dtype", "comm", "job", "result"} <= set(args), f"call args {args}")
        check(e["dur"] >= 0, "negative duration")
merged = json.load(open(sys.argv[2]))["traceEvents"]
ranks = {e["pid"] for e in merged if e.get("ph") == "X"}
check(ranks == {0, 1, 2}, f"merged processes {ranks}")
names = {e["args"]["name"] for e in merged if e.get("name") == "process_name"}
check(any(n.startswith("rank 1 (") for n in names), f"process names {names}")
threads = {e["args"]["name"] for e in merged if e.get("name") == "thread_name"}
check({"collectives", "point-to-point"} <= {t.split(": ")[-1] for t in threads}, f"tracks {threads}")
check(any(t.startswith("send to") or "send to" in t for t in threads), f"no lane track in {threads}")
ops = {(e["name"], e["args"].get("algorithm")) for e in merged if e.get("cat") == "call"}
check(("allreduce", "ring") in ops, f"no ring allreduce in {ops}")
check(any(n in ("send", "recv") for n, _ in ops), f"no send/recv call in {ops}")
check(any(e.get("cat") == "lane" for e in merged), "no lane spans")
sys.exit(0 if ok else 1)
PY

# A hierarchical allreduce on 2 fake nodes with its column on a thread of its own: the thread's
# runs show their lanes and their waits too (inside the allreduce calls only the thread's run
# records waits: the calling thread's waits for it are not the executor's).
LOOM_TRACE=$TMP/hier LOOM_ALGO=allreduce:hierarchical LOOM_BESIDE_WAIT=thread \
  LOOM_TRACE_WAIT_US=0 "$LOOMRUN" -n 4 --timeout 120 -- "$SRC/tests/api/fake_nodes.sh" "A A B B" \
  "$BENCH" allreduce -b 4M -e 4M -n 2 -w 1 >"$TMP/hier.out" 2>&1 ||
  fail "traced hierarchical allreduce: $(tail -5 "$TMP/hier.out")"
python3 - "$TMP/hier" <<'PY' || fail "the threaded column's lanes or waits are not in the trace"
import glob, json, sys
lanes = waits = 0
for path in glob.glob(sys.argv[1] + "/loom-trace-*.json"):
    events = json.load(open(path))
    calls = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "call" and e["name"] == "allreduce"]
    inside = lambda e: any(a <= e["ts"] <= b for a, b in calls)
    lanes += sum(1 for e in events if e.get("cat") == "lane" and inside(e))
    waits += sum(1 for e in events if e.get("cat") == "wait" and inside(e))
print("lane spans", lanes, "waits", waits, "inside the allreduce calls")
sys.exit(0 if lanes > 0 and waits > 0 else 1)
PY

# A rank killed while it wrote leaves its file cut in the middle of an event: the merge keeps
# the file's complete lines (that rank's trace is the one to read) and says what it dropped.
mkdir -p "$TMP/cut"
cp "$TMP"/trace/loom-trace-*-r*-p*.json "$TMP/cut/"
python3 - "$(ls "$TMP"/cut/loom-trace-*-r1-p*.json | head -1)" <<'PY' || fail "cutting a trace"
import sys
path = sys.argv[1]
text = open(path).read()
at = text.rindex("\n", 0, len(text) * 7 // 10) + 10  # inside the line after that newline
open(path, "w").write(text[:at])
PY
python3 "$SRC/scripts/loom_trace_merge.py" "$TMP/cut" -o "$TMP/cut.json" >"$TMP/cut.out" 2>&1 ||
  fail "merging a cut trace: $(cat "$TMP/cut.out")"
grep -q "ends in the middle of an event" "$TMP/cut.out" || fail "cut trace: $(cat "$TMP/cut.out")"
python3 - "$TMP/cut.json" <<'PY' || fail "the cut rank's events are not in the merged trace"
import json, sys
merged = json.load(open(sys.argv[1]))["traceEvents"]
sys.exit(0 if any(e.get("pid") == 1 and e.get("ph") == "X" for e in merged) else 1)
PY

# loomrun -n 2, but the job asks for a world of 3: it fails at once, not at the timeout.
start=$(date +%s)
LOOM_WORLD_SIZE=3 LOOM_TIMEOUT=60 "$LOOMRUN" -n 2 --timeout 100 -- "$BENCH" allreduce -b 8 -e 8 \
  >"$TMP/world" 2>&1 && fail "a world-size mismatch succeeded"
took=$(($(date +%s) - start))
[[ $took -lt 20 ]] || fail "the world-size mismatch took $took s"
grep -q "asks for a world of 3 ranks (LOOM_WORLD_SIZE=3) but loomrun started 2" "$TMP/world" ||
  fail "world-size message: $(head -c 800 "$TMP/world")"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "trace test: ok"
