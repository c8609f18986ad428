#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds a consumer with find_package(Loom) (shared
# and static) and with pkg-config (shared and --static), then runs each under loomrun, and the
# installed loom-info, without LD_LIBRARY_PATH, also after moving the prefix.
set -euo pipefail
build=$1 source=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$source/tests/install/consumer" -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
pc_path="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig"
cc -o "$prefix/consumer_pc" "$source/tests/install/consumer/main.c" \
  $(PKG_CONFIG_PATH="$pc_path" pkg-config --cflags --libs loom)
# Static through pkg-config: --static lists what libloom.a needs (the CUDA runtime too).
libdir=$(PKG_CONFIG_PATH="$pc_path" pkg-config --variable=libdir loom)
cc -o "$prefix/consumer_pc_static" "$source/tests/install/consumer/main.c" "$libdir/libloom.a" \
  $(PKG_CONFIG_PATH="$pc_path" pkg-config --cflags --static --libs loom | sed 's/ -lloom / /')
# No LD_LIBRARY_PATH: installed tools and programs linked through CMake or pkg-config find
# libloom.so by their run-time path, from any prefix; moving the prefix keeps the tools working.
unset LD_LIBRARY_PATH
"$prefix/bin/loom-info" --version
"$prefix/bin/loom-info" --algos >/dev/null
for exe in "$prefix/consumer/consumer_cmake" "$prefix/consumer/consumer_static" "$prefix/consumer_pc" \
  "$prefix/consumer_pc_static"; do
  "$prefix/bin/loomrun" -n 2 --timeout 60 -- "$exe"
done
# The README's C example, as printed there, through pkg-config: every rank prints the sum.
sed -n '/^```c$/,/^```$/p' "$source/README.md" | sed '1d;$d' >"$prefix/readme_example.c"
cc -o "$prefix/readme_example" "$prefix/readme_example.c" \
  $(PKG_CONFIG_PATH="$pc_path" pkg-config --cflags --libs loom)
out=$("$prefix/bin/loomrun" -n 2 --timeout 60 -- "$prefix/readme_example")
echo "$out"
grep -q '^\[0\] rank 0: 2 4 6 8$' <<<"$out"
grep -q '^\[1\] rank 1: 2 4 6 8$' <<<"$out"
moved=$(mktemp -d)
trap 'rm -rf "$prefix" "$moved"' EXIT
cp -a "$prefix/bin" "$prefix/lib"* "$moved/"
"$moved/bin/loom-info" --algos >/dev/null
