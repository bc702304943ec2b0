#!/bin/bash
# One device call for the decode issue (11): the GPU test suite in the
# background while the 4b-shape model is generated, then the bf16 Linear
# micro-benchmark (tensor-core GEMV beside the old paths), fidelity
# (cohort score against HF f32 and bf16 on the same weights), cohort bench,
# and optionally side-by-side benches of other binaries (AB=1) or settings
# (AB_ENVS="COHORT_CUDA_PDL=0 ..."), and an ncu profile of one batch-1
# decode step (NCU=1).
# Carry $BIN (default out/) with cohort and cuda.test. Results go to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/issue11-out}
mkdir -p "$OUT"
BIN=$(cd "${BIN:-out}" && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
(
	# The tests choose their own kernels: no opt-in from the environment.
	cd kernels/cuda && env -u COHORT_CUDA_FLASH timeout -k 5 "${TEST_LIMIT:-150}" "$BIN/cuda.test" -test.v -test.count=1 \
		-test.run "${TESTS:-.}" >/tmp/gpu-tests.log 2>&1
	echo "cuda.test rc=$?" >>/tmp/gpu-tests.log
) &
tests=$!
WORK=/tmp/fidelity
"$BIN/cohort" make-model --preset 4b-shape --out $WORK/m4b >/dev/null 2>&1 || echo "make-model failed"
wait $tests
grep -E '^(--- |ok|FAIL|PASS|panic)|top-8|graphs captured|greedy|cuda.test rc|Error|error' /tmp/gpu-tests.log | head -80
cp /tmp/gpu-tests.log "$OUT/gpu-tests.log"
if [ "${MICRO:-1}" = 1 ]; then
	(cd kernels/cuda && env -u COHORT_CUDA_FLASH timeout -k 5 120 "$BIN/cuda.test" -test.run '^$' -test.bench "${MICRO_BENCH:-BenchmarkLinearBF16}" \
		-test.benchtime "${MICRO_TIME:-5x}" 2>&1) | tee "$OUT/micro.txt" | grep -E 'Benchmark|ok|FAIL|panic'
fi
BUDGET=${BUDGET:-300} STAGES=${STAGES:-model ids score ref bench} HF_DTYPES=${HF_DTYPES:-bf16,f32} \
	LENS=${LENS:-1,128,1024} BATCHES=${BATCHES:-1,8,32,64,128,256} PREFILL=${PREFILL:-1024,8192} \
	WORK=$WORK OUT="$OUT" bash tools/cuda/fidelity.sh "$BIN/cohort" >/dev/null
cat "$OUT/summary.txt" 2>/dev/null
if [ "${AB:-0}" = 1 ]; then
	# Side by side: binaries carried as $BIN/<name>.xz (e.g. before and after a change).
	for name in ${AB_BINS:-cohort-before cohort-cu}; do
		xz -dkf "$BIN/$name.xz" && chmod +x "$BIN/$name" || continue
		echo "=== $name" | tee -a "$OUT/ab.txt"
		"$BIN/$name" bench --model $WORK/m4b --device cuda --batch "${AB_BATCHES:-1,32,128}" --prefill 1024 --decode-tokens 32 \
			--ttft-len 0 2>/dev/null | grep -E '^ +[0-9]+ +[0-9.]+ ' | tee -a "$OUT/ab.txt"
	done
fi
if [ -n "${AB_ENVS:-}" ]; then
	# Side by side: the same binary with one setting changed (e.g. COHORT_CUDA_PDL=0).
	for e in ${AB_ENVS}; do
		echo "=== $e" | tee -a "$OUT/ab.txt"
		env "$e" "$BIN/cohort" bench --model $WORK/m4b --device cuda --batch "${AB_BATCHES:-1,32,128}" --prefill 1024 \
			--decode-tokens 32 --ttft-len 0 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ |mean over' | tee -a "$OUT/ab.txt"
	done
fi
if [ "${NCU:-0}" = 1 ]; then
	# One ncu window per batch size: NCU_BATCHES="1:1000:800 32:1500:1200" (batch:skip:count).
	for spec in ${NCU_BATCHES:-1:${NCU_SKIP:-2000}:${NCU_COUNT:-700}}; do
		IFS=: read -r nb skip count <<<"$spec"
		timeout -k 5 "${NCU_LIMIT:-120}" ncu --target-processes all --cache-control none --clock-control none \
			--launch-skip "$skip" --launch-count "$count" \
			--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size \
			--csv --page raw --print-units base \
			"$BIN/cohort" bench --model $WORK/m4b --device cuda --batch "$nb" --prompt-len 16 --decode-tokens 12 \
			--prefill 16 --ttft-len 0 >"$OUT/ncu-b$nb.csv" 2>/tmp/ncu.err
		echo "ncu batch $nb rc=$? ($(wc -l <"$OUT/ncu-b$nb.csv") lines)"
	done
fi
[ "${KEEP_JSON:-0}" = 1 ] || rm -f "$OUT/fidelity-4b.json"
