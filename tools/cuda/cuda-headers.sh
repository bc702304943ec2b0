#!/bin/sh
# Finds (or fetches) what the cuda build needs from CUDA on a machine with no
# GPU and no CUDA installed, and prints one directory on stdout:
#   cuda-headers.sh        the headers: cuda.h, nvrtc.h, cublasLt.h and the
#                          12 headers they include;
#   cuda-headers.sh --lib  a libcuda.so to link against (-L).
# The cuda build links libcuda (through gorgonia.org/cu); its soname,
# libcuda.so.1, is the same on every driver, and the GPU host's driver
# supplies the real one at run time. NVRTC, cuBLASLt and NCCL are opened
# with dlopen at run time (nccl/dynload), so nothing else is linked.
# Where they come from:
#   - /usr/include and /usr/lib/<multiarch>/stubs, when Debian's
#     nvidia-cuda-dev is installed;
#   - else a cache ($COHORT_CUDA_HEADERS, default
#     ~/.cache/cohort/cuda-headers) filled from Debian non-free (nothing is
#     installed):
#       headers: nvidia-cuda-dev's .deb is about 780 MB, but the headers come
#         first in it, so the .deb is streamed over HTTPS and the stream stops
#         once they are unpacked (a few MB). They are checked against the
#         SHA-256 sums below; for another version of the package, or on any
#         mismatch, the whole .deb is downloaded with apt-get (which verifies
#         it) and the same headers are taken from it;
#       libcuda.so: the driver's libcuda.so.1 from libcuda1 (a 3 MB .deb,
#         verified by apt-get), copied as libcuda.so; nvidia-cuda-dev's stub
#         sits at the end of its .deb, so it is only used when the whole
#         .deb was downloaded anyway.
#     $COHORT_CUDA_DEB naming an already downloaded nvidia-cuda-dev .deb
#     takes both from it instead.
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
stub=usr/lib/$ma/stubs/libcuda.so
# The headers the cuda build compiles (gcc -M of cuda.h, nvrtc.h and
# cublasLt.h), with their SHA-256 in nvidia-cuda-dev $pinned.
pinned=11.8.89~11.8.0-5~deb12u1
sums='f7f2737644444daf8d25172aaa86f788927b6ceb168a804eeeac92374a18b00a  usr/include/crt/host_defines.h
5a9720a5a88f854fe8f6c4cf31c353119bb25c321cf31deccf8754592ced2f68  usr/include/cuComplex.h
f8b893fb21c1793eb31bacdffabb0ece66c4d161649966b525e88204eca4984e  usr/include/cublasLt.h
689e1bf2d90cb507c6801437d8dcf6ab839a5f16b2ca7a425020d454c5d53a90  usr/include/cublas_api.h
55639151a971a10c28d627a98dcd406c6320a5b4e5b67dd9d229056ed5c8e045  usr/include/cuda.h
0ae575d75df3e3efbf40f7431f57958068016e5fd3b92bf79af50040faa08f15  usr/include/cuda_bf16.h
61856a6d67eab380e2a1dbcddfa1a7468aa43440325bc30801517a35e51c096d  usr/include/cuda_bf16.hpp
df73ba39574f3715e539b383c8889b97473972e7b5007460d2067c8b56e88a5a  usr/include/cuda_fp16.h
f948ef31bd8bda0147a5eadd87198ea2eb442f9180d147f9c2646f7d832ac8a0  usr/include/cuda_fp16.hpp
43179dae2c816ffdd575e58d819eaa0272e2bcadeba2d9fa10041e2d8036c724  usr/include/driver_types.h
c89be82c5c39a01751aa442012121a5feb2db0c1a5c505bdb19a09e2f6d01f02  usr/include/library_types.h
db31915b517d8df60bc9ba9dc0ce51c49ec464fe5a67372004672caa56dbbcab  usr/include/nvrtc.h
aee545469f118a8591f66aef2d75fd4b5e59489f7bc2a4e303c39108928acce4  usr/include/vector_types.h'
headers=$(echo "$sums" | awk '{print "./" $2}')

