#!/usr/bin/env bash
# The nccl.h the NCCL shim implements: NCCL 2.32's (shim/nccl/CMakeLists.txt takes the newest it
# finds). Where neither the CUDA toolkit nor a python's nvidia-nccl wheel has 2.32 or later, this
# unpacks PyPI's nvidia-nccl-cu13 wheel under DIR: DIR/include (nccl.h, nccl_device/) and
# DIR/lib/libnccl.so.2 (the symbol test's reference; never loaded by the shim). Nothing is
# installed system-wide. Without the network the build goes on with the older header (the shim
# then exports that release's API) and this says so.
#
#   scripts/nccl_header.sh DIR        (make build calls it with BUILD/_deps/nccl)
#   LOOM_NCCL_WHEEL=/path/to/nvidia_nccl_cu13-2.32.3-...whl: a wheel already downloaded
set -uo pipefail
dir=$1
want=2.32.3
have_version() {  # prints MAJOR.MINOR of the nccl.h in $1, if any
  [[ -f $1/nccl.h ]] || return 1
  sed -n 's/^#define NCCL_\(MAJOR\|MINOR\) \([0-9]*\)/\2/p' "$1/nccl.h" | paste -sd. -
}
recent() {  # 0 when the nccl.h in $1 is 2.32 or later
  local v
  v=$(have_version "$1") || return 1
  [[ $(printf '%s\n2.32\n' "$v" | sort -V | head -1) == 2.32 ]]
}

recent "$dir/include" && exit 0
for inc in /usr/local/cuda/include $(python3 -c \
    "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/nvidia/nccl/include')" \
    2>/dev/null); do
  recent "$inc" && exit 0
done

wheel=${LOOM_NCCL_WHEEL:-}
tmp=""
if [[ -z $wheel ]]; then
  tmp=$(mktemp -d)
  echo "nccl_header: downloading nvidia-nccl-cu13==$want from PyPI (its nccl.h for the NCCL shim)" >&2
  # pip's own cache keeps the wheel for the next fresh build on this machine.
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
      "nvidia-nccl-cu13==$want" >&2; then
    echo "nccl_header: could not download it; the NCCL shim is built against the nccl.h found" \
      "(an older release's API)" >&2
    rm -rf "$tmp"
    exit 0
  fi
  wheel=$(ls "$tmp"/nvidia_nccl_cu13-*.whl 2>/dev/null | head -1)
fi
[[ -f $wheel ]] || { echo "nccl_header: no wheel at '$wheel'" >&2; exit 1; }
mkdir -p "$dir"
python3 - "$wheel" "$dir" <<'EOF'
import os, shutil, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for prefix, to in (("nvidia/nccl/include/", "include"), ("nvidia/nccl/lib/libnccl.so", "lib")):
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            rel = name[len("nvidia/nccl/"):] if to == "include" else "lib/" + os.path.basename(name)
            target = os.path.join(out, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
EOF
status=$?
[[ -n $tmp ]] && rm -rf "$tmp"
((status == 0)) || { echo "nccl_header: could not unpack $wheel" >&2; exit 1; }
echo "nccl_header: NCCL $(have_version "$dir/include") headers in $dir/include" >&2
