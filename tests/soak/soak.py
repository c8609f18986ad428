#!/usr/bin/env python3
"""Chaos soak: many short jobs of random collectives, sizes, rank counts and transports, each with
one random fault, and what must hold whatever happens (docs/reliability.md):

  no hang          every rank but a stopped or computing victim exits within 4 x timeout + 10 s
  no wrong result  no call that returned success has a wrong byte (soak_rank checks every one)
  prompt errors    every survivor's error comes within 2 x the timeout of the fault
  named causes     every survivor's error names its cause (the rank, the timeout, the abort)
  nothing left     no /dev/shm segment of the job, no descriptor or thread left in a rank after
                   it released its communicator, no process of the job

Transports: shm (one node), tcp and rudp between fake nodes (LOOM_NODE_ID: loopback), tcp and
rudp between network namespaces (tests/multinode/netns_lib.sh; root only), emu (every rank on the
emulated device) and mixed (emu and CPU ranks: a heterogeneous communicator). Faults: none, kill
(SIGKILL mid-call), stop (SIGSTOP past the timeout), compute (alive, never calls again), abort
(loomCommAbort from another thread), drop (one TCP connection shut down), destroy (an early
loomCommDestroy), loss (nft drops 2-5 % of a namespace node's input; no failure expected).

    tests/soak/soak.py --build build --jobs 1000 [--seed 1] [--timeout 2] [--report soak.jsonl]

Bounded: jobs run one at a time (the machine is shared); --minutes stops starting new ones.
"""
import argparse
import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

FAULTS = ["none", "kill", "stop", "compute", "abort", "drop", "destroy", "loss"]
TRANSPORTS = ["shm", "tcp", "rudp", "netns-tcp", "netns-rudp", "emu", "mixed"]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Namespaces:
    """Three namespace nodes for the whole soak, from netns_lib.sh, held by a bash process."""

    def __init__(self):
        self.prefix = None
        self.proc = None
        lib = os.path.join(SRC, "tests/multinode/netns_lib.sh")
        script = (f"source {lib}; why=$(loomt_can_run) || {{ echo \"NO $why\"; exit 0; }}; "
                  "loomt_setup 3 || { echo NO setup failed; exit 0; }; echo READY $LOOMT_PREFIX; read")
        self.proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line.startswith("READY "):
            self.prefix = line.split()[1]
        else:
            self.why = line[3:] if line.startswith("NO") else line
            self.proc.wait()
            self.proc = None

    def node(self, i):
        return f"{self.prefix}-{i}"

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()  # its read returns; its EXIT trap deletes the namespaces
            self.proc.wait(timeout=60)


def free_port(rng):
    return rng.randrange(20000, 32000)


def shm_segments(pids):
    out = []
    for name in os.listdir("/dev/shm"):
        m = re.match(r"loom-(\d+)-", name)
        if m and int(m.group(1)) in pids:
            out.append(name)
    return out


def expected_cause(fault, victim, msg):
    """Whether a survivor's message names the cause of the fault. A rank alive but stuck (stop,
    compute) may sit past another rank on a chain of waits across hosts (a ring): a timeout that
    names the rank it waited for names the cause as far as that rank can see; the victim itself
    is counted apart (named_victim)."""
    if fault in ("kill", "destroy"):
        return f"rank {victim}" in msg
    if fault in ("stop", "compute"):
        return f"rank {victim}" in msg or re.search(r"timed out .* waiting for rank \d+", msg) is not None
    if fault == "abort":  # the abort, or the rank whose communicator it failed
        return "abort" in msg.lower() or f"rank {victim}" in msg
    if fault == "drop":  # the connection's two ends: either names the other, or the victim
        return re.search(r"rank \d+", msg) is not None
    return False


