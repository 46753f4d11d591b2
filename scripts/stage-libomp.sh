#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds tandem-bench-libomp here (perf/libomp: perf/bench_omp.c built by clang against LLVM's
# libomp, the libomp baseline that tandem-bench runs as a child) and stages it into
# .devdeps/libomp/ with the libomp.so.5 it loads, for a machine without clang or a package
# registry (the GPU machine: Ubuntu 24.04, gcc only). The program's RUNPATH starts with $ORIGIN,
# so it loads the copy beside it; tandem-bench finds it through TANDEM_BENCH_LIBOMP, which
# scripts/gpu-cpu-bench.sh (and the other scripts/gpu-*.sh) set where .devdeps/libomp exists.
#
#   ../shared/device/prepare-deps.sh     # first, if at all: it recreates .devdeps from scratch
#   scripts/stage-libomp.sh              # then, here in the project root
#   # take .devdeps along (carry [".devdeps"]); there: bash scripts/gpu-cpu-bench.sh
#
# Needs Debian's clang and libomp-dev (scripts/deps.sh installs them, as optional parts).
# CLANG=clang-N picks another clang.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
clang=${CLANG:-clang}
dest=.devdeps/libomp
build="build-libomp"
command -v "$clang" >/dev/null ||
	{ echo "stage-libomp.sh: no $clang: apt-get install clang libomp-dev (scripts/deps.sh)" >&2; exit 1; }

rm -rf "$build"
cmake -S perf/libomp -B "$build" -DCMAKE_C_COMPILER="$clang" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" >/dev/null
rm -rf "$dest"
mkdir -p "$dest"
cp "$build/tandem-bench-libomp" "$dest/"
lib=$(ldd "$dest/tandem-bench-libomp" | awk '/libomp\.so/ { print $3 }')
[ -n "$lib" ] || { echo "stage-libomp.sh: tandem-bench-libomp links no libomp.so" >&2; exit 1; }
cp -L "$lib" "$dest/libomp.so.5"

# It must load the copy, and the copy only what a base system has.
loaded=$(ldd "$dest/tandem-bench-libomp" | awk '/libomp\.so/ { print $3 }')
[ "$(realpath "$loaded")" = "$(realpath "$dest/libomp.so.5")" ] ||
	{ echo "stage-libomp.sh: it loads $loaded, not the copy beside it" >&2; exit 1; }
for so in "$dest/tandem-bench-libomp" "$dest/libomp.so.5"; do
	for need in $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		case $need in
		libomp.so.5 | libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | \
			ld-linux-x86-64.so.2) ;;
		*) echo "stage-libomp.sh: $so needs $need, which a base system may lack" >&2; exit 1 ;;
		esac
	done
done
out=$("$dest/tandem-bench-libomp" fib 2 15 2)
[ "$(wc -l <<<"$out")" = 2 ] || { echo "stage-libomp.sh: the staged program failed: $out" >&2; exit 1; }
{
	echo "built $(date -u +%F) from $(git rev-parse --short HEAD) by $("$clang" --version | head -1)"
	echo "libomp.so.5 from $(realpath "$lib") ($(dpkg -S "$(realpath "$lib")" 2>/dev/null | cut -d: -f1))"
} >"$dest/README"
cat "$dest/README"
echo "staged: $(du -sh "$dest" | cut -f1) in $dest; carry .devdeps"
