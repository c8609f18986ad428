#!/usr/bin/env bash
# rudp vs Loom's TCP transport, side by side in the same two namespace nodes (one rank each) and
# under the same nft loss rule (each node drops LOSS % of everything it receives on its link, both
# transports' packets and the bootstrap's alike): allreduce and sendrecv goodput (loom-bench
# algbw, results checked once per size), tcp and rudp interleaved REPS times per condition.
# Dropped on the receiving side (LOSS_HOOK=input, the default), a packet is lost as on a wire: the
# sender does not know. Dropped on the sending side's output hook (LOSS_HOOK=output, what sessions
# 10-13 measured), the sender's kernel learns of it at once: its send fails with EPERM; TCP then
# keeps the segment queued and sends it again at its next chance, with no loss detection and no
# smaller window, while rudp (like any UDP sender) counts the datagram as sent and recovers it
# by RACK or a probe. Either way a dropped packet is what the hook sees: a TCP segment or a UDP
# train of up to 64 KiB (GSO/GRO), not one wire packet.
# "reorder" holds a fifth of what each node sends, chosen at random, for 0-2 ms in the kernel, for
# both transports alike: an iptables NFQUEUE rule hands the packets to bench/nfq_delay.c, which
# lets each go after its delay (the kernel has no netem). Packets are held as the output hook
# sees them: a TCP segment or a UDP train of up to 64 KiB (GSO) at a time. "reorder-faults" is
# rudp's test-only fault layer instead (LOOM_RUDP_FAULTS=delay=0.2, datagram by datagram; TCP runs
# without reordering then, so only rudp against itself means anything there).
# Usage: bench/rudp_vs_tcp.sh BUILD_DIR [OUT.csv]
# Environment: LOSS_HOOK (input or output, above), LOSSES (default "0 0.1 1 5 reorder"), SIZES ("-b 1M -e 256M -f 16"; groups of
#   loom-bench options separated by "|" run one after the other, each may set its own -n, e.g.
#   "-b 1M -e 16M -f 16 -n 40|-b 256M -e 256M": small calls need many iterations), REPS (2),
#   ITERS (3), BASE (another build, e.g. main's: its rudp runs too, interleaved, as transport
#   "rudp-base", for an A/B in the same minutes), BASE_ENV (settings for the "rudp-base" runs,
#   e.g. "LOOM_RUDP_FOLLOW_CALLER=0"; with it alone, BASE is BUILD).
set -uo pipefail
BUILD=$(cd "$1" && pwd)
BASE_ENV=${BASE_ENV:-}
[[ -n "$BASE_ENV" && -z "${BASE:-}" ]] && BASE=$BUILD
BASE=${BASE:+$(cd "$BASE" && pwd)}
TRANSPORTS="tcp rudp${BASE:+ rudp-base}"
OUT=${2:-/dev/stdout}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODES="$HERE/../tests/multinode/nodes.sh"
LOSS_HOOK=${LOSS_HOOK:-input}
[[ "$LOSS_HOOK" == input || "$LOSS_HOOK" == output ]] ||
  { echo "LOSS_HOOK must be input or output, not '$LOSS_HOOK'" >&2; exit 2; }
LOSSES=${LOSSES:-0 0.1 1 5 reorder}
SIZES=${SIZES:--b 1M -e 256M -f 16}
REPS=${REPS:-2}
ITERS=${ITERS:-3}
export LOOM_JOB_SECRET
LOOM_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ " $LOSSES " == *" reorder "* ]]; then
  cc -O2 -o "$tmp/nfq_delay" "$HERE/nfq_delay.c" || exit 1
fi
echo "condition,transport,rep,benchop,op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong,ip_us,ip_algbw,ip_busbw,ip_wrong" >"$tmp/all.csv"
for cond in $LOSSES; do
  prefix=true
  faults=""
  if [[ "$cond" == reorder ]]; then
    prefix="{ $tmp/nfq_delay 0 2000 & } && sleep 0.2 && iptables -A OUTPUT -o loomt0 -m statistic \
--mode random --probability 0.2 -j NFQUEUE --queue-num 0 --queue-bypass"
  elif [[ "$cond" == reorder-faults ]]; then
    faults="delay=0.2"
  elif [[ "$cond" != 0 ]]; then
    permille=$(awk "BEGIN{print int($cond * 10 + 0.5)}")
    dir=iifname
    [[ "$LOSS_HOOK" == output ]] && dir=oifname
    prefix="nft add table inet loomt && nft add chain inet loomt c '{ type filter hook $LOSS_HOOK \
priority 0; }' && nft add rule inet loomt c $dir loomt0 numgen random mod 1000 '<' $permille drop"
  fi
  groups=""
  IFS='|' read -ra parts <<<"$SIZES"
  for g in "${parts[@]}"; do groups+=" '$g'"; done
  cmds=()
  for i in 0 1; do
    cmds+=("$prefix && port=29500 && for rep in \$(seq $REPS); do for t in $TRANSPORTS; do \
      for op in allreduce sendrecv; do for sz in $groups; do port=\$((port + 1)); \
        b=$BUILD; e=; [ \$t = rudp-base ] && b=$BASE && e='$BASE_ENV'; \
        env \$e LOOM_TRANSPORT=\${t%-base} LOOM_RUDP_FAULTS=\$( [ \$t != tcp ] && echo '$faults') \
        \$b/tools/loomrun --nnodes 2 --node-rank $i --master \$LOOMT_MASTER:\$port -n 1 \
        --timeout 900 -- \$b/tools/loom-bench \$op -n $ITERS -w 1 -c 1 \$sz --csv \
        | sed \"s/^/$cond,\$t,\$rep,\$op,/\" || exit 1; done; done; done; done")
  done
  echo "== $cond" >&2
  "$NODES" -q -t 1800 -o "$tmp/$cond" -- "${cmds[@]}" || echo "condition $cond failed" >&2
  # loomrun puts "[rank] " in front of each line: drop it, keep the data rows.
  sed -E 's/^([^,]*,[^,]*,[^,]*,[^,]*,)\[[0-9]+\] /\1/' "$tmp/$cond/node0.out" |
    grep -E "^$cond,(tcp|rudp|rudp-base),[0-9]+,[a-z]+,[a-z]+,[0-9]" >>"$tmp/all.csv"
done
cp "$tmp/all.csv" "$OUT"
