#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what building and testing tandem needs, and only what is missing. Headers are looked
# for in /usr/include, /usr/local/include and each $CMAKE_PREFIX_PATH entry's include/, so a
# staged prefix (.devdeps/root/usr) counts. Installs through apt-get as root; otherwise, or where
# apt-get cannot reach a registry, it lists what is missing and fails only for required parts.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }
have_header() {
	local d
	IFS=':;' read -r -a prefixes <<<"${CMAKE_PREFIX_PATH:-}"
	for d in /usr/include /usr/local/include "${prefixes[@]/%//include}"; do
		[ -e "$d/$1" ] && return 0
	done
	return 1
}
have_tbb() { have_header oneapi/tbb/task_group.h || have_header tbb/task_group.h; }
# Debian's Open MPI keeps mpi.h in a multiarch folder (/usr/include/x86_64-linux-gnu/mpi/).
have_mpi_header() { have_header mpi.h || compgen -G '/usr/include/*/mpi/mpi.h' >/dev/null; }
# Debian's matplotlib is for Debian's python3 (scripts/tandem-plot runs under it if need be).
have_matplotlib() { /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; }
# LLVM's OpenMP runtime, as clang links it (-fopenmp).
have_libomp() {
	have clang && printf '#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' |
		clang -fopenmp -x c - -o /dev/null >/dev/null 2>&1
}

# Each check: required|optional, Debian package, test. Optional parts only turn off a step
# (oneTBB baseline, valgrind run, format check, cppcheck, pkg-config half of the install test,
# make plots, the speedscope test, tandem_mpi with its tests and example: Open MPI's headers and
# library, and mpirun to run them; clang with LLVM's libomp: tandem-bench's libomp baseline,
# perf/tandem-bench-libomp).
checks=(
	"required libck-dev        have_header ck_ec.h"
	"required libcriterion-dev have_header criterion/criterion.h"
	"required libc6-dev        have_header stdio.h"
	"required cmake            have cmake"
	"required make             have make"
	"required gcc              have cc"
	"required g++              have c++"
	"optional libtbb-dev       have_tbb"
	"optional pkg-config       have pkg-config"
	"optional clang-format     have clang-format"
	"optional cppcheck         have cppcheck"
	"optional valgrind         have valgrind"
	"optional python3-matplotlib have_matplotlib"
	"optional chromium         have chromium"
	"optional libopenmpi-dev   have_mpi_header"
	"optional openmpi-bin      have mpirun"
	"optional clang            have clang"
	"optional libomp-dev       have_libomp"
)
scan() {
	missing=() missing_required=()
	local level pkg test
	for c in "${checks[@]}"; do
		read -r level pkg test <<<"$c"
		# $test is a command and its argument.
		# shellcheck disable=SC2086
		$test && continue
		missing+=("$pkg")
		[ "$level" = required ] && missing_required+=("$pkg")
	done
	return 0
}

# The trace viewer test (tests/trace_speedscope.js): speedscope and playwright-core from npm, at
# these versions, into build-npm/ (ignored, kept by make clean), where npm exists.
SPEEDSCOPE=1.25.0 PLAYWRIGHT=1.65.1
npm_tools() {
	local dir
	dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-npm"
	have npm || { echo "deps: no npm: the speedscope test is skipped"; return 0; }
	if [ "$(npm_version "$dir" speedscope)" = "$SPEEDSCOPE" ] &&
		[ "$(npm_version "$dir" playwright-core)" = "$PLAYWRIGHT" ]; then
		return 0
	fi
	echo "deps: installing speedscope@$SPEEDSCOPE playwright-core@$PLAYWRIGHT into $dir"
	mkdir -p "$dir"
	npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error \
		"speedscope@$SPEEDSCOPE" "playwright-core@$PLAYWRIGHT" >/dev/null ||
		echo "deps: npm install failed: the speedscope test is skipped" >&2
}
npm_version() {
	sed -n 's/^  "version": "\(.*\)",$/\1/p' "$1/node_modules/$2/package.json" 2>/dev/null
}
npm_tools

scan
[ ${#missing[@]} -eq 0 ] && { echo "deps: everything present"; exit 0; }
if [ "$(id -u)" = 0 ] && have apt-get; then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt_opts=(-q -o Acquire::Retries=1 -o Acquire::http::Timeout=20)
	if apt-get "${apt_opts[@]}" update >/dev/null &&
		apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}"; then
		scan
	else
		echo "deps: apt-get failed" >&2
	fi
fi
[ ${#missing[@]} -eq 0 ] && { echo "deps: everything present"; exit 0; }
echo "deps: missing (install them, or add their prefix to CMAKE_PREFIX_PATH): ${missing[*]}" >&2
if [ ${#missing_required[@]} -gt 0 ]; then
	echo "deps: required: ${missing_required[*]}" >&2
	exit 1
fi
echo "deps: only optional parts are missing; the steps that need them are skipped"
