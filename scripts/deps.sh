#!/usr/bin/env bash
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

# Each check: required|optional, Debian package, test. Optional parts only turn off a step
# (oneTBB baseline, valgrind run, format check, cppcheck, pkg-config half of the install test).
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
