# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2317
# Source this (bash), in the project root, to use the Open MPI that scripts/stage-mpi.sh staged in
# .devdeps/root (Debian 12's 4.1.4) instead of any installed one: mpicc/mpirun on PATH, the copy
# relocated by OPAL_PREFIX/PMIX_PREFIX..., and the settings for runs on one host over shared
# memory as root (btl self,vader, pml ob1, plm isolated: no ssh, oob on loopback, no CMA, no
# binding, oversubscribed).
#
#   export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
#   source scripts/mpi-env.sh
#   mpicc -O2 -o /tmp/mpi-hello scripts/mpi-hello.c && mpirun -np 2 /tmp/mpi-hello     # "mpi ok"
#   cmake -B build-mpi-staged -DTANDEM_MPI=ON $TANDEM_MPI_CMAKE_ARGS                   # FindMPI
#
# Every OMPI_MCA_* below only defaults: set it before sourcing to override (e.g.
# OMPI_MCA_btl_vader_single_copy_mechanism=cma where ptrace between ranks is allowed).
# TANDEM_DEVDEPS=DIR uses DIR instead of .devdeps. docs/design/mpi-staging.md.

_mpi_top=$(cd "$(dirname "${BASH_SOURCE[0]:-$PWD/scripts/mpi-env.sh}")/.." && pwd)
_mpi_root=${TANDEM_DEVDEPS:-$_mpi_top/.devdeps}/root
if [ ! -x "$_mpi_root/usr/bin/orterun" ] || [ ! -e "$_mpi_root/usr/lib/x86_64-linux-gnu/libmpi.so.40" ]; then
	echo "mpi-env.sh: no staged Open MPI in $_mpi_root (run scripts/stage-mpi.sh)" >&2
	unset _mpi_top _mpi_root
	return 1 2>/dev/null || exit 1
fi
_mpi_lib=$_mpi_root/usr/lib/x86_64-linux-gnu

# Relocation. Debian configured prefix=/usr, libdir and includedir under
# /usr/lib/x86_64-linux-gnu/openmpi, all relative to ${prefix} in libopen-pal, so OPAL_PREFIX moves
# them (libdir, pkglibdir = the MCA plugins, pkgdatadir = help files and mpicc's wrapper data);
# sysconfdir is an absolute /etc/openmpi, hence OPAL_SYSCONFDIR (the staged
# openmpi-mca-params.conf: Debian's defaults). PMIx (libpmix2, its own prefix
# /usr/lib/<arch>/pmix2) has libdir, datadir and sysconfdir absolute, and its
# pmix-mca-params.conf names the plugin directory absolutely: each moved by its variable (else
# mpirun prints help about directories and help files it cannot find).
export OPAL_PREFIX=$_mpi_root/usr
export OPAL_SYSCONFDIR=$_mpi_root/etc/openmpi
export PMIX_PREFIX=$_mpi_lib/pmix2
export PMIX_LIBDIR=$PMIX_PREFIX/lib PMIX_DATADIR=$PMIX_PREFIX/share PMIX_SYSCONFDIR=$PMIX_PREFIX/share
export PMIX_MCA_mca_base_component_path=$PMIX_PREFIX/lib/pmix
case ":$PATH:" in *":$_mpi_root/usr/bin:"*) ;; *) export PATH=$_mpi_root/usr/bin:$PATH ;; esac
case ":${LD_LIBRARY_PATH:-}:" in
*":$_mpi_lib:"*) ;;
*) export LD_LIBRARY_PATH=$_mpi_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
esac
# libhwloc.so.15 links libudev.so.1, which Ubuntu has; stage-mpi.sh keeps Debian's for where not.
if ! { /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; } | grep -q 'libudev\.so\.1 '; then
	case ":$LD_LIBRARY_PATH:" in
	*":${_mpi_root%/root}/mpi-fallback:"*) ;;
	*) export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:${_mpi_root%/root}/mpi-fallback ;;
	esac
fi

# mpirun as root without --allow-run-as-root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory only: the transports over UCX/libfabric/verbs/PSM are not staged at all.
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# One-sided: Debian's default, as its openmpi-mca-params.conf says (osc ucx is not staged anyway).
export OMPI_MCA_osc=${OMPI_MCA_osc:-^ucx,pt2pt}
# vader's single copy through CMA (process_vm_readv) needs ptrace rights between the ranks, which
# containers and VMs often refuse (a fatal "Read -1, expected ..., errno = 1"); copy in and out
# of the shared segment instead.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
# mpirun's own channel (oob tcp) on loopback only, whatever other interfaces there are.
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}
# More ranks than cores allowed (mpirun --oversubscribe), ranks not bound to one core each (tandem
# runs threads of its own; the project's MPI tests set the same).
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
# One host: mpirun starts the ranks itself (plm isolated). The default, plm rsh, wants an ssh or
# rsh on PATH even for local ranks, and mpirun fails at once without one ("plm_rsh_agent ... could
# not be found"); openssh-client is not staged.
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}

# CMake's FindMPI: MPI_HOME (read from the environment) points it at the staged mpicc, which it
# asks for flags (mpicc -showme:compile / -showme:link, relocated by OPAL_PREFIX), and mpiexec.
export MPI_HOME=$_mpi_root/usr
export TANDEM_MPI_CMAKE_ARGS="-DMPI_HOME=$MPI_HOME -DMPI_C_COMPILER=$MPI_HOME/bin/mpicc -DMPIEXEC_EXECUTABLE=$MPI_HOME/bin/mpiexec"
case ":${CMAKE_PREFIX_PATH:-}:" in
*":$_mpi_root/usr:"*) ;;
*) export CMAKE_PREFIX_PATH=$_mpi_root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH} ;;
esac
unset _mpi_top _mpi_root _mpi_lib
