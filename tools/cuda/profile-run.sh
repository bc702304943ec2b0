#!/bin/bash
# One device call for a kernel change (carry out/ with cohort.gz and
# cuda.test.gz):
#   1. the GPU tests matching $CUDA_TESTS (default all) while the 4b-shape
#      model is made;
#   2. with NCU_KERNELS (entry names), ncu's sections (speed of light, warp
#      states, occupancy, scheduler, memory) of each entry's first launch in
#      BenchmarkGDNPrefill at 1,024 tokens ($NCU_BENCH picks another);
#   3. with SPECS, tools/cuda/ncu-step.sh's per-kernel step tables;
#   4. cohort bench in each mode of $MODES (VAR=value settings joined by "+",
#      "default" for none) at $BATCHES and $PREFILL, one after the other;
#   5. with MIXED (--max-prefill-tokens settings), the mixed load of issue 12.
# Files in $OUT: cuda-tests.txt, ncu-<entry>.txt, table-*.md, bench-<n>.txt,
# mixed.txt.
OUT=${OUT:-/tmp/profile-run}
. tools/cuda/run-lib.sh
make_model
# Every test matching $CUDA_TESTS, the slow ones included unless $SKIP says.
[ "${TESTS:-1}" = 1 ] && SKIP=${SKIP:-^$} run_suite
for k in ${NCU_KERNELS:-}; do
	(cd kernels/cuda && timeout -k 5 120 ncu -k "regex:^$k\$" -c 1 --section SpeedOfLight --section WarpStateStats \
		--section Occupancy --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis \
		/tmp/bin/cuda.test -test.run '^$' -test.bench "${NCU_BENCH:-BenchmarkGDNPrefill/T1024}" -test.benchtime 1x \
		>$OUT/ncu-$k.txt 2>&1)
	grep -E "Duration|Memory Throughput|Compute \(SM\)|Stall|Achieved Occupancy|Registers|Warp Cycles Per Issued|Issue Slots Busy" \
		$OUT/ncu-$k.txt | head -24
	at "ncu $k"
done
wait_model
if [ -n "${SPECS:-}" ]; then
	BIN=/tmp/bin OUT=$OUT SPECS="$SPECS" bash tools/cuda/ncu-step.sh >$OUT/ncu-step.log 2>&1
	grep -E "rc=" $OUT/ncu-step.log
	at ncu-step
fi
for m in ${MODES:-}; do
	n=$(mode_name $m)
	# shellcheck disable=SC2046
	timeout -k 5 "${BENCH_LIMIT:-120}" env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda \
		--batch "${BATCHES:-1,8,32,128}" --prompt-len 128 --decode-tokens 64 --prefill "${PREFILL:-1024,8192}" \
		--ttft-len 1024 >$OUT/bench-$n.txt 2>&1
	echo "=== bench $n"
	grep -v "captured CUDA graph" $OUT/bench-$n.txt | grep -E "^\s+[0-9]|TTFT," | head -12
	at "bench $n"
done
if [ -n "${MIXED:-}" ]; then
	timeout -k 5 "${MIXED_LIMIT:-150}" /tmp/bin/cohort bench --model $M --device cuda --batch 1 --prefill 16 --prefill-runs 1 \
		--ttft-len 0 --mixed-prefill-tokens "$MIXED" >$OUT/mixed.txt 2>&1
	echo "=== mixed (rc=$?)"
	grep -v "captured CUDA graph" $OUT/mixed.txt | tail -12
	at mixed
fi
