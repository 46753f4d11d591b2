#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make test` on a busy machine: while it runs, a `make -j2` build of this tree in another build
# folder (build-load/, from scratch each round) loops beside it, as a developer's own build or a
# CI neighbour would. The load stops when make test ends (or this script is stopped); the script
# returns make test's status and prints how long it took. docs/guide/testing.md.
#
#   scripts/test-under-load.sh                 make test beside the load
#   LOAD_DIR=build-x LOAD_JOBS=2 scripts/test-under-load.sh
#   LOAD_CMAKE_FLAGS=-DTANDEM_CUDA=OFF scripts/test-under-load.sh
#   scripts/test-under-load.sh test-tsan       any make target instead of test
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

load_dir=${LOAD_DIR:-build-load}
load_jobs=${LOAD_JOBS:-2}
target=${1:-test}
log=$(mktemp /tmp/tandem-load.XXXXXX)
rounds=$(mktemp /tmp/tandem-load-rounds.XXXXXX)

# The load, in a session of its own (setsid: its pid is the group's id), so that one signal
# stops the loop and the compilers it runs.
# shellcheck disable=SC2016 # expanded by the inner shell
setsid bash -c '
	cmake -S . -B "$1" ${LOAD_CMAKE_FLAGS:-} >/dev/null || exit 1
	while :; do
		cmake --build "$1" -j"$2" --clean-first >/dev/null || exit 1
		echo >>"$3"
	done' load "$load_dir" "$load_jobs" "$rounds" >"$log" 2>&1 &
load=$!

stop_load() {
	kill -TERM -- "-$load" 2>/dev/null
	wait "$load" 2>/dev/null
}
trap 'stop_load; rm -f "$log" "$rounds"' EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
echo "==== make $target, beside a make -j$load_jobs build of $load_dir/ looping (pid $load)"
make "$target"
status=$?
elapsed=$(($(date +%s) - start))

if ! kill -0 "$load" 2>/dev/null; then
	echo "the load stopped early (a failed configure or build?):"
	tail -n 20 "$log"
fi
stop_load
printf '==== make %s %s (status %d) under load in %d min %02d s; the load built %s/ %d times\n' \
	"$target" "$([ "$status" -eq 0 ] && echo passed || echo FAILED)" "$status" \
	$((elapsed / 60)) $((elapsed % 60)) "$load_dir" "$(wc -l <"$rounds")"
exit "$status"
