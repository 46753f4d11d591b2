#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Stage Debian 12's Open MPI 4.1.4 into .devdeps/root, next to what prepare-deps.sh staged, so that
# a machine with no package registry (the GPU machine: Ubuntu 24.04) can build MPI programs
# (mpicc, CMake's find_package(MPI COMPONENTS C)) and run them with mpirun -np N on one host,
# over shared memory (btl self,vader), as root. docs/design/mpi-staging.md says what and why.
#
#   ../shared/device/prepare-deps.sh     # first: it recreates .devdeps from scratch
#   scripts/stage-mpi.sh                 # then, here in the project root (adds, deletes nothing
#                                        # of prepare-deps.sh's; run it again after each prepare)
#   # take .devdeps along; on the GPU machine, in the project root:
#   export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
#   source scripts/mpi-env.sh            # PATH, OPAL_PREFIX, OMPI_MCA_* ...
#   mpicc -o hello scripts/mpi-hello.c && mpirun -np 2 ./hello
#
# Only the packages Open MPI needs that Ubuntu 24.04 with gcc may lack (their closure, from
# apt-cache depends --recurse, less what a base system has: libc6, libgcc-s1, libstdc++6, zlib1g):
#   libopenmpi3 openmpi-bin openmpi-common libopenmpi-dev    Open MPI: libraries, plugins,
#       mpirun/orted/mpicc, help and wrapper data, headers
#   libpmix2 libmunge2          PMIx (the only pmix component, ext3x, links it; it links munge)
#   libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15   linked by libopen-pal/-rte/libmpi
# Left out: UCX, libfabric, verbs, PSM/PSM2, libnl (only MCA plugins link them: those plugins are
# removed here, so they can't fail to load and warn), the -dev packages of the libraries above
# (only static linking wants them), gfortran and the Fortran/Java bindings, openssh-client (one
# host). libudev1 (libhwloc15 links it; Ubuntu normally has it) goes to .devdeps/mpi-fallback,
# which scripts/mpi-env.sh puts on LD_LIBRARY_PATH only where the system has no libudev.so.1.
# EXTRA_MPI_DEBS="pkg ..." adds packages.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
root=.devdeps/root
multi=usr/lib/x86_64-linux-gnu
[ -d "$root/usr" ] || { echo "no $root/usr: run ../shared/device/prepare-deps.sh first" >&2; exit 1; }

read -ra pkgs <<<"libopenmpi3 openmpi-bin openmpi-common libopenmpi-dev libpmix2 libmunge2 \
	libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 ${EXTRA_MPI_DEBS:-}"
fallback_pkgs=(libudev1)
# Libraries a minimal Ubuntu 24.04 with gcc has anyway (never staged, assumed present).
base_libs=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 "
base_libs+="libz.so.1 libstdc++.so.6 libgcc_s.so.1 libudev.so.1 "

