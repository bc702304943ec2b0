#!/bin/sh
# Installs Debian bookworm's nvidia-cuda-dev (CUDA 11.8 headers and the
# libcuda that gorgonia.org/cu links against) unless cuda.h is already there,
# adding the non-free and contrib components to the apt sources first
# (libcuda1 depends on nvidia-support, which is in contrib).
set -eu
if [ -f /usr/include/cuda.h ]; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ]; then
	for c in non-free contrib; do
		$SUDO sed -i "/^Components:/{/ $c\\( \\|\$\\)/!s/\$/ $c/}" "$src"
	done
elif ! grep -qs 'non-free' /etc/apt/sources.list; then
	echo 'deb http://deb.debian.org/debian bookworm main contrib non-free' | $SUDO tee /etc/apt/sources.list.d/cohort-non-free.list >/dev/null
fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nvidia-cuda-dev
