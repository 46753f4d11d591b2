#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The ctest test readme_programs: README.md stays a ten-minute read (at most 250 lines), and the
# programs it shows still compile and run as pasted, so that they cannot drift from the API.
#   - Each program is the ```c block right after a line `<!-- readme-program: NAME -->`; the
#     README must hold hello_cpu.c and hello_gpu.c, each with its compile line
#     (`cc -std=c11 NAME $(pkg-config --cflags --libs tandem)`).
#   - Each is built as that line builds it, against this tree's headers and libtandem.so instead
#     of an installed prefix, with warnings as errors (GCC: -Wjump-misses-init too, the README's
#     advice for resumable tasks), and run: hello_cpu must print "fib(25) = 75025"; hello_gpu
#     "cuda: correct" or "sim: correct" as it finds a GPU or not, and "sim: correct" under
#     TANDEM_GPU=sim.
# usage: readme-programs.sh CC README INCLUDE_DIR LIB_DIR WORK_DIR
set -euo pipefail
cc=$1 readme=$2 include=$3 libdir=$4 work=$5

fail() {
	echo "readme-programs: $*" >&2
	exit 1
}

lines=$(wc -l <"$readme")
[ "$lines" -le 250 ] || fail "README.md has $lines lines: at most 250 (a ten-minute read)"
echo "README.md: $lines lines (at most 250)"

rm -rf "$work"
mkdir -p "$work"
# Writes each marked program to WORK_DIR/NAME and prints NAME.
awk -v dir="$work" '
	/^<!-- readme-program: [A-Za-z0-9_.-]+ -->$/ { name = $3; state = 1; next }
	state == 1 && /^```c$/ { state = 2; out = dir "/" name; printf "" >out; next }
	state == 1 { print "the line after the marker of " name " is not a ```c fence" >"/dev/stderr"; exit 1 }
	state == 2 && /^```$/ { close(out); print name; state = 0; next }
	state == 2 { print >out }
	END { if (state == 2) { print name ": no closing fence" >"/dev/stderr"; exit 1 } }
' "$readme" >"$work/programs" || fail "could not extract the programs"

flags=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
if "$cc" -Wjump-misses-init -Werror -x c -c -o /dev/null /dev/null 2>/dev/null; then
	flags+=(-Wjump-misses-init)
fi

for name in hello_cpu.c hello_gpu.c; do
	grep -qx "$name" "$work/programs" || fail "no program marked <!-- readme-program: $name -->"
	grep -qF "cc -std=c11 $name \$(pkg-config --cflags --libs tandem)" "$readme" ||
		fail "no compile line for $name (cc -std=c11 $name \$(pkg-config --cflags --libs tandem))"
	echo "== $name"
	"$cc" "${flags[@]}" -I"$include" -o "$work/${name%.c}" "$work/$name" -L"$libdir" -ltandem \
		-Wl,-rpath,"$libdir" || fail "$name does not compile"
done

# run PROGRAM EXPECTED [ENV...]: runs it, prints its output, fails unless it exits 0 and its last
# line matches EXPECTED (an extended regular expression).
run() {
	local prog=$1 expect=$2 out rc=0
	shift 2
	out=$(env "$@" "$work/$prog") || rc=$?
	echo "$out"
	[ $rc = 0 ] || fail "$prog ${*:+($*) }exited with status $rc"
	tail -n 1 <<<"$out" | grep -qxE "$expect" || fail "$prog ${*:+($*) }did not print '$expect'"
}
run hello_cpu 'fib\(25\) = 75025'
run hello_gpu '(cuda|sim): correct'
run hello_gpu 'sim: correct' TANDEM_GPU=sim
echo "readme-programs: both programs build and run as pasted"
