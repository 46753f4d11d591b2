#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The ctest test bench_usage: `tandem-bench --help` lists every subcommand (those named here
# among them), each with a line of its own and on a synopsis line, and tandem-bench accepts
# every name it lists; `tandem-bench fib --impl` lists every implementation, libgomp and libomp
# among them; and the subcommands that read their options with bench_next_opt refuse bad ones,
# with status 2 and the message that says why.
# usage: check-usage.sh TANDEM_BENCH
set -euo pipefail
bench=$1

fail() {
	echo "bench_usage: $*" >&2
	exit 1
}

help=$("$bench" --help)
# The names under "subcommands:", one per line.
listed=$(awk '/^subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on { exit }' \
	<<<"$help")
for name in fib skynet spawn idle all gpu-latency gpu-throughput gpu-idle topology pinned \
	pipeline gpu-scaling gpu-graph gpu-dsched; do
	grep -qx -- "$name" <<<"$listed" || fail "--help does not list $name"
done
for name in $listed; do
	grep -qE "^(usage:| +) tandem-bench ([a-z-]+\|)*${name}[ |]" <<<"$help" ||
		fail "no synopsis line of --help names $name"
	out=$("$bench" "$name" --help 2>&1) || true
	if grep -q "unknown subcommand" <<<"$out"; then
		fail "--help lists $name, which tandem-bench refuses: $out"
	fi
done
# A name it does not know is refused, with the message looked for above.
out=$("$bench" no-such-subcommand 2>&1) && fail "no-such-subcommand was accepted"
grep -q "unknown subcommand" <<<"$out" || fail "an unknown subcommand is refused otherwise: $out"
# refuses CMD MESSAGE ARGS...: tandem-bench CMD ARGS exits with status 2, saying MESSAGE.
refuses() {
	local cmd=$1 msg=$2 rc=0
	shift 2
	out=$("$bench" "$cmd" "$@" 2>&1) || rc=$?
	[ "$rc" = 2 ] || fail "$cmd $*: status $rc, not 2: $out"
	grep -q -- "$msg" <<<"$out" || fail "$cmd $*: no '$msg' in: $out"
}
for cmd in gpu-graph gpu-dsched; do
	refuses "$cmd" "unknown option '--bogus'" --backend sim --bogus 1
	refuses "$cmd" "unknown option '--bogus'" --backend=sim --bogus=1
	refuses "$cmd" "--rounds needs a value" --backend sim --rounds
	refuses "$cmd" "bad value '0' for --rounds" --backend sim --rounds=0
	refuses "$cmd" "bad value 'x' for --rounds" --backend sim --rounds x
	refuses "$cmd" "unexpected argument 'stray'" --backend sim stray
done
# `--impl` alone lists the implementations, both OpenMP runtimes among them (each named, had
# here or not); a name not among them is refused.
impls=$("$bench" fib --impl) || fail "fib --impl: status $?"
for name in tandem tbb libgomp libomp; do
	grep -qE "^  $name " <<<"$impls" || fail "fib --impl does not list $name: $impls"
done
refuses fib "unknown implementation 'bogus'" --impl tandem,bogus
refuses gpu-dsched "bad value 'bogus' for --scope" --backend sim --scope bogus
refuses gpu-dsched "bad value '100' for --capacity" --backend sim --capacity 100
echo "tandem-bench --help lists $(wc -w <<<"$listed") subcommands, each accepted"
