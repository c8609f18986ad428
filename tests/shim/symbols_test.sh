#!/usr/bin/env bash
# The shim's exports against the real NCCL's of the release the list names:
#   symbols_test.sh SHIM_LIB CHECKED_IN_LIST DOC NCCL_INCLUDE_DIR
# CHECKED_IN_LIST is nccl-X.Y.Z-symbols.txt. Reference: the real libnccl.so.2 beside the nccl.h the
# shim was built against (NCCL_INCLUDE_DIR/../lib64 or ../lib), when it is NCCL X.Y; else
# CHECKED_IN_LIST. Every reference symbol must be exported by SHIM_LIB or named in DOC's
# "Not exported" section with a reason; SHIM_LIB exports nothing but nccl*/pnccl* functions.
set -u
shim=$1 list=$2 doc=$3 include=${4:-}
exports() { nm -D --defined-only "$1" | awk '$2 ~ /^[TWi]$/ && $3 ~ /^p?nccl/ { print $3 }' | sort -u; }
full=$(basename "$list" | sed -n 's/^nccl-\([0-9]*\.[0-9]*\.[0-9]*\)-symbols\.txt$/\1/p')
[[ -n $full ]] || { echo "FAIL: $list is not named nccl-X.Y.Z-symbols.txt"; exit 1; }
release=${full%.*}
release_re=${release//./\\.}
full_re=${full//./\\.}

reference="" source=""
for lib in "$include/../lib64/libnccl.so.2" "$include/../lib/libnccl.so.2"; do
  if [[ -f $lib ]] && strings "$lib" | grep -q "NCCL version $release_re\."; then
    reference=$(exports "$lib")
    source="$lib ($(strings "$lib" | grep -m1 -o "NCCL version $release_re\.[^ ]*"))"
    # The checked-in list must stay what such a library exports.
    if [[ $(strings "$lib" | grep -m1 -o "NCCL version $full_re") ]] &&
       ! diff <(grep -v '^#' "$list") <(echo "$reference") >/dev/null; then
      echo "FAIL: $list differs from $lib's exports:"
      diff <(grep -v '^#' "$list") <(echo "$reference")
      exit 1
    fi
    break
  fi
done
if [[ -z $reference ]]; then
  reference=$(grep -v '^#' "$list")
  source="$list"
fi
echo "reference: $source ($(echo "$reference" | wc -l) symbols)"

shim_exports=$(exports "$shim")
# The section of the doc that lists what is not exported, with reasons.
not_exported=$(awk '/^## Not exported/ { on = 1; next } /^## / { on = 0 } on' "$doc")
failed=0
missing=0
for sym in $reference; do
  if grep -qx "$sym" <<<"$shim_exports"; then continue; fi
  base=${sym#p}
  if grep -q "\`$base\`" <<<"$not_exported"; then
    missing=$((missing + 1))
    continue
  fi
  echo "FAIL: $sym is neither exported nor listed under 'Not exported' in $doc"
  failed=1
done
others=$(nm -D --defined-only "$shim" | awk '$2 !~ /^[AUw]$/ && $3 !~ /^p?nccl/ { print $3 }')
if [[ -n $others ]]; then
  echo "FAIL: $shim exports more than NCCL's API:"
  echo "$others" | head -20
  failed=1
fi
soname=$(readelf -d "$shim" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [[ $soname != libnccl.so.2 ]]; then
  echo "FAIL: SONAME is '$soname', not libnccl.so.2"
  failed=1
fi
echo "exported: $(grep -c . <<<"$shim_exports"); listed as not exported: $missing"
[[ $failed == 0 ]] && echo "PASS"
exit $failed
