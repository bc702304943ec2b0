#!/bin/sh
# Prints a directory holding the CUDA headers the cuda build needs (cuda.h,
# nvrtc.h, cublasLt.h). The build links no CUDA library (kernels/cuda opens
# them with dlopen at run time), so headers are all it needs:
#   - /usr/include, when Debian's nvidia-cuda-dev is installed;
#   - else a cache ($COHORT_CUDA_HEADERS, default ~/.cache/cohort/cuda-headers)
#     filled by downloading nvidia-cuda-dev's .deb from the Debian archive
#     (non-free; apt-get download, nothing installed) and unpacking only its
#     usr/include. The .deb is about 780 MB.
# Progress goes to stderr; the directory is the only line on stdout.
set -eu
have() { [ -f "$1/cuda.h" ] && [ -f "$1/nvrtc.h" ] && [ -f "$1/cublasLt.h" ]; }
if have /usr/include; then
	echo /usr/include
	exit 0
fi
cache=${COHORT_CUDA_HEADERS:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort/cuda-headers}
if have "$cache/usr/include"; then
	echo "$cache/usr/include"
	exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ]; then
	$SUDO sed -i "/^Components:/{/ non-free\\( \\|\$\\)/!s/\$/ non-free/}" "$src"
elif ! grep -qs 'non-free' /etc/apt/sources.list; then
	echo 'deb http://deb.debian.org/debian bookworm main non-free' | $SUDO tee /etc/apt/sources.list.d/cohort-non-free.list >/dev/null
fi
$SUDO apt-get update -q -o Acquire::Retries=3 >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -q -o Acquire::Retries=3 nvidia-cuda-dev) >&2
mkdir -p "$cache"
dpkg-deb --fsys-tarfile "$tmp"/nvidia-cuda-dev_*.deb | tar -x -C "$cache" ./usr/include
have "$cache/usr/include" || { echo "cuda-headers: nvidia-cuda-dev has no cuda.h/nvrtc.h/cublasLt.h" >&2; exit 1; }
echo "$cache/usr/include"
