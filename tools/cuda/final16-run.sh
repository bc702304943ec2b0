#!/bin/bash
# The fifteenth session's closing device call (carry out/ with cohort.gz and
# cuda.test.gz):
#   1. the GPU tests matching $CUDA_TESTS while the model is made;
#   2. fidelity against HF f32 and bf16 at $LENS (run-lib.sh's run_fidelity,
#      alone on the GPU, at most FID_BUDGET seconds);
#   3. every bar of issues 11 and 12 in one cohort bench run (as
#      bars-run.sh: step timing on);
#   4. if at most $TTFT_BEFORE seconds have passed, the 1k prefill and TTFT
#      again without the 8k prompts before them;
#   5. if at most $LT_BEFORE seconds have passed, the mixed load at 128
#      prefill tokens a step with 32 cuBLASLt candidates timed a shape.
# Files in $OUT: cuda-tests.txt, fid-default.txt, allbars.txt, bench.json,
# ttft.txt, mixed-lt32.txt.
export OUT=${OUT:-/tmp/final16}
. tools/cuda/run-lib.sh
make_model
TEST_LIMIT=${TEST_LIMIT:-90} run_suite
wait_model
at model
LENS=${LENS:-1,8192} FID_BUDGET=${FID_BUDGET:-240} run_fidelity default
at fidelity
cat $OUT/fid-default.txt
BENCH_LIMIT=${BENCH_LIMIT:-220} run_allbars
if [ "$(($(date +%s) - t0))" -le "${TTFT_BEFORE:-480}" ]; then
	timeout -k 5 60 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 8 --prefill 1024 --prefill-runs 5 \
		--ttft-len 1024 --ttft-runs 5 >$OUT/ttft.txt 2>&1
	grep -E '^prefill|^TTFT|rror' $OUT/ttft.txt
fi
if [ "$(($(date +%s) - t0))" -le "${LT_BEFORE:-520}" ]; then
	COHORT_CUDA_LT_ALGOS=32 timeout -k 5 70 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 8 --prefill= \
		--ttft-len 0 --mixed-prefill-tokens 128 >$OUT/mixed-lt32.txt 2>&1
	grep -E '^mixed load, max|rror' $OUT/mixed-lt32.txt
fi
at done
