#!/bin/bash
# ncu sections of single GEMV launches inside BenchmarkLinearBF16 (T=1):
# ncu-gemv.sh ENTRY SKIP... (SKIP counts launches of ENTRY; each shape and
# row count runs 23 launches of a variant at -test.benchtime 1x).
set -u
BIN=$(cd "${BIN:-out}" && pwd)
entry=$1
shift
cd kernels/cuda
for skip in "$@"; do
	timeout -k 5 90 ncu -k "regex:^${entry}\$" --launch-skip "$skip" --launch-count 1 --cache-control none --clock-control none \
		--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
		"$BIN/cuda.test" -test.run '^$' -test.bench BenchmarkLinearBF16 -test.benchtime 1x 2>&1 |
		grep -vE '^(==PROF==|Benchmark|goos|goarch|pkg|cpu|PASS|ok)' | grep -E '^\s+[A-Za-z].*\s[0-9.,]+$|gemv|Section' | head -70
done
