#!/bin/bash
# ncu over single engine steps (COHORT_CUDA_PROFILE_ROWS=rows:k, see
# kernels/cuda/profile.go: collection is on for the k-th step that embeds
# rows rows), each printed as a per-kernel table (tools/cuda/ncu-table.py).
# SPECS lists the runs:
#   prefill:LEN:ROWS:K  a LEN-token prefill, its K-th step of ROWS rows
#                       (default: a 1024-token prefill and an 8192-token
#                       one, each one step on a GPU since phase 16; K = 2:
#                       the first is bench's warm-up, which also times
#                       cuBLASLt's candidates);
#   decode:B            one decode step at batch B (the first of B rows:
#                       its graph is captured, then launched).
#   mixed:P:ROWS:K      the K-th step of ROWS rows of cohort bench's mixed
#                       load at --max-prefill-tokens P (16 decoders: ROWS
#                       = P + 16 for a step that mixes both).
# Carry out/. Results go to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/ncu-step}
mkdir -p "$OUT"
BIN=$(cd "${BIN:-out}" && pwd)
[ -d /tmp/m4b ] || "$BIN/cohort" make-model --preset 4b-shape --out /tmp/m4b >/dev/null 2>&1
for spec in ${SPECS:-prefill:1024:1024:2 prefill:8192:8192:2}; do
	IFS=: read -r kind a rows k <<<"$spec"
	case $kind in
	prefill) args=(--batch 1 --decode-tokens 2 --prefill "$a" --prefill-runs 1) ;;
	decode) rows=$a k=1 args=(--batch "$a" --decode-tokens 4 --prefill 16) ;;
	mixed) args=(--batch 1 --decode-tokens 2 --prefill 16 --prefill-runs 1 --mixed-prefill-tokens "$a") ;;
	*) echo "unknown spec $spec"; continue ;;
	esac
	name=$kind-$a
	COHORT_CUDA_PROFILE_ROWS=$rows:$k timeout -k 5 "${NCU_LIMIT:-200}" ncu --target-processes all --profile-from-start off \
		--cache-control none --clock-control none \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
		--csv --page raw --print-units base \
		"$BIN/cohort" bench --model /tmp/m4b --device cuda "${args[@]}" --prompt-len 16 --ttft-len 0 --step-deadline 10m \
		>"$OUT/ncu-$name.csv" 2>"$OUT/ncu-$name.err"
	echo "ncu $spec rc=$?"
	grep -h "profiler" "$OUT/ncu-$name.err"
	python3 tools/cuda/ncu-table.py "$OUT/ncu-$name.csv" | tee "$OUT/table-$name.md"
done
