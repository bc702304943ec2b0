#!/bin/bash
# The session's closing device call (carry out/ with cohort.gz and
# cuda.test.gz):
#   1. the whole GPU suite (run-lib.sh's run_suite, TEST_LIMIT) and, beside
#      it, fidelity against HF f32 and bf16 at $LENS (fidelity.sh's ids,
#      score and ref stages; untimed work only runs in parallel);
#   2. every bar of issues 11 and 12 in one cohort bench run, with the step
#      timing on (decode 1, 8, 32, 128, 256; prefill 1k and 8k; the 1k TTFT;
#      the mixed load at 128 and 256 prefill tokens a step);
#   3. if at most $AB_BEFORE seconds have passed, ab-run.sh over $MODES
#      (one round: the prefills and the TTFT).
# Files in $OUT: cuda-tests.txt, fid-default.txt, allbars.txt, bench.json,
# bench-*.txt.
export OUT=${OUT:-/tmp/bars-run}
. tools/cuda/run-lib.sh
make_model
wait_model
run_fidelity default &
fid=$!
run_suite
wait $fid
at fidelity
cat $OUT/fid-default.txt
run_allbars
if [ "$(($(date +%s) - t0))" -le "${AB_BEFORE:-0}" ]; then
	BATCHES=1 FLAGS="--prefill 1024,8192 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 --decode-tokens 16" ROUNDS=1 \
		bash tools/cuda/ab-run.sh 2>&1 | grep -v compiled
fi
at done
