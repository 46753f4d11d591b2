#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The ctest test install_consumer: installs the build tree into a scratch prefix, then builds
# tests/install/consumer.c against that prefix the ways a user would, and runs each program:
#   1. find_package(tandem): tandem::tandem and tandem::tandem_static, and tandem::mpi where
#      tandem was built with MPI (consumer_mpi, run as a single MPI process).
#   2. find_package(tandem) with the CUDA toolkit hidden from CMake and from PATH, as on a machine
#      without one: tandem::tandem still builds and runs. Against a CUDA build of tandem, also
#      that tandem::tandem_static is then left undefined and that COMPONENTS static fails,
#      naming the toolkit (so the toolkit was hidden indeed).
#   3. pkg-config: the line of docs/guide/install.md, with the rpath a prefix off the loader's
#      path needs, and the same without the rpath through LD_LIBRARY_PATH; where tandem was
#      built with MPI, that tandem_mpi.pc names MPI by its pkg-config module and no path (its
#      flags follow a stand-in module), and consumer_mpi.c built with tandem_mpi's flags, by cc
#      and by mpicc.
# usage: install-test.sh CMAKE CC BUILD_DIR CONSUMER_DIR WORK_DIR LIBDIR [PREFIX_PATH, :-separated]
set -euo pipefail
cmake=$1 cc=$2 build=$3 src=$4 work=$5 libdir=$6 inherited=${7:-}
prefix=$work/prefix
prefix_path="$prefix${inherited:+;${inherited//:/;}}"

fail() {
	echo "install-test: $*" >&2
	exit 1
}

rm -rf "$work"
echo "== cmake --install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null

echo "== find_package(tandem)"
"$cmake" -S "$src" -B "$work/build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix_path" \
	>/dev/null
"$cmake" --build "$work/build"
"$work/build/consumer_shared"
"$work/build/consumer_static"
# One MPI process without mpirun (a singleton), over shared memory only, root or not.
mpi_env=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "OMPI_MCA_btl=self,vader"
	OMPI_MCA_btl_vader_single_copy_mechanism=none)
mpi_build=0
if [ -e "$prefix/$libdir/cmake/tandem/tandemMpiTargets.cmake" ]; then
	mpi_build=1
	[ -x "$work/build/consumer_mpi" ] || fail "tandem was built with MPI, but no tandem::mpi"
	"${mpi_env[@]}" "$work/build/consumer_mpi"
fi

echo "== find_package(tandem) without the CUDA toolkit"
cuda_build=0
if grep -qs cudart_static "$prefix/$libdir/cmake/tandem/tandemStaticTargets.cmake"; then
	cuda_build=1
fi
# PATH without any folder that holds nvcc, and the variables that point at a toolkit unset or
# pointing nowhere; CMake's own search (FindCUDAToolkit also looks in /usr/local/cuda) is
# switched off.
nocuda_path=
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	if [ -n "$d" ] && [ ! -e "$d/nvcc" ]; then
		nocuda_path=${nocuda_path:+$nocuda_path:}$d
	fi
done
hide_cuda=(env -u CUDA_PATH -u CUDA_HOME -u CUDA_ROOT -u CUDACXX CUDAToolkit_ROOT=/nonexistent
	PATH="$nocuda_path")
