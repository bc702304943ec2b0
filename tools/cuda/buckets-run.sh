#!/bin/bash
# One device call for the decode buckets (docs/gpu.md phase 14; carry out/
# with cohort.gz and cuda.test.gz):
#   1. the GPU suite (run-lib.sh's run_suite; CUDA_TESTS, TEST_LIMIT) while
#      the 4b-shape model is made, TestDecodeBucketsMatchUnpadded among it;
#   2. cohort bench at batch 1, 8 and 32 alternated with and without
#      COHORT_CUDA_GRAPH_BUCKETS=1 (tools/cuda/ab-run.sh, ROUNDS rounds);
#   3. with ALLBARS=1, every bar in one cohort bench run with the buckets on.
# Files in $OUT: cuda-tests.txt, bench-*.txt, allbars.txt.
export OUT=${OUT:-/tmp/buckets-run}
. tools/cuda/run-lib.sh
make_model
run_suite
grep -E -- '--- (PASS|FAIL|SKIP): TestDecodeBucket' $OUT/cuda-tests.txt
wait_model
MODES="default COHORT_CUDA_GRAPH_BUCKETS=1" ROUNDS=${ROUNDS:-2} bash tools/cuda/ab-run.sh 2>&1 | grep -v compiled
if [ "${ALLBARS:-0}" = 1 ]; then
	COHORT_CUDA_GRAPH_BUCKETS=1 COHORT_STEP_TIMING=1 timeout -k 5 150 /tmp/bin/cohort bench --model $M --device cuda \
		--batch 1,8,32,128,256 --prompt-len 128 --decode-tokens 64 --prefill 1024,8192 --prefill-runs 3 \
		--ttft-len 1024 --ttft-runs 5 --mixed-prefill-tokens 128,256 >$OUT/allbars.txt 2>&1
	grep -vE 'captured CUDA graph|cuBLASLt candidate|mean over' $OUT/allbars.txt | tail -30
	at allbars
fi
