#!/usr/bin/env python3
"""Merges the per-rank Loom traces of a job (LOOM_TRACE=DIR: loom-trace-<job>-r<rank>-p<pid>.json,
one per communicator and rank) into one Chrome/Perfetto trace with one process track per rank,
to open in ui.perfetto.dev or chrome://tracing.

    scripts/loom_trace_merge.py DIR [-o merged.json] [--job ID] [--summary]

Each rank is the process of its largest communicator (the world's, usually): its number there
orders the tracks; the communicator's own tracks (collectives, point-to-point, lanes, waits,
device) keep their names, prefixed with the communicator's name or id when a process has several.
Ranks on several hosts are aligned by wall-clock time (each file records its clock's offset);
ranks of one host share its steady clock and need no alignment.

--summary also prints, for a job that hung or failed, each rank's last collective call and what
it waited for: the ranks that never entered the last call number are the ones to look at.
"""
import argparse
import glob
import json
import os
import sys


def closed(text):
    """The JSON array format allows an unfinished array (a rank that crashed before its end)."""
    text = text.rstrip().rstrip(",")
    return text if text.endswith("]") else text + "]"


def load(path):
    """A rank's events. A file cut off in the middle of an event (a rank killed while it wrote)
    keeps every complete line before the cut (one event per line): a crashed rank's trace is the
    one most worth reading."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(closed(text))
    except ValueError:
        whole = text[:text.rstrip().rfind("\n") + 1]
        events = json.loads(closed(whole))
        print(f"loom_trace_merge: {path} ends in the middle of an event (cut off while written): "
              f"its last {len(text) - len(whole)} bytes dropped", file=sys.stderr)
        return events


def describe(events):
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            return e.get("args", {})
    return {}


def summarize(events, ranks):
    """Each rank's last collective call (the world's communicator: the most common job id) and
    the peers it waited for in it, and the ranks that never entered the last call number."""
    calls = [e for e in events if e.get("cat") == "call" and "seq" in e.get("args", {})
             and e.get("name") not in ("send", "recv")]
    if not calls:
        return "summary: no collective call in the traces"
    jobs = [e["args"].get("job") for e in calls]
    job = max(set(jobs), key=jobs.count)
    last = {}
    for e in calls:
        if e["args"].get("job") == job and e["args"]["seq"] >= last.get(e["pid"], {}).get(
                "args", {}).get("seq", -1):
            last[e["pid"]] = e
    final = max(e["args"]["seq"] for e in last.values())
    lines = [f"summary: communicator {job[:16]}, last call number #{final}"]
    for rank in ranks:
        e = last.get(rank)
        if e is None:
            lines.append(f"  rank {rank}: no collective call traced")
            continue
        a = e["args"]
        waits = sorted({w["args"]["peer"] for w in events
                        if w.get("pid") == rank and w.get("cat") == "wait" and
                        e["ts"] <= w["ts"] <= e["ts"] + e["dur"] and "peer" in w.get("args", {})})
        entered = "entered" if a["seq"] == final else f"NEVER ENTERED #{final}; its last is"
        waited = f", waited for rank(s) {', '.join(map(str, waits))}" if waits else ""
        lines.append(f"  rank {rank}: {entered} #{a['seq']} {e['name']} ({a.get('bytes', 0)} "
                     f"bytes, {a.get('algorithm', '?')}): {a.get('result')} after "
                     f"{e['dur'] / 1000:.1f} ms{waited}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="the LOOM_TRACE directory (or a file pattern)")
    parser.add_argument("-o", "--output", default=None,
                        help="merged file (default: DIR/loom-trace-merged.json)")
    parser.add_argument("--job", default=None, help="only the communicators of this job id")
    parser.add_argument("--summary", action="store_true",
                        help="print each rank's last collective call and its waits")
    args = parser.parse_args()

    pattern = args.dir if any(c in args.dir for c in "*?") else os.path.join(
        args.dir, "loom-trace-*-r*-p*.json")
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"loom_trace_merge: no trace in {args.dir}")
    traces = []
    for path in files:
        try:
            events = load(path)
        except (OSError, ValueError) as e:
            print(f"loom_trace_merge: skipping {path}: {e}", file=sys.stderr)
            continue
        info = describe(events)
        if args.job and info.get("loom_job") != args.job:
            continue
        traces.append((path, events, info))
    if not traces:
        sys.exit("loom_trace_merge: nothing to merge")

    # A process (host, pid) is the rank of its largest communicator.
    by_process = {}
    for path, events, info in traces:
        pid = next((e["pid"] for e in events if "pid" in e), 0)
        key = (info.get("loom_host", "?"), pid)
        best = by_process.get(key)
        if best is None or info.get("loom_nranks", 0) > best.get("loom_nranks", 0):
            by_process[key] = info
    hosts = {host for host, _ in by_process}
    # Several hosts: their steady clocks differ; put every event on the wall clock.
    use_wall = len(hosts) > 1
    comms_per_process = {}
    for path, events, info in traces:
        pid = next((e["pid"] for e in events if "pid" in e), 0)
        comms_per_process.setdefault((info.get("loom_host", "?"), pid), set()).add(
            info.get("loom_job"))

    merged = []
    next_tid = {}
    for path, events, info in traces:
        os_pid = next((e["pid"] for e in events if "pid" in e), 0)
        key = (info.get("loom_host", "?"), os_pid)
        owner = by_process[key]
        rank = owner.get("loom_rank", 0)
        shift_us = info.get("loom_realtime_offset_ns", 0) / 1000.0 if use_wall else 0.0
        several = len(comms_per_process[key]) > 1
        label = info.get("loom_comm") or info.get("loom_job", "")[:8]
        tids = {}
        for e in events:
            e = dict(e)
            if e.get("ph") == "M" and e.get("name") in ("process_name", "process_sort_index"):
                continue
            e["pid"] = rank
            if "tid" in e:
                local = (path, e["tid"])
                if local not in tids:
                    n = next_tid.get(rank, 1)
                    next_tid[rank] = n + 1
                    tids[local] = n
                e["tid"] = tids[local]
            if e.get("ph") == "M" and e.get("name") == "thread_name" and several:
                e["args"] = {"name": f"{label}: {e['args']['name']}"}
            if e.get("ph") == "M" and e.get("name") == "thread_sort_index":
                e["args"] = {"sort_index": e["tid"]}
            if "ts" in e:
                e["ts"] = e["ts"] + shift_us
            merged.append(e)
    for (host, os_pid), info in sorted(by_process.items(), key=lambda kv: kv[1].get("loom_rank", 0)):
        rank = info.get("loom_rank", 0)
        merged.append({"name": "process_name", "ph": "M", "pid": rank,
                       "args": {"name": f"rank {rank} ({host}:{os_pid})"}})
        merged.append({"name": "process_sort_index", "ph": "M", "pid": rank,
                       "args": {"sort_index": rank}})
    out = args.output or os.path.join(args.dir if os.path.isdir(args.dir) else ".",
                                      "loom-trace-merged.json")
    with open(out, "w") as f:
        json.dump({"traceEvents": merged, "displayTimeUnit": "ns"}, f)
    print(f"{out}: {len(by_process)} rank(s), {len(traces)} file(s), {len(merged)} events; "
          f"open it in ui.perfetto.dev")
    if args.summary:
        print(summarize(merged, sorted(info.get("loom_rank", 0) for info in by_process.values())))


if __name__ == "__main__":
    main()
