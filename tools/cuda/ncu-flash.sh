#!/bin/bash
# ncu's stall and throughput sections for the 4b-head flash attention
# kernels over a bf16 cache (carry the folder BINS names, default out/, with
# cuda.test.gz): one launch each of attention_prefill_kvbf16_hd256_ldm,
# _wg, _wgp and _wgt inside BenchmarkAttentionPrefillWG's prefill $CASE (default
# an 8,192-row prompt). The seventeenth session found the wgmma entries no
# faster than the ldmatrix one (about 168 TFLOP/s at 8k rows on an H100,
# docs/gpu.md phase 18): the sections say what they wait on instead
# (warp states, issue rate, shared-memory and L2 traffic, occupancy).
# Files in $OUT: ncu-<kernel>.txt (ncu's details page) and summary.txt.
export OUT=${OUT:-/tmp/ncu-flash}
. tools/cuda/run-lib.sh
note_gpu
CASE=${CASE:-8192_new_rows_after_0_cached}
STALLS=$(for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait lg_throttle not_selected selected dispatch_stall no_instruction membar; do
	printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r
done | sed 's/,$//')
for k in attention_prefill_kvbf16_hd256_ldm attention_prefill_kvbf16_hd256_wg attention_prefill_kvbf16_hd256_wgp attention_prefill_kvbf16_hd256_wgt; do
	(cd kernels/cuda && timeout -k 5 "${NCU_LIMIT:-120}" ncu --kernel-name "$k" --launch-skip 1 --launch-count 1 \
		--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
		--section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --metrics "$STALLS" \
		/tmp/bin/cuda.test -test.run '^$' -test.bench "BenchmarkAttentionPrefillWG/$CASE" -test.benchtime=1x \
		>$OUT/ncu-$k.txt 2>&1)
	echo "== $k rc=$?" | tee -a $OUT/summary.txt
	grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|Issued Ipc|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Shared Memory Configuration|Stall|stall|issue_stalled' \
		$OUT/ncu-$k.txt | head -60 | tee -a $OUT/summary.txt
	at "$k"
done
