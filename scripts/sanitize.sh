#!/usr/bin/env bash
# The C++ tests under sanitizers, a slot at a time (each slot: a sanitizer, the test binaries it
# builds, the ctest tests it runs), in build trees of their own (build-sanitize-<flavor>; -O1:
# the multi-rank tests at -O0 under ASan took minutes each on 2 cores).
#
#   scripts/sanitize.sh ci         one slot, rotating with the commit (`make test` runs it; CI's
#                                  time allows about one slot: over the rotation every C++ test
#                                  but those of LONG_SLOTS runs under ASan+UBSan, and every test
#                                  that uses threads under TSan)
#   scripts/sanitize.sh slot N     slot N
#   scripts/sanitize.sh all FLAVOR every slot of one flavor (asan: ASan+UBSan, tsan: TSan);
#                                  `make test-asan` (every C++ test but the GPU ones and the
#                                  shim's stand-in fallback) / `make test-tsan`
#   scripts/sanitize.sh list       the slots
# UNITY=OFF builds the trees file by file (default ON, as the Makefile's build).
# SANITIZE_SLOT=N overrides the rotation of `ci`. JOBS: build parallelism (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

# flavor | targets | ctest regex. Multi-rank tests run under loomrun, built in the same tree.
SLOTS=(
  "asan|base_test exec_test algorithms_test plan_test|^(base_test|exec_test|algorithms_test|plan_test)$"
  "asan|transport_test bootstrap_test loomrun_test topology_test comm_test loomrun|^(transport_test|bootstrap_test|loomrun_test|topology_test|comm_test)$"
  "asan|api_unit_test faults_test no_alloc_test fault_rank loomrun|^(api_unit_test|faults_test|no_alloc_test|no_alloc_hierarchical(_thread)?)$"
  "asan|collectives_test loomrun|^(plan_collectives_.*|collectives_n[123])$"
  "asan|collectives_test loomrun|^(collectives_n[45]|collectives_nodes_.*)$"
  "asan|collectives_test loomrun|^(collectives_n[78]|collectives_hier_.*)$"
  "asan|p2p_test loomrun|^p2p_"
  "asan|ep_test plugin_load_test loom-device-emu loom-test-plugin loom-test-plugin-nosymbol loom-test-plugin-version loom-test-plugin-missing loom-test-plugin-init loom-test-plugin-emukind loom-test-plugin-oldsize loom-test-plugin-small loom-test-plugin-badtorch loomrun|^(ep_.*|plugin_load_test)$"
  "asan|emu_collectives_test loom-device-emu loomrun|^emu_collectives_"
  "asan|emu_collectives_test emu_fault_test loom-hetero-bench loom-device-emu loomrun|^(emu_hetero_|emu_fault_|emu_plans_)"
  "asan|fuzz_bootstrap fuzz_rudp fuzz_loomrun_wire fuzz_env fuzz_channel_header fuzz_json plan_ranks_test loom-bench loom-device-emu loom-info loom-check-cost allreduce_example loomrun|^(fuzz_.*|plan_ranks_.*|trace|loom_bench|tools_cli|loom_info.*|check_cost_bench|c_example)$"
  "asan|nccl_api_test nccl_api_test_nccl228 nccl_multi_comm_test loom_init_all_test loom-nccl loomrun|^(nccl_shim_.*|loom_init_all)$"
  "asan|collectives_test emu_collectives_test loom-device-emu loom-bench fault_rank loomrun|^(multinode_(collectives|rudp|hetero)|pid_namespaces)$"
  "tsan|exec_test comm_test bootstrap_test|^(exec_test|comm_test|bootstrap_test)$"
  "tsan|api_unit_test faults_test fault_rank loomrun|^(api_unit_test|faults_test)$"
  "tsan|transport_test p2p_test loomrun|^(transport_test|p2p_n2|p2p_n3)$"
  "tsan|emu_collectives_test loom-device-emu loomrun|^(emu_collectives_n2|emu_hetero_composed_ECEE|emu_hetero_staged_CECE)$"
  "tsan|collectives_test emu_collectives_test emu_fault_test loom-device-emu loomrun|^(collectives_hier_thread_AABBB|emu_hetero_hier_thread_kill.*|emu_hetero_composed_beside_thread_.*)$"
)

# Slots too long for CI's time beside the Python tests: `ci` leaves them out, `make test-asan` runs
# them. On a 2-core VM, 2026-11-28: 12 (namespace nodes) about 11 minutes alone; 5 (7 and 8 ranks,
# hierarchical) 735 s beside the Python tests, which it stretched from 258 s to 485 s (a fresh-clone
# `make test` of 27 minutes); 9 (every emulated heterogeneous, fault and plan test, 36) as long.
LONG_SLOTS=" 5 9 12 "

build_dir() { echo "build-sanitize-$1"; }

run_slot() {
  local index=$1 flavor targets regex sanitize
  SECONDS=0
  IFS='|' read -r flavor targets regex <<<"${SLOTS[$index]}"
  sanitize=$([[ $flavor == asan ]] && echo address,undefined || echo thread)
  local dir
  dir=$(build_dir "$flavor")
  echo "sanitize: slot $index of ${#SLOTS[@]} ($flavor: $regex)"
  mkdir -p "$dir"
  # The NCCL shim's nccl.h (NCCL 2.32), as `make build` fetches it for the main tree.
  scripts/nccl_header.sh "$dir/_deps/nccl" >/dev/null
  cmake -S . -B "$dir" $(command -v ninja >/dev/null && echo -G Ninja) -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DCMAKE_C_FLAGS_DEBUG="-g1 -O1" \
    -DLOOM_CUDA=OFF -DLOOM_BUILD_PYTHON=OFF -DLOOM_SANITIZE="$sanitize" \
    -DCMAKE_UNITY_BUILD="${UNITY:-ON}" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; return 1; }
  # shellcheck disable=SC2086  # targets is a list
  cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target $targets
  # Every report fails its test: ASan and TSan exit non-zero, UBSan halts at the first. Both
  # leave SIGSEGV alone: a test kills a rank with it on purpose and checks how it died. TSan lets
  # a forked child start threads (die_after_fork=0): bootstrap_test's children are ranks.
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1:handle_segv=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:handle_segv=0:die_after_fork=0 \
    ctest -R "$regex" --output-on-failure --timeout 1200)
  echo "sanitize: slot $index done in ${SECONDS}s"
}

case "${1:-ci}" in
  ci)
    # From the commit's hash (a shallow clone has no count of commits), else the day of the year.
    key=$((16#$(git rev-parse --short=7 HEAD 2>/dev/null || printf '%x' "$((10#$(date +%j)))")))
    rotation=()
    for i in "${!SLOTS[@]}"; do [[ $LONG_SLOTS == *" $i "* ]] || rotation+=("$i"); done
    run_slot "${SANITIZE_SLOT:-${rotation[$((key % ${#rotation[@]}))]}}"
    ;;
  slot) run_slot "$2" ;;
  all)
    for i in "${!SLOTS[@]}"; do
      [[ ${SLOTS[$i]%%|*} == "$2" ]] && run_slot "$i"
    done
    ;;
  list) for i in "${!SLOTS[@]}"; do echo "$i ${SLOTS[$i]}"; done ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
