#!/bin/bash
# Ran on 2026-12-06 with the variable's first name, COHORT_CUDA_GDN_WIDE, which
# clashed with the decode recurrence's switch of that name (gdn.go); the
# values run, 32 and 64, left that switch at its default.
# The sixteenth session's second device call (carry out/): the residual
# added in the prefill GEMMs' epilogue (COHORT_CUDA_GEMM_RESIDUAL=1) with the
# state pass of $WIDE columns (COHORT_CUDA_GDN_STATE_COLS; 16 the 16-column one):
#   1. TestLinearAddRMSNormLt, the wide state pass's tests and the
#      whole-model tests;
#   2. cohort bench alternated, the state pass of $WIDE columns with and
#      without the residual in the epilogue: the 1k and 8k prefill and the 1k
#      TTFT, rounds while time allows.
# Files in $OUT: gpu.txt, cuda-tests.txt, res-<mode>.txt.
export OUT=${OUT:-/tmp/s16-second}
. tools/cuda/run-lib.sh
note_gpu
make_model
CUDA_TESTS='TestLinearAddRMSNorm|TestGDN|TestGatedDelta|TestModel' TEST_LIMIT=200 run_suite
wait_model
at model
W=COHORT_CUDA_GDN_STATE_COLS=${WIDE:-64}
for r in 1 2 3; do
	for m in $W $W+COHORT_CUDA_GEMM_RESIDUAL=1; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		timeout -k 5 70 env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 16 \
			--prefill 1024,8192 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 >/tmp/res.txt 2>&1
		{ echo "### round $r"; cat /tmp/res.txt; } >>$OUT/res-$n.txt
		echo "== $n round $r: $(grep -E '^prefill|^TTFT|rror' /tmp/res.txt | tr '\n' ' ')"
	done
	at "round $r"
	[ "$(($(date +%s) - t0))" -gt "${ROUNDS_BEFORE:-230}" ] && break
done
at done