work=$(mktemp -d /tmp/stage-mpi.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/fdebs" "$work/root" "$work/fallback"
before=$(du -sk .devdeps | cut -f1)

compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || apt-get update -qq
(cd "$work/debs" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) ||
	{ echo "apt-get download failed: ${pkgs[*]}" >&2; exit 1; }
(cd "$work/fdebs" && apt-get download "${fallback_pkgs[@]}" >/dev/null 2>&1) ||
	{ echo "apt-get download failed: ${fallback_pkgs[*]}" >&2; exit 1; }
for f in "$work"/debs/*.deb; do dpkg -x "$f" "$work/root"; done
for f in "$work"/fdebs/*.deb; do dpkg -x "$f" "$work/fallback"; done
w=$work/root

# What the Debian alternatives system would have made (postinst, not in the packages).
for n in mpicc mpirun mpiexec mpicxx mpic++; do ln -sfn "$n.openmpi" "$w/usr/bin/$n"; done
ln -sfn openmpi/lib/libmpi.so "$w/$multi/libmpi.so"
ln -sfn ../../lib/x86_64-linux-gnu/openmpi/include "$w/usr/include/x86_64-linux-gnu/mpi"
# pkg-config files: relocatable through ${pcfiledir} (Debian's say prefix=/usr).
for pc in "$w/$multi"/pkgconfig/o*.pc "$w/$multi"/openmpi/lib/pkgconfig/*.pc; do
	[ -e "$pc" ] || continue
	rel=$(realpath --relative-to="$(dirname "$(realpath "$pc")")" "$w/usr")
	sed -i "s|^prefix=/usr\$|prefix=\${pcfiledir}/$rel|" "$(realpath "$pc")"
done

# Not needed to build C/C++ MPI programs or to run them: documentation, Fortran modules (a
# second copy of the headers), Java headers, the headers of Open MPI's internals (for building
# MCA components; mpi.h includes none of them).
rm -rf "$w/usr/share/doc" "$w/usr/share/man" "$w/usr/share/lintian" "$w/$multi/fortran" \
	"$w/$multi/openmpi/include/openmpi/"{opal,orte,oshmem} "$w/$multi/openmpi/include/openshmem"
find "$w/$multi/openmpi/include/openmpi/ompi" -mindepth 1 -maxdepth 1 ! -name mpi -exec rm -rf {} +
find "$w/$multi/openmpi/include/openmpi/ompi/mpi" -mindepth 1 -maxdepth 1 ! -name cxx -exec rm -rf {} +

# Shared objects that link a library neither staged nor in a base system (UCX, libfabric, verbs,
# PSM, libnl, libgfortran, libjvm...) could never load there: remove them (MCA plugins so
# removed are simply not found, with no warning), then the links left dangling. Repeat until none.
have() {  # a library's file name: staged here or by prepare-deps.sh, or in the base system
	case "$base_libs" in *" $1 "*) return 0 ;; esac
	[ -n "$(find "$w/usr/lib" "$root/usr/lib" -name "$1" -print -quit 2>/dev/null)" ]
}
removed=""
while :; do
	gone=0
	while IFS= read -r so; do
		readelf -h "$so" 2>/dev/null | grep -q 'Type:.*DYN' || continue
		for lib in $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
			if ! have "$lib"; then
				removed+=" ${so#"$w"/}(needs:$lib)"; rm -f "$so"; gone=1; break
			fi
		done
	done < <(find "$w/usr/lib" -type f -name '*.so*')
	find "$w" -xtype l -delete
	[ $gone = 1 ] || break
done
echo "removed (unloadable without packages not staged):"
for r in $removed; do echo "  $r"; done
for f in libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40 libpmix.so.2 openmpi/lib/openmpi3/mca_pmix_ext3x.so \
	openmpi/lib/openmpi3/mca_btl_vader.so openmpi/lib/openmpi3/mca_pml_ob1.so; do
	[ -e "$w/$multi/$f" ] || { echo "stage-mpi.sh: $f was removed: a library is missing" >&2; exit 1; }
done

add=$(du -sk "$w" | cut -f1)
cp -a "$w/." "$root/"
mkdir -p .devdeps/mpi-fallback
cp -a "$work/fallback/$multi/". .devdeps/mpi-fallback/
for f in "$work"/debs/*.deb "$work"/fdebs/*.deb; do dpkg-deb -f "$f" Package Version | paste -sd' '; done \
	> .devdeps/mpi-packages.txt
after=$(du -sk .devdeps | cut -f1)
echo "staged: $(awk '{print $2 "=" $4}' .devdeps/mpi-packages.txt | paste -sd' ')"
echo "Open MPI files: $((add / 1024)) MiB; .devdeps grew $(((after - before) / 1024)) MiB" \
	"to $((after / 1024)) MiB ($(du -sh --apparent-size .devdeps | cut -f1) apparent)"
echo "on the GPU machine, after exporting CMAKE_PREFIX_PATH and LD_LIBRARY_PATH: source scripts/mpi-env.sh"