nocuda_args=(-DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix_path"
	-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
if "${hide_cuda[@]}" sh -c 'command -v nvcc' >/dev/null; then
	fail "nvcc still on PATH: $nocuda_path"
fi
out=$("${hide_cuda[@]}" "$cmake" -S "$src" -B "$work/no-toolkit" "${nocuda_args[@]}" \
	-DCONSUMER_KINDS=shared) || {
	echo "$out"
	fail "find_package(tandem) failed without the CUDA toolkit"
}
echo "$out" | grep -E '^-- tandem(:| [0-9])'
if [ $cuda_build = 1 ] && echo "$out" | grep 'targets: ' | grep -q 'tandem::tandem_static'; then
	fail "a CUDA build's tandem::tandem_static was defined with the CUDA toolkit hidden"
fi
"${hide_cuda[@]}" "$cmake" --build "$work/no-toolkit"
if grep -rIilE --include=link.txt --include=build.ninja 'cudart|libcuda|/cuda' \
	"$work/no-toolkit"; then
	fail "consumer_shared's link line names CUDA"
fi
"$work/no-toolkit/consumer_shared"
if [ $cuda_build = 1 ]; then
	if out=$("${hide_cuda[@]}" "$cmake" -S "$src" -B "$work/no-toolkit-static" \
		"${nocuda_args[@]}" -DTANDEM_COMPONENTS=static 2>&1); then
		fail "find_package(tandem COMPONENTS static) succeeded with the CUDA toolkit hidden"
	fi
	echo "$out" | grep -q CUDAToolkit ||
		fail "find_package(tandem COMPONENTS static) failed without naming CUDAToolkit: $out"
	echo "COMPONENTS static without the toolkit: refused, naming CUDAToolkit (as it should)"
fi

echo "== pkg-config"
if ! command -v pkg-config >/dev/null; then
	echo "pkg-config not found: skipped"
	exit 0
fi
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
echo "pkg-config --cflags --libs tandem: $(pkg-config --cflags --libs tandem)"
# The line of docs/guide/install.md (as `cc app.c ...`): its rpath lets the program find
# libtandem.so in a prefix the loader does not search. $(...) unquoted on purpose: pkg-config's
# flags are a word list.
# shellcheck disable=SC2046
"$cc" -o "$work/consumer_rpath" "$src/consumer.c" $(pkg-config --cflags --libs tandem) \
	-Wl,-rpath,$(pkg-config --variable=libdir tandem)
# The loader resolves libtandem.so from the rpath: into the prefix, with LD_LIBRARY_PATH as
# inherited (it does not name the prefix).
found=$(ldd "$work/consumer_rpath" | awk '/libtandem\.so/ { print $3 }')
if [ -z "$found" ] || [ "$(realpath "$(dirname "$found")")" != "$(realpath "$prefix/$libdir")" ]
then
	fail "consumer_rpath loads libtandem.so from '$found', not from $prefix/$libdir"
fi
"$work/consumer_rpath"
# Without the rpath: LD_LIBRARY_PATH names the prefix.
# shellcheck disable=SC2046
"$cc" -o "$work/consumer_pc" "$src/consumer.c" $(pkg-config --cflags --libs tandem)
LD_LIBRARY_PATH=$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/consumer_pc"
if [ $mpi_build = 1 ]; then
	# tandem_mpi.pc names its MPI by pkg-config module (Requires.private), never by path: the file
	# holds no absolute path, --libs names no MPI folder, and the MPI flags that --cflags gives
	# come from the module found on PKG_CONFIG_PATH (a stand-in of that name, put first, pointing
	# elsewhere, replaces every one of them).
	pc=$prefix/$libdir/pkgconfig/tandem_mpi.pc
	module=$(pkg-config --variable=mpi_module tandem_mpi)
	[ -n "$module" ] || fail "tandem_mpi.pc names no MPI module (configuring said why): $(cat "$pc")"
	if grep -v '^#' "$pc" | grep -qE '(^|[ =:])/'; then
		fail "tandem_mpi.pc holds an absolute path: $(cat "$pc")"
	fi
	mpi_dirs=$(pkg-config --cflags-only-I --libs-only-L "$module" | tr ' ' '\n' | sed -n 's/^-[IL]//p')
	echo "pkg-config --cflags --libs tandem_mpi: $(pkg-config --cflags --libs tandem_mpi) (MPI: $module)"
	for d in $mpi_dirs; do
		if pkg-config --libs tandem_mpi | grep -qF -- "$d"; then
			fail "pkg-config --libs tandem_mpi names MPI's $d"
		fi
	done
	stand_in=$work/stand-in-pc
	mkdir -p "$stand_in"
	printf 'Name: %s\nDescription: stand-in\nVersion: 0\nLibs: -L/stand-in/lib -lmpi\nCflags: -I/stand-in/include\n' \
		"$module" >"$stand_in/$module.pc"
	flags=$(PKG_CONFIG_PATH=$stand_in:$PKG_CONFIG_PATH pkg-config --cflags --static --libs tandem_mpi)
	for d in $mpi_dirs; do
		if tr ' ' '\n' <<<"$flags" | grep -qE -- "^-[IL]$d\$"; then
			fail "tandem_mpi's flags keep MPI's $d with $module elsewhere: $flags"
		fi
	done
	grep -q -- "-I/stand-in/include" <<<"$flags" ||
		fail "tandem_mpi's flags do not follow the module $module: $flags"
	# The CMake package names MPI by target (MPI::MPI_C, found again by find_dependency).
	for d in $mpi_dirs; do
		if grep -rqF -- "$d" "$prefix/$libdir/cmake/tandem"; then
			fail "the CMake package names MPI's $d"
		fi
	done
	# A program that calls MPI names its MPI too: the module beside tandem_mpi, or mpicc.
	# shellcheck disable=SC2046
	"$cc" -o "$work/consumer_mpi_pc" "$src/consumer_mpi.c" \
		$(pkg-config --cflags --libs tandem_mpi "$module") \
		-Wl,-rpath,$(pkg-config --variable=libdir tandem_mpi)
	"${mpi_env[@]}" "$work/consumer_mpi_pc"
	if command -v mpicc >/dev/null; then
		# shellcheck disable=SC2046
		mpicc -o "$work/consumer_mpicc" "$src/consumer_mpi.c" \
			$(pkg-config --cflags --libs tandem_mpi) \
			-Wl,-rpath,$(pkg-config --variable=libdir tandem_mpi)
		"${mpi_env[@]}" "$work/consumer_mpicc"
	fi
fi
