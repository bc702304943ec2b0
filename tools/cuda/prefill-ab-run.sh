#!/bin/bash
# One device call for prefill options (carry out/ with cohort.gz and
# cuda.test.gz):
#   1. the whole GPU suite (run-lib.sh's run_suite, TEST_LIMIT) and, beside
#      it, fidelity against HF f32 and bf16 (tools/cuda/fidelity.sh's ids,
#      score and ref stages at $LENS) for the default and for each of
#      $FID_MODES, none of which is timed;
#   2. cohort bench alternated between $MODES (ab-run.sh; BATCHES, ROUNDS,
#      FLAGS: by default prefills of 1k and 8k and the 1k TTFT);
#   3. with $BIG_STEP set, one bench of the 8k prefill at --max-prefill-tokens
#      $BIG_STEP (one step for the whole prompt).
# Files in $OUT: cuda-tests.txt, bench-*.txt, fid-*.txt, bigstep.txt.
export OUT=${OUT:-/tmp/prefill-ab-run}
. tools/cuda/run-lib.sh
make_model
wait_model
FID_BUDGET=${FID_BUDGET:-200} run_fidelity default ${FID_MODES:-} &
fid=$!
run_suite
wait $fid
at fidelity
for f in $OUT/fid-*.txt; do echo "== $f"; cat $f; done
BATCHES=${BATCHES:-1} FLAGS=${FLAGS:-"--prefill 1024,8192 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 --decode-tokens 32"} \
	bash tools/cuda/ab-run.sh 2>&1 | grep -v compiled
if [ -n "${BIG_STEP:-}" ]; then
	timeout -k 5 120 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 8 --prompt-len 128 \
		--prefill 8192 --prefill-runs 3 --ttft-len 0 --max-prefill-tokens "$BIG_STEP" >$OUT/bigstep.txt 2>&1
	echo "== one step of $BIG_STEP: $(grep -E '^prefill' $OUT/bigstep.txt)"
fi
at done
