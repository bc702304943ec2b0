#!/bin/bash
# The sixteenth session's first device call, as the fifteenth left it
# (carry out/ with cohort.gz and cuda.test.gz):
#   1. the whole GPU suite (run-lib.sh's run_suite; TestLtBucket is new);
#   2. the quarter-octave cuBLASLt buckets against the octave ones
#      (COHORT_CUDA_LT_BUCKETS=quarter): decode batches 8 and 32, then the
#      1k prefill and TTFT after them, and the mixed load at 128, one engine
#      a mode, two rounds (the 1k prefill took 27.1 ms after decode batches
#      and 25.7 without them in the fifteenth session);
#   3. if at most $NCU_BEFORE seconds have passed, ncu over one 8k prefill
#      step (ncu-step.sh).
# Files in $OUT: cuda-tests.txt, lt-*.txt, table-*.md.
export OUT=${OUT:-/tmp/next-run}
. tools/cuda/run-lib.sh
make_model
run_suite
wait_model
at model
for r in 1 2; do
	for m in default COHORT_CUDA_LT_BUCKETS=quarter; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		timeout -k 5 100 env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda --batch 8,32 --decode-tokens 16 \
			--prefill 1024 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 --mixed-prefill-tokens 128 >$OUT/lt-$n-$r.txt 2>&1
		echo "== $n round $r: $(grep -E '^decode batch|^prefill|^TTFT|^mixed load, max|rror' $OUT/lt-$n-$r.txt | tr '\n' ' ')"
	done
	at "round $r"
done
if [ "$(($(date +%s) - t0))" -le "${NCU_BEFORE:-400}" ]; then
	mkdir -p out/bin && cp /tmp/bin/cohort out/bin/ && BIN=out/bin SPECS=prefill:8192:8192:2 NCU_LIMIT=150 bash tools/cuda/ncu-step.sh | tail -40
fi
at done
