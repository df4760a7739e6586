#!/bin/sh
# Installs the Debian packages the project needs (as root), or prints the
# exact command for a user who is not root.  CUDA comes from the toolkit
# under CUDA_HOME, not from Debian.
pkgs="build-essential pkg-config gawk mandoc gnuplot-nox cppcheck clang libclang-rt-14-dev
      libpmix-dev libhwloc-dev hwloc libopenmpi-dev openmpi-bin slurm-wlm munge python3"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "make deps: missing Debian packages; as root run: apt-get install$missing" >&2
	exit 1
fi
echo "make deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends $missing >&2
