#!/usr/bin/env bash
# The README's commands, run as a newcomer runs them, on this checkout after `make test` built it
# (so nothing is compiled twice): `make run` on the existing build directory, and that it builds
# everything `cmake --install` installs and every tool the README runs from the build tree (so
# that right after `make run` on a fresh clone they work too); `cmake --install` into a scratch
# prefix, the README's C example built against that prefix with find_package(Loom) and with
# pkg-config and run under the installed loomrun (every rank must print the sum), the installed
# tools' --version, and `pip install .` into a fresh virtual environment that sees the test
# environment's packages (torch, scikit-build-core, nanobind: no download), reusing the
# persistent build directory of pyproject.toml; a second `pip install .` that compiles nothing;
# then the README's Python snippet in a virtual environment that holds only the package and what
# its metadata requires (what pip gives a new user), and examples/torch_allreduce.py under
# torchrun. Each step says how long it took.
#
# Usage: scripts/newcomer_check.sh   (environment: BUILD (build), LOOM_VENV (.venv, the test
# environment scripts/python_test.sh made), RANKS (2), MAXBYTES (1M): make run's, kept small here)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
VENV=${LOOM_VENV:-.venv}
RANKS=${RANKS:-2}
MAXBYTES=${MAXBYTES:-1M}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

start=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step_start=$start
step() {
  step_start=$(date +%s.%N)
  printf '\n== newcomer: %s\n' "$*"
}
done_step() { echo "== done in $(since "$step_start") s"; }
fail() {
  echo "newcomer_check: $*" >&2
  exit 1
}

step "make run (README, Quick start) on the existing $BUILD, $RANKS ranks, up to $MAXBYTES"
out=$(MAXBYTES=$MAXBYTES make --no-print-directory run BUILD="$BUILD" RANKS="$RANKS" 2>&1) ||
  fail "make run failed: $out"
grep -q "== make run finished in" <<<"$out" || fail "make run did not finish: $out"
grep -q "Loom against the write bound, median of" <<<"$out" || fail "make run printed no comparison: $out"
done_step

