# The head of the scripts that make one call on the GPU machine (gpu-check.sh, gpu-trace.sh),
# sourced by them: $OUT and its summary, log (a stamped heading, also to the summary), the logs
# packed into $OUT/logs.tgz at exit (the device tool brings back 8 files at most), and this tree
# built with CUDA in build-gpu ($A) beside the tree in .trees/$BEFORE, if given ($B, its
# tandem-bench only). Exits when this tree does not build.
set -uo pipefail
OUT=${OUT:-/tmp/tandem-out}
mkdir -p "$OUT"
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
S=$OUT/summary.txt
log() { printf '\n==== %s %s ====\n' "$(date -u +%T)" "$*" | tee -a "$S"; }
pack() {
	log finished
	# Traces (*.json) stay behind: each is tens of megabytes.
	tar czf /tmp/logs.tgz -C "$OUT" --exclude summary.txt --exclude '*.json' . &&
		find "$OUT" -mindepth 1 ! -name summary.txt -delete && mv /tmp/logs.tgz "$OUT/logs.tgz"
}
trap pack EXIT
A=build-gpu
B=${BEFORE:+.trees/$BEFORE/build-gpu}

log build
{ date -u; nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv; nproc; } >>"$S" 2>&1
# GPU_CMAKE_ARGS: more options for this tree's build (scripts/gpu-mpi.sh: tandem_mpi on).
# shellcheck disable=SC2086
(cmake -S . -B $A -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON ${GPU_CMAKE_ARGS:-} &&
	cmake --build $A -j12) \
	>"$OUT/build.log" 2>&1 &
pa=$! pb=
if [ -n "$B" ]; then
	(cmake -S .trees/$BEFORE -B $B -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON &&
		cmake --build $B -j4 --target tandem-bench) >"$OUT/build-before.log" 2>&1 &
	pb=$!
fi
wait $pa || { tail -40 "$OUT/build.log" | tee -a "$S"; exit 1; }
[ -z "$pb" ] || wait $pb || tail -20 "$OUT/build-before.log" | tee -a "$S"
