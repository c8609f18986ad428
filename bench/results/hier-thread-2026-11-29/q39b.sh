#!/usr/bin/env bash
# Quick: B = main (a27fd9b), C = .gpu/srcC.tar.xz (the column on a thread); 2x4 tcp hierarchical.
set -u
R=/tmp/r; mkdir -p $R/l; T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a $R/progress; }
export PATH=$PWD/.gpu/iproute:$PATH
el "start $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf /tmp/srcC && mkdir /tmp/srcC && tar xJf .gpu/srcC.tar.xz -C /tmp/srcC
bld() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DLOOM_BUILD_TESTS=OFF -DCMAKE_UNITY_BUILD=ON >$R/l/cmake-$3.log 2>&1 && cmake --build $2 -j 8 -t loomrun loom-bench >$R/l/build-$3.log 2>&1; }
bld . /tmp/bB B & pb=$!; bld /tmp/srcC /tmp/bC C; rcc=$?; wait $pb; el "builds B rc=$? C rc=$rcc"
source tests/multinode/netns_lib.sh
PORT=29600
job() {  # NAME BUILD ENV ARGS
  local name=$1 b=$2 env=$3; shift 3
  PORT=$((PORT + 1))
  tests/multinode/nodes.sh -q -f -k 2 -t 300 -o $R/$name -- \
    "env $env LOOM_JOB_SECRET=0123456789abcdef0123456789abcdef LOOM_SOCKET_IFNAME=loomt0 $b/tools/loomrun --nnodes 2 \
     --node-rank \$LOOMT_NODE --master \$LOOMT_MASTER:$PORT -n 4 --no-prefix --timeout 300 -- $b/tools/loom-bench $* -c 1 --device cpu --csv" >/dev/null 2>&1
  grep -E '^[a-z]+,[0-9]+,' $R/$name/node0.out | awk -F, -v n=$name '{print n "," $2 "," $3 "," $9 "," $12}' >>$R/beside.csv
  el "$name: $(grep -E '^[a-z]+,[0-9]+,' $R/$name/node0.out | awk -F, '{printf "%s %.0f w%s; ", $3/1048576, $9, $12}')"
  rm -rf $R/$name
}
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for op in allreduce allgather; do
    job ${op}_B_block_$r /tmp/bB "LOOM_BESIDE_WAIT=block" $op -b 16M -e 256M -f 4 -n 5 -w 1
    job ${op}_C_block_$r /tmp/bC "LOOM_BESIDE_WAIT=block" $op -b 16M -e 256M -f 4 -n 5 -w 1
    job ${op}_C_thread_$r /tmp/bC "LOOM_BESIDE_WAIT=thread" $op -b 16M -e 256M -f 4 -n 5 -w 1
    job ${op}_C_auto_$r /tmp/bC "LOOM_BESIDE_WAIT=auto" $op -b 1M -e 256M -f 4 -n 5 -w 1
  done
done
touch $R/done