haveinc() { [ -f "$1/usr/include/cuda.h" ] && [ -f "$1/usr/include/nvrtc.h" ] && [ -f "$1/usr/include/cublasLt.h" ]; }
havelib() { [ -f "$1/$stub" ]; }
show() {
	if [ "$want" = lib ]; then echo "$1/usr/lib/$ma/stubs"; else echo "$1/usr/include"; fi
	exit 0
}
if haveinc "" && havelib ""; then show ""; fi
cache=${COHORT_CUDA_HEADERS:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort/cuda-headers}
if haveinc "$cache" && havelib "$cache"; then show "$cache"; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$cache"

# fromdeb DEB MEMBER...: unpacks members of a downloaded .deb into the cache.
fromdeb() {
	deb=$1
	shift
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$cache" "$@"
}

if [ -n "${COHORT_CUDA_DEB:-}" ]; then
	# shellcheck disable=SC2086 # $headers is a list of names without spaces
	fromdeb "$COHORT_CUDA_DEB" $headers "./$stub"
else
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	src=/etc/apt/sources.list.d/debian.sources
	if [ -f "$src" ]; then
		$SUDO sed -i "/^Components:/{/ non-free\\( \\|\$\\)/!s/\$/ non-free/}" "$src"
	elif ! grep -qs 'non-free' /etc/apt/sources.list; then
		echo 'deb http://deb.debian.org/debian bookworm main non-free' | $SUDO tee /etc/apt/sources.list.d/cohort-non-free.list >/dev/null
	fi
	$SUDO apt-get update -q -o Acquire::Retries=3 >&2
	if ! haveinc "$cache"; then
		# apt-get download --print-uris: 'URI' FILE SIZE SHA256:...
		uri=$(apt-get download --print-uris nvidia-cuda-dev | awk '{gsub(/\047/, "", $1); print $1}')
		version=$(apt-cache policy nvidia-cuda-dev | awk '/Candidate:/ {print $2}')
		streamed=no
		if [ "$version" = "$pinned" ] && command -v curl >/dev/null; then
			https=$(echo "$uri" | sed 's|^http://deb\.debian\.org/|https://deb.debian.org/|')
			echo "cuda-headers: streaming the headers from the start of $https" >&2
			# tar stops after the last named member (--occurrence); dpkg-deb
			# and curl then stop on the closed pipe, which they report.
			# shellcheck disable=SC2086
			(curl -fsSL --proto '=https' "$https" | dpkg-deb --fsys-tarfile /dev/stdin 2>/dev/null |
				tar -x -C "$tmp" --occurrence $headers) 2>/dev/null || true
			if (cd "$tmp" && echo "$sums" | sha256sum -c --quiet --status -); then
				(cd "$tmp" && tar -c usr) | tar -x -C "$cache"
				streamed=yes
			else
				echo "cuda-headers: the streamed headers do not match their SHA-256; downloading the whole .deb" >&2
			fi
		fi
		if [ "$streamed" = no ]; then
			echo "cuda-headers: downloading nvidia-cuda-dev $version (about 780 MB) for its headers and stub libcuda.so" >&2
			(cd "$tmp" && apt-get download -q -o Acquire::Retries=3 nvidia-cuda-dev) >&2
			# shellcheck disable=SC2086
			fromdeb "$(ls "$tmp"/nvidia-cuda-dev_*.deb)" $headers "./$stub"
			rm -f "$tmp"/nvidia-cuda-dev_*.deb
		fi
	fi
	if ! havelib "$cache"; then
		echo "cuda-headers: downloading libcuda1 (3 MB) for libcuda.so" >&2
		(cd "$tmp" && apt-get download -q -o Acquire::Retries=3 libcuda1) >&2
		lib=$(dpkg-deb -c "$tmp"/libcuda1_*.deb | awk '{print $6}' | grep '/libcuda\.so\.[0-9.]*$' | head -1)
		dpkg-deb --fsys-tarfile "$tmp"/libcuda1_*.deb | tar -x -C "$tmp" "$lib"
		mkdir -p "$(dirname "$cache/$stub")"
		cp "$tmp/$lib" "$cache/$stub"
	fi
fi
haveinc "$cache" && havelib "$cache" || { echo "cuda-headers: could not get cuda.h/nvrtc.h/cublasLt.h and $stub into $cache" >&2; exit 1; }
show "$cache"
