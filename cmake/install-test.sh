#!/usr/bin/env bash
# The ctest test install_consumer: installs the build tree into a scratch prefix, then builds
# tests/install/consumer.c against that prefix the ways a user would, and runs each program:
# find_package(tandem) with tandem::tandem and tandem::tandem_static, then pkg-config.
# usage: install-test.sh CMAKE CC BUILD_DIR CONSUMER_DIR WORK_DIR LIBDIR [PREFIX_PATH, :-separated]
set -euo pipefail
cmake=$1 cc=$2 build=$3 src=$4 work=$5 libdir=$6 inherited=${7:-}
prefix=$work/prefix

rm -rf "$work"
echo "== cmake --install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null

echo "== find_package(tandem)"
"$cmake" -S "$src" -B "$work/build" -DCMAKE_C_COMPILER="$cc" \
	-DCMAKE_PREFIX_PATH="$prefix${inherited:+;${inherited//:/;}}" >/dev/null
"$cmake" --build "$work/build"
"$work/build/consumer_shared"
"$work/build/consumer_static"

echo "== pkg-config"
if ! command -v pkg-config >/dev/null; then
	echo "pkg-config not found: skipped"
	exit 0
fi
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
flags=$(pkg-config --cflags --libs tandem)
echo "pkg-config --cflags --libs tandem: $flags"
# $flags is a word list by design.
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -o "$work/consumer_pc" "$src/consumer.c" $flags
LD_LIBRARY_PATH=$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/consumer_pc"
