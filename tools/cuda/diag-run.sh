#!/bin/bash
# One device call that checks the shipped binaries and gathers the host-side
# diagnostics (carry out/ with cohort.gz, cuda.test.gz, cohort.test.gz):
#   1. the GPU suite (minus the slowest tests) while the 4b-shape model is made;
#   2. cohort bench at $BATCHES with COHORT_STEP_TIMING=1 and a CPU profile;
#   3. the mixed load at 128 prefill tokens a step with COHORT_STEP_TIMING=1;
#   4. TestBenchChatCUDA (deterministic mode) and a seeded 4b-shape chat;
#   5. fidelity at $LENS.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/diag}
mkdir -p "$OUT" /tmp/bin /tmp/fidelity
for b in cohort cuda.test cohort.test; do gunzip -c out/$b.gz >/tmp/bin/$b && chmod +x /tmp/bin/$b; done
M=/tmp/fidelity/m4b
t0=$(date +%s)
/tmp/bin/cohort make-model --preset 4b-shape --out $M >/dev/null 2>&1 &
mk=$!
(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-110}" /tmp/bin/cuda.test -test.v -test.count=1 \
	-test.skip "${SKIP:-TestCompileKernels|TestAttentionPrefillSingle}" >$OUT/cuda-tests.txt 2>&1
	echo "cuda.test rc=$?" >>$OUT/cuda-tests.txt)
grep -E -- '^(--- FAIL|FAIL|panic)|rc=' $OUT/cuda-tests.txt | head -20; echo "cuda passed: $(grep -c -- '^--- PASS' $OUT/cuda-tests.txt)"
(cd cmd/cohort && COHORT_CHAT_TP=1 timeout -k 5 "${CMD_LIMIT:-120}" /tmp/bin/cohort.test -test.v -test.count=1 -test.run "${CMD_TESTS:-TestBenchChatCUDA}" >$OUT/cmd-tests.txt 2>&1
	echo "cohort.test rc=$?" >>$OUT/cmd-tests.txt)
grep -E -- '^(--- |FAIL|panic)|rc=|identical|agree' $OUT/cmd-tests.txt | head -20
wait $mk; echo "tests and model at $(( $(date +%s)-t0 ))s"
COHORT_STEP_TIMING=1 timeout -k 5 "${BENCH_LIMIT:-120}" /tmp/bin/cohort bench --model $M --device cuda --batch "${BATCHES:-1,128,256}" --prompt-len 128 \
	--decode-tokens 64 --prefill 1024 --ttft-len 1024 --cpuprofile $OUT/bench.pprof >$OUT/bench.txt 2>&1
grep -v "captured CUDA graph" $OUT/bench.txt | grep -vi 'step timing\|host' | tail -14
grep -i 'timing\|host' $OUT/bench.txt | tail -12
echo "bench at $(( $(date +%s)-t0 ))s"
COHORT_STEP_TIMING=1 timeout -k 5 "${MIXED_LIMIT:-60}" /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 8 --prefill 1024 --ttft-len 0 \
	--mixed-prefill-tokens 128 --mixed-decoders 16 --mixed-decode-tokens 256 --mixed-prompt 8192 --mixed-period 1s >$OUT/mixed.txt 2>&1
grep -v "captured CUDA graph" $OUT/mixed.txt | grep -A8 -i mixed | head -12
grep -i 'timing' $OUT/mixed.txt | tail -10
echo "mixed at $(( $(date +%s)-t0 ))s"
if [ -n "${EXTRA:-}" ]; then
	echo "=== $EXTRA"
	timeout -k 5 "${EXTRA_LIMIT:-90}" bash -c "$EXTRA" 2>&1 | tail -24
	echo "extra at $(( $(date +%s)-t0 ))s"
fi
if [ "${FIDELITY:-1}" = 1 ]; then
	BUDGET=${FID_BUDGET:-150} STAGES="ids score ref" LENS=${LENS:-1,128,1024} WORK=/tmp/fidelity OUT="$OUT" \
		bash tools/cuda/fidelity.sh /tmp/bin/cohort >/dev/null 2>&1
	grep -iE "top-8|pass|fail|mean" "$OUT/summary.txt" 2>/dev/null | head -20
fi
echo "end at $(( $(date +%s)-t0 ))s"
