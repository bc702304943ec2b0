#!/bin/sh
# Finds (or fetches) what the cuda build needs from CUDA on a machine with no
# GPU and no CUDA installed, and prints one directory on stdout:
#   cuda-headers.sh        the headers: cuda.h, nvrtc.h, cublasLt.h;
#   cuda-headers.sh --lib  the stub libcuda.so to link against (-L).
# The cuda build links libcuda (through gorgonia.org/cu); its soname,
# libcuda.so.1, is the same on every driver, and the GPU host's driver
# supplies the real one at run time. NVRTC, cuBLASLt and NCCL are opened
# with dlopen at run time (nccl/dynload), so nothing else is linked.
# Where they come from:
#   - /usr/include and /usr/lib/<multiarch>/stubs, when Debian's
#     nvidia-cuda-dev is installed;
#   - else a cache ($COHORT_CUDA_HEADERS, default
#     ~/.cache/cohort/cuda-headers) filled from nvidia-cuda-dev's .deb
#     (Debian non-free; apt-get download, nothing installed; about 780 MB, or
#     $COHORT_CUDA_DEB when it names an already downloaded copy), of which
#     only usr/include and stubs/libcuda.so are unpacked.
# Progress goes to stderr; the directory is the only line on stdout.
set -eu
want=include
case "${1:-}" in
--lib) want=lib ;;
"") ;;
*) echo "usage: $0 [--lib]" >&2; exit 2 ;;
esac
ma=$(gcc -print-multiarch 2>/dev/null || true)
[ -n "$ma" ] || ma=x86_64-linux-gnu
have() { [ -f "$1/usr/include/cuda.h" ] && [ -f "$1/usr/include/nvrtc.h" ] && [ -f "$1/usr/include/cublasLt.h" ] &&
	[ -f "$1/usr/lib/$ma/stubs/libcuda.so" ]; }
show() {
	if [ "$want" = lib ]; then echo "$1/usr/lib/$ma/stubs"; else echo "$1/usr/include"; fi
	exit 0
}
if have ""; then show ""; fi
cache=${COHORT_CUDA_HEADERS:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort/cuda-headers}
if have "$cache"; then show "$cache"; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
deb=${COHORT_CUDA_DEB:-}
if [ -z "$deb" ]; then
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	src=/etc/apt/sources.list.d/debian.sources
	if [ -f "$src" ]; then
		$SUDO sed -i "/^Components:/{/ non-free\\( \\|\$\\)/!s/\$/ non-free/}" "$src"
	elif ! grep -qs 'non-free' /etc/apt/sources.list; then
		echo 'deb http://deb.debian.org/debian bookworm main non-free' | $SUDO tee /etc/apt/sources.list.d/cohort-non-free.list >/dev/null
	fi
	$SUDO apt-get update -q -o Acquire::Retries=3 >&2
	(cd "$tmp" && apt-get download -q -o Acquire::Retries=3 nvidia-cuda-dev) >&2
	deb=$(ls "$tmp"/nvidia-cuda-dev_*.deb)
fi
mkdir -p "$cache"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$cache" ./usr/include "./usr/lib/$ma/stubs/libcuda.so"
have "$cache" || { echo "cuda-headers: $deb has no cuda.h/nvrtc.h/cublasLt.h or usr/lib/$ma/stubs/libcuda.so" >&2; exit 1; }
show "$cache"
