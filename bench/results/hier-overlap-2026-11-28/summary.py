import csv, statistics, sys
from collections import defaultdict
t = defaultdict(dict)
for f in sys.argv[1:]:
    for r in csv.DictReader(open(f)):
        t[(r["shape"], r["transport"], r["op"], int(r["bytes"]))][(r["build"], r["round"]+f)] = float(r["us"])
print("| shape | transport | op | bytes | A us (median) | B us (median) | B/A per round (median; min-max) | null B2/B (median; min-max) | rounds |")
print("|---|---|---|---:|---:|---:|---|---|---:|")
for key in sorted(t):
    d = t[key]
    rounds = sorted({r for (_, r) in d})
    ba = [d[("B", r)] / d[("A", r)] for r in rounds if ("A", r) in d and ("B", r) in d]
    nl = [d[("B2", r)] / d[("B", r)] for r in rounds if ("B", r) in d and ("B2", r) in d]
    if not ba: continue
    a = statistics.median(d[("A", r)] for r in rounds if ("A", r) in d)
    b = statistics.median(d[("B", r)] for r in rounds if ("B", r) in d)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]>>20} MiB | {a/1000:.1f} ms | {b/1000:.1f} ms | {statistics.median(ba):.2f} ({min(ba):.2f}-{max(ba):.2f}) | {statistics.median(nl):.2f} ({min(nl):.2f}-{max(nl):.2f}) | {len(ba)} |")
