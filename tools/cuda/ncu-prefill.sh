#!/bin/bash
# ncu over single prefill steps (COHORT_CUDA_PROFILE_ROWS=rows:k, see
# kernels/cuda/profile.go): a 1024-token prefill, and the last 2048-token
# chunk of an 8192-token prompt, each as a per-kernel table
# (tools/cuda/ncu-steps.py). Carry out/. Results go to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/ncu-prefill}
mkdir -p "$OUT"
BIN=$(cd "${BIN:-out}" && pwd)
[ -d /tmp/m4b ] || "$BIN/cohort" make-model --preset 4b-shape --out /tmp/m4b >/dev/null 2>&1
for spec in ${SPECS:-1024:1024:1 8192:2048:4}; do
	IFS=: read -r len rows k <<<"$spec"
	COHORT_CUDA_PROFILE_ROWS=$rows:$k timeout -k 5 "${NCU_LIMIT:-200}" ncu --target-processes all --profile-from-start off \
		--cache-control none --clock-control none \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
		--csv --page raw --print-units base \
		"$BIN/cohort" bench --model /tmp/m4b --device cuda --batch 1 --prompt-len 16 --decode-tokens 2 \
		--prefill "$len" --ttft-len 0 --step-deadline 10m >"$OUT/ncu-p$len.csv" 2>"$OUT/ncu-p$len.err"
	echo "ncu prefill $len (step of $rows rows, #$k) rc=$?"
	grep -h "profiler" "$OUT/ncu-p$len.err"
	python3 tools/cuda/ncu-steps.py "$OUT/ncu-p$len.csv" "$rows" | tee "$OUT/table-p$len.md"
done
