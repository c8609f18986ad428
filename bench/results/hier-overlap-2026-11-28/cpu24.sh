#!/usr/bin/env bash
# usage: cpu24.sh BUILD OP BYTES ITERS -> prints "wall_s user_s sys_s" summed over both nodes (loomrun + ranks)
B=$1 OP=$2 BYTES=$3 IT=$4
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
tmp=$(mktemp -d)
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
PORT=$((29900 + RANDOM % 90))
"$ROOT/tests/multinode/nodes.sh" -q -f -k 2 -t 600 -o "$tmp" -- \
  "s=\$(date +%s.%N); env LOOM_TRANSPORT=tcp ${ENVX:-} LOOM_JOB_SECRET=$secret LOOM_SOCKET_IFNAME=loomt0 $B/tools/loomrun --nnodes 2 \
   --node-rank \$LOOMT_NODE --master \$LOOMT_MASTER:$PORT -n 4 --no-prefix --timeout 600 -- \
   $B/tools/loom-bench $OP -b $BYTES -e $BYTES -n $IT -w 1 -c 0 --device cpu --csv; e=\$(date +%s.%N); echo WALL \$s \$e; times" >/dev/null 2>&1
python3 - "$tmp" <<'PY'
import sys,glob,re
tot_u=tot_s=0; walls=[]
for f in glob.glob(sys.argv[1]+"/node*.out"):
    lines=open(f).read().split("\n")
    for i,l in enumerate(lines):
        if l.startswith("WALL"): _,s,e=l.split(); walls.append(float(e)-float(s))
    # 'times' prints two lines: shell, children
    tl=[l for l in lines if re.match(r"^\d+m[\d.]+s \d+m[\d.]+s$",l)]
    if len(tl)>=2:
        u,s=tl[1].split()
        conv=lambda x: int(x.split("m")[0])*60+float(x.split("m")[1][:-1])
        tot_u+=conv(u); tot_s+=conv(s)
print(f"wall {max(walls):.2f} user {tot_u:.2f} sys {tot_s:.2f}")
PY
grep -h "^$OP" $tmp/node0.out | awk -F, '{print "us",$9}'
rm -rf "$tmp"
