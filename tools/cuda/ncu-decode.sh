#!/bin/bash
# ncu over one decode step of batch B (COHORT_CUDA_PROFILE_ROWS=B:1, see
# kernels/cuda/profile.go: the first step that embeds B rows, a decode step
# whose graph is captured and then launched), as a per-kernel table.
# Carry out/. Results go to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/ncu-decode}
mkdir -p "$OUT"
BIN=$(cd "${BIN:-out}" && pwd)
[ -d /tmp/m4b ] || "$BIN/cohort" make-model --preset 4b-shape --out /tmp/m4b >/dev/null 2>&1
for nb in ${NCU_BATCHES:-128}; do
	COHORT_CUDA_PROFILE_ROWS=$nb:1 timeout -k 5 "${NCU_LIMIT:-200}" ncu --target-processes all --profile-from-start off \
		--cache-control none --clock-control none \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
		--csv --page raw --print-units base \
		"$BIN/cohort" bench --model /tmp/m4b --device cuda --batch "$nb" --prompt-len 16 --decode-tokens 4 \
		--prefill 16 --ttft-len 0 --step-deadline 10m >"$OUT/ncu-b$nb.csv" 2>"$OUT/ncu-b$nb.err"
	echo "ncu decode batch $nb rc=$?"
	grep -h "profiler" "$OUT/ncu-b$nb.err"
done