def run_job(job, args, ns):
    # Everything a job draws comes from its own seed: --replay runs it again exactly.
    rng = random.Random(job["seed"])
    n, transport, fault = job["ranks"], job["transport"], job["fault"]
    # Under packet loss a lost SYN or segment waits out TCP's 1 s retransmission timer, more than
    # once: a short LOOM_TIMEOUT would fail a healthy job. No failure is expected there.
    timeout = max(args.timeout, 10.0) if fault == "loss" else args.timeout
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOOM_") and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    netns = transport.startswith("netns")
    host = "10.77.0.1" if netns else "127.0.0.1"
    env.update({"LOOM_WORLD_SIZE": str(n), "LOOM_TIMEOUT": str(timeout),
                "LOOM_COMM_ID": f"{host}:{free_port(rng)}",
                "LOOM_JOB_SECRET": "%032x" % rng.getrandbits(128)})
    if transport.endswith("rudp"):
        env["LOOM_TRANSPORT"] = "rudp"
    if netns:
        env["LOOM_SOCKET_IFNAME"] = "loomt0"
    emu_lib = os.path.join(args.build, "plugins/device/emu/libloom-device-emu.so")
    placement = ""
    if transport in ("emu", "mixed"):
        env["LOOM_DEVICE_PLUGIN"] = emu_lib
        placement = "E" * n if transport == "emu" else "".join(rng.choice("EC") for _ in range(n))
        if transport == "mixed" and len(set(placement)) == 1:
            placement = "E" + "C" * (n - 1)
    nodes = [0] * n
    if transport in ("tcp", "rudp") or netns:
        while len(set(nodes)) < 2:
            nodes = [rng.randrange(3 if netns else 2) for _ in range(n)]
            nodes[0] = 0  # rank 0 hosts the rendezvous at node 0's address
    worker = os.path.join(args.build, "tests/soak_rank")
    argv = [str(job["seed"]), str(job["calls"]), fault if fault != "loss" else "none",
            str(job["victim"]), str(job["at"])]
    procs = []
    loss_nodes = []
    if fault == "loss":
        percent = rng.choice([2, 3, 5])
        for node in sorted(set(nodes)):
            rule = (f"nft add table inet soak && nft add chain inet soak c '{{ type filter hook input "
                    f"priority 0; }}' && nft add rule inet soak c iifname loomt0 numgen random mod "
                    f"100 '<' {percent} drop")
            subprocess.run(["ip", "netns", "exec", ns.node(node), "sh", "-c", rule], check=False)
            loss_nodes.append(node)
        job["loss_percent"] = percent
    start = time.time()
    for r in range(n):
        e = dict(env, LOOM_RANK=str(r))
        if transport in ("tcp", "rudp"):
            e["LOOM_NODE_ID"] = "node%d" % nodes[r]
        if placement:
            if placement[r] == "E":
                e["LOOM_DEVICE"] = "loom-emu"
                e["SOAK_EMU"] = "1"
        cmd = [worker] + argv
        if netns:
            cmd = ["ip", "netns", "exec", ns.node(nodes[r]), "unshare", "--uts", "sh", "-c",
                   f'hostname loomt-node{nodes[r]} && exec "$0" "$@"'] + cmd
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True, text=True))
    limit = 4 * timeout + 10
    victim_alive_ok = fault in ("stop", "compute")
    hung = []
    while True:
        running = [r for r, p in enumerate(procs) if p.poll() is None]
        waiting_for = [r for r in running if not (victim_alive_ok and r == job["victim"])]
        if not waiting_for:
            break
        if time.time() - start > limit:
            hung = waiting_for
            break
        time.sleep(0.05)
    elapsed = time.time() - start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    outs = []
    for p in procs:
        out, err = p.communicate()
        outs.append((out, err))
    for node in loss_nodes:
        subprocess.run(["ip", "netns", "exec", ns.node(node), "nft", "delete", "table", "inet",
                        "soak"], check=False, stderr=subprocess.DEVNULL)
    # What the job left: processes of its sessions, shared-memory segments of its ranks.
    pids = {p.pid for p in procs}
    time.sleep(0.05)
    leftover_procs = []
    for p in procs:
        try:
            os.killpg(p.pid, 0)
            leftover_procs.append(p.pid)
        except ProcessLookupError:
            pass
    inner = set()  # ranks under ip netns exec: the worker is the session's process itself
    job.update(evaluate(job, outs, hung, elapsed, timeout))
    job["leftover_shm"] = shm_segments(pids | inner)
    job["leftover_procs"] = leftover_procs
    for name in job["leftover_shm"]:
        try:
            os.unlink("/dev/shm/" + name)
        except OSError:
            pass
    job["transport_nodes"] = nodes
    job["placement"] = placement
    job["elapsed_s"] = round(elapsed, 2)
    return job


