#!/usr/bin/env bash
# cmake --install into a scratch prefix; then build a VIPL program with
# pkg-config and with find_package(vipl), and run both.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib* | head -n1)
for f in include/vipl.h include/vipl_ext.h bin/vipl-info bin/vipl-pingpong; do
    test -e "$prefix/$f" || { echo "missing $f"; exit 1; }
done
test -e "$libdir/pkgconfig/vipl.pc" || { echo "missing vipl.pc"; exit 1; }
test -e "$libdir/cmake/vipl/viplConfig.cmake" || { echo "missing viplConfig.cmake"; exit 1; }
readelf -d "$libdir/libvipl.so" | grep -q 'SONAME.*libvipl.so.1' || { echo "no soname"; exit 1; }

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c99 -Wall -Werror -D_DEFAULT_SOURCE "$src/intel_style.c" $(pkg-config --cflags --libs vipl) -o "$prefix/intel_style"
LD_LIBRARY_PATH="$libdir" "$prefix/intel_style"

cmake -S "$src/consumer" -B "$prefix/consumer-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer-build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$prefix/consumer-build/consumer"
# Captured first: grep -q stops reading at the first match, and under
# pipefail the SIGPIPE that vipl-info then gets would fail the pipeline.
info=$("$prefix/bin/vipl-info")
grep -q "MaxTransferSize" <<<"$info" || { echo "vipl-info printed no attributes"; exit 1; }
echo "install: ok"