step "make run builds what cmake --install installs and what the README runs from $BUILD/"
# Asked of ninja on this (complete) build: the files that make run's targets are made of, against
# the files the install scripts copy from the build directory and the build-tree paths the README
# names. Files ninja does not make (configure's, the sources) are not make run's to build.
if [[ -f "$BUILD/build.ninja" ]]; then
  read -r -a targets <<<"$(scripts/run.sh --targets)" || fail "scripts/run.sh --targets failed"
  # The targets' own files (ninja -t query) and everything they are made of (-t inputs).
  built=$(
    ninja -C "$BUILD" -t query "${targets[@]}" | awk '/^  input:/ { f = 1; next } /^  [a-z]/ { f = 0 } f { print $1 }'
    ninja -C "$BUILD" -t inputs "${targets[@]}"
  ) || fail "ninja -t query/inputs ${targets[*]} failed"
  build_abs=$(cd "$BUILD" && pwd -P)
  needed=$(
    grep -rhoE 'FILES "[^"]+"' --include=cmake_install.cmake "$BUILD" | sed -E 's/^FILES "//; s/"$//' |
      sed "s|^$build_abs/||" | grep -v '^/'
    grep -oE '(^|[ `(=])build/[A-Za-z0-9_./+-]+' README.md | sed -E 's/^[ `(=]?build\///'
  )
  missing=()
  for file in $(sort -u <<<"$needed"); do
    ninja -C "$BUILD" -t query "$file" 2>/dev/null | grep -q "^  input:" || continue
    grep -qxF "$file" <<<"$built" || missing+=("$file")
  done
  ((${#missing[@]} == 0)) ||
    fail "make run (targets: ${targets[*]}) does not build ${missing[*]}, which cmake --install or the README needs"
else
  echo "($BUILD is not a Ninja build: skipped)"
fi
done_step

prefix="$scratch/prefix"
step "cmake --install $BUILD --prefix PREFIX (README, A short example)"
cmake --install "$BUILD" --prefix "$prefix" >/dev/null
done_step

# The example exactly as the README prints it.
sed -n '/^```c$/,/^```$/p' README.md | sed '1d;$d' >"$scratch/app.c"
[[ -s "$scratch/app.c" ]] || fail "README.md has no C example"
check_sum() {  # every rank of loomrun -n 2 prints "rank R: 2 4 6 8"
  local out
  out=$("$prefix/bin/loomrun" -n 2 --timeout 60 -- "$1" 2>&1) || fail "$1 failed: $out"
  for r in 0 1; do
    grep -q "^\[$r\] rank $r: 2 4 6 8$" <<<"$out" || fail "$1: rank $r printed no sum: $out"
  done
}
(
  unset LD_LIBRARY_PATH  # the README promises none is needed
  step "the C example through find_package(Loom) and target_link_libraries(app Loom::loom)"
  mkdir -p "$scratch/cmake_app"
  cp "$scratch/app.c" "$scratch/cmake_app/app.c"
  cat >"$scratch/cmake_app/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.22)
project(app LANGUAGES C)
find_package(Loom REQUIRED)
add_executable(app app.c)
target_link_libraries(app Loom::loom)
EOF
  cmake -S "$scratch/cmake_app" -B "$scratch/cmake_app/build" -DCMAKE_PREFIX_PATH="$prefix" \
    >/dev/null
  cmake --build "$scratch/cmake_app/build" >/dev/null
  check_sum "$scratch/cmake_app/build/app"
  done_step

  step "the C example through cc app.c \$(pkg-config --cflags --libs loom)"
  pc_path="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig"
  # shellcheck disable=SC2046
  cc -o "$scratch/app_pc" "$scratch/app.c" $(PKG_CONFIG_PATH="$pc_path" pkg-config --cflags --libs loom)
  check_sum "$scratch/app_pc"
  done_step

  step "installed tools: --version"
  for tool in loomrun loom-bench loom-info; do
    version=$("$prefix/bin/$tool" --version) || fail "$tool --version failed"
    grep -q "[0-9]\+\.[0-9]\+" <<<"$version" || fail "$tool --version printed '$version'"
    echo "$version"
  done
  done_step
)

[[ -x "$VENV/bin/python" ]] || fail "no test environment at $VENV (scripts/python_test.sh makes it)"
python3 -m venv "$scratch/venv"
# The test environment's site-packages (torch, numpy, the build requirements) without copying or
# downloading them.
"$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
  >"$("$scratch/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/test_env.pth"

step "pip install . twice, as a new user runs it (pip's isolated build): the second compiles nothing"
# pyproject.toml keeps the build directory so that a reinstall compiles only what changed; pip's
# isolated build environment is a new folder every time, which once made scikit-build-core drop
# the library's objects (74 of 93 compiled again). Its build requirements come from PyPI (pip
# download, ~1 MB); offline, this step says so and is skipped.
if "$scratch/venv/bin/python" -m pip download -q -d "$scratch/wheels" "scikit-build-core>=0.10" \
  "nanobind>=2.0" >/dev/null 2>&1; then
  isolated=("$scratch/venv/bin/python" -m pip install -q --no-index --find-links "$scratch/wheels" .)
  "${isolated[@]}" || fail "pip install . (isolated) failed"
  touch "$scratch/before-second-install"
  sleep 1
  "${isolated[@]}" || fail "the second pip install . (isolated) failed"
  rebuilt=$(find build/python-* -name '*.o' -newer "$scratch/before-second-install")
  [[ -z "$rebuilt" ]] ||
    fail "the second pip install . compiled $(wc -l <<<"$rebuilt") objects again: $(echo $rebuilt | head -c 600)"
else
  echo "(pip download of the build requirements failed: no network? skipped)"
fi
done_step

step "pip install . (README, Python) into a fresh venv that sees $VENV's packages"
# --no-build-isolation: pip's build sees the test environment's torch (an isolated build finds only
# what the interpreter's own site-packages hold), so the torch backend is built too.
"$scratch/venv/bin/python" -m pip install -q --no-build-isolation . ||
  fail "pip install . failed"
py="$scratch/venv/bin/python"
"$py" -c 'import loom, os; assert os.path.realpath(loom.__file__).startswith(os.path.realpath("'"$scratch"'")), loom.__file__' ||
  fail "import loom did not load the package just installed"
done_step

step "the README's Python snippet under loomrun, beside only what pip installs with the package"
# A new user's fresh virtual environment holds the package and the requirements its metadata
# declares (and theirs), nothing more: a folder of links to exactly those, seen by a virtual
# environment without the test environment's packages.
closure="$scratch/closure"
"$py" - "$closure" <<'EOF' || fail "could not collect the package's requirements"
import importlib.metadata as md, os, re, sys
dest = sys.argv[1]
os.makedirs(dest)
todo, seen = ["loomccl"], set()
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in seen:
        continue
    seen.add(name)
    dist = md.distribution(name)
    for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
        if not os.path.lexists(os.path.join(dest, top)):
            os.symlink(dist.locate_file(top), os.path.join(dest, top))
    for req in dist.requires or []:
        if "extra ==" not in req:
            todo.append(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
EOF
"$VENV/bin/python" -m venv --without-pip "$scratch/clean"
clean="$scratch/clean/bin/python"
echo "$closure" >"$("$clean" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/closure.pth"
awk '/^```python$/ && !n++ { f = 1; next } f && /^```$/ { exit } f' README.md >"$scratch/snippet.py"
grep -q "loom.Comm.from_env" "$scratch/snippet.py" || fail "README's first Python snippet changed"
out=$("$BUILD/tools/loomrun" -n 2 --timeout 60 -- "$clean" -c "$(cat "$scratch/snippet.py")
print('sum', x.tolist())" 2>&1) || fail "the Python snippet failed: $out"
grep -q "^\[0\] sum \[0.0, 2.0, 4.0, 6.0\]" <<<"$out" || fail "the Python snippet: $out"
done_step

step "examples/torch_allreduce.py under torchrun --nproc-per-node=2"
if "$py" -c "import torch" 2>/dev/null; then
  out=$("$py" -m torch.distributed.run --nproc-per-node=2 examples/torch_allreduce.py 2>&1) ||
    fail "torch example failed: $out"
  for r in 0 1; do
    grep -q "rank $r: loom ok, all_reduce gave 3.0" <<<"$out" || fail "torch example: $out"
  done
else
  echo "(torch is not installed in $VENV: skipped)"
fi
done_step

echo "== newcomer check passed in $(since "$start") s"