def evaluate(job, outs, hung, elapsed, timeout):
    fault, victim = job["fault"], job["victim"]
    res = {"hung": hung, "wrong": [], "late": [], "unnamed": [], "leaks": [], "ok_ranks": [],
           "failed_ranks": [], "latency_ms": [], "messages": {}}
    fault_t = None
    for out, _ in outs:
        m = re.search(r"^fault t_ms=(\d+)", out, re.M)
        if m:
            fault_t = int(m.group(1))
    in_process_fault = fault in ("kill", "stop", "compute", "abort", "drop", "destroy")
    for r, (out, err) in enumerate(outs):
        if "wrong call=" in out:
            res["wrong"].append(r)
        m = re.search(r"^leaks fds=(-?\d+) threads=(-?\d+)", out, re.M)
        if m and (int(m.group(1)) > 0 or int(m.group(2)) > 0):
            res["leaks"].append({"rank": r, "fds": int(m.group(1)), "threads": int(m.group(2))})
        if re.search(r"^ok calls=", out, re.M):
            res["ok_ranks"].append(r)
        m = re.search(r"^failed call=(-?\d+) code=(\d+) t_ms=(\d+) msg=(.*)$", out, re.M)
        if not m:
            continue
        res["failed_ranks"].append(r)
        msg = m.group(4)
        res["messages"][r] = msg[:400]
        if r == victim and fault in ("abort", "drop", "destroy"):
            continue  # the victim's own view of its own fault
        if not in_process_fault or fault_t is None:
            res["unexpected_failure"] = True
            continue
        latency = int(m.group(3)) - fault_t
        res["latency_ms"].append(latency)
        if latency > 2 * timeout * 1000:
            res["late"].append({"rank": r, "ms": latency})
        if not expected_cause(fault, victim, msg):
            res["unnamed"].append({"rank": r, "msg": msg[:300]})
        res.setdefault("named_victim", 0)
        res["named_victim"] += f"rank {victim}" in msg
    if fault in ("none", "loss") and len(res["ok_ranks"]) != job["ranks"]:
        res["unexpected_failure"] = True
    return res


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=0, help="start no job after this long")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=2.0, help="LOOM_TIMEOUT of every job (s)")
    parser.add_argument("--transports", default=",".join(TRANSPORTS))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--report", default=None, help="one JSON line per job")
    parser.add_argument("--replay", default=None,
                        help="run one job again: its JSON line from a report (or a prefix of it)")
    args = parser.parse_args()
    if args.replay:
        job = json.loads(args.replay)
        job = {k: job[k] for k in ("index", "seed", "ranks", "transport", "fault", "victim", "at",
                                   "calls", "timeout")}
        args.timeout = job["timeout"]
        ns = Namespaces() if job["transport"].startswith("netns") else None
        try:
            print(json.dumps(run_job(job, args, ns), indent=1))
        finally:
            if ns is not None:
                ns.close()
        return 0
    rng = random.Random(args.seed)
    transports = args.transports.split(",")
    faults = args.faults.split(",")
    ns = None
    if any(t.startswith("netns") for t in transports):
        ns = Namespaces()
        if ns.prefix is None:
            print(f"soak: no namespace nodes ({ns.why}): netns transports and loss left out")
            transports = [t for t in transports if not t.startswith("netns")]
            ns = None
    if ns is None:
        faults = [f for f in faults if f != "loss"]
    report = open(args.report, "a") if args.report else None
    totals = collections.Counter()
    by_kind = collections.Counter()
    failures = []
    latencies = []
    start = time.time()
    try:
        for index in range(args.jobs):
            if args.minutes and time.time() - start > args.minutes * 60:
                break
            transport = rng.choice(transports)
            fault = rng.choice(faults)
            if fault == "loss" and not transport.startswith("netns"):
                transport = rng.choice([t for t in transports if t.startswith("netns")] or transports)
                if not transport.startswith("netns"):
                    fault = "none"
            n = rng.randint(2, 5)
            calls = rng.randint(5, 30)
            job = {"index": index, "seed": rng.getrandbits(32), "ranks": n, "transport": transport,
                   "fault": fault, "victim": rng.randrange(n), "at": rng.randint(1, calls),
                   "calls": calls, "timeout": args.timeout}
            job = run_job(job, args, ns)
            totals["jobs"] += 1
            by_kind[(transport, fault)] += 1
            bad = [k for k in ("hung", "wrong", "late", "unnamed", "leaks", "leftover_shm",
                               "leftover_procs") if job.get(k)]
            if job.get("unexpected_failure"):
                bad.append("unexpected_failure")
            for k in bad:
                totals[k] += 1
            latencies += job["latency_ms"]
            if bad:
                failures.append(job)
                print(f"soak: job {index} ({transport}, {fault}, {n} ranks): {', '.join(bad)}: "
                      f"{json.dumps({k: job.get(k) for k in bad + ['messages']})[:1500]}",
                      flush=True)
            if report:
                report.write(json.dumps(job) + "\n")
                report.flush()
            if (index + 1) % 50 == 0:
                print(f"soak: {index + 1} jobs, {time.time() - start:.0f} s, problems: "
                      f"{dict((k, v) for k, v in totals.items() if k != 'jobs')}", flush=True)
    finally:
        if ns is not None:
            ns.close()
    print(f"soak: {totals['jobs']} jobs in {time.time() - start:.0f} s")
    print("| transport | " + " | ".join(FAULTS) + " |")
    print("|---|" + "---:|" * len(FAULTS))
    for t in TRANSPORTS:
        print(f"| {t} | " + " | ".join(str(by_kind[(t, f)]) for f in FAULTS) + " |")
    for k in ("hung", "wrong", "late", "unnamed", "leaks", "leftover_shm", "leftover_procs",
              "unexpected_failure"):
        print(f"{k}: {totals[k]}")
    if latencies:
        latencies.sort()
        print(f"survivor error latency (ms after the fault): median {latencies[len(latencies) // 2]}, "
              f"max {latencies[-1]}, n={len(latencies)} (timeout {args.timeout * 1000:.0f} ms)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
