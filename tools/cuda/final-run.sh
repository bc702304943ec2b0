#!/bin/bash
# A short device call: the GPU suite without its two slowest tests (the
# NVRTC compile of every target, the long prefill-attention sweep) while the
# 4b-shape model is generated, then cohort bench at batch 1 and 8, a 1024
# prefill and the mixed-load measurement (issue 12 item 4). Carry out/.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/final-out}
mkdir -p "$OUT"
BIN=$(cd "${BIN:-out}" && pwd)
(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-120}" "$BIN/cuda.test" -test.v -test.count=1 \
	-test.skip "${SKIP:-TestCompileKernels|TestAttentionPrefillSingle}" >"$OUT/gpu-tests.log" 2>&1
	echo "cuda.test rc=$?" >>"$OUT/gpu-tests.log") &
tests=$!
"$BIN/cohort" make-model --preset 4b-shape --out /tmp/m4b >/dev/null 2>&1 || echo "make-model failed"
wait $tests
grep -E "^(--- FAIL|FAIL|panic)|cuda.test rc" "$OUT/gpu-tests.log"
grep -c "^--- PASS" "$OUT/gpu-tests.log"
timeout -k 5 "${BENCH_LIMIT:-170}" "$BIN/cohort" bench --model /tmp/m4b --device cuda --batch "${BATCHES:-1,8}" --prompt-len 128 \
	--decode-tokens 32 --prefill "${PREFILL:-1024}" --ttft-len "${TTFT:-0}" --mixed-prefill-tokens "${MIXED:-512,2048}" \
	--mixed-decoders 16 --mixed-decode-tokens "${MIXED_TOKENS:-256}" --mixed-prompt 8192 --mixed-period 1s \
	--json "$OUT/bench.json" 2>&1 | tail -22
