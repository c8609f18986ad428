#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds a consumer with find_package(Loom) (shared
# and static) and with pkg-config, then runs each under loomrun.
set -euo pipefail
build=$1 source=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$source/tests/install/consumer" -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig" \
  cc -o "$prefix/consumer_pc" "$source/tests/install/consumer/main.c" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs loom)
export LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64:${LD_LIBRARY_PATH:-}"
for exe in "$prefix/consumer/consumer_cmake" "$prefix/consumer/consumer_static" "$prefix/consumer_pc"; do
  "$prefix/bin/loomrun" -n 2 --timeout 60 -- "$exe"
done
