#!/bin/bash
# Ran on 2026-12-06 with the variable's first name, COHORT_CUDA_GDN_WIDE, which
# clashed with the decode recurrence's switch of that name (gdn.go); the
# values run, 32 and 64, left that switch at its default.
# The sixteenth session's first device call (carry out/ with cohort.gz and
# cuda.test.gz), for the wide GDN state pass (COHORT_CUDA_GDN_STATE_COLS):
#   1. the GDN, whole-model and cuBLASLt-bucket GPU tests (run-lib.sh's
#      run_suite; TestGDNStateWideMatches wants the 16-column pass's bits);
#   2. BenchmarkGDNPrefill once (the variants' ratios at 1k, 2k and 8k rows);
#   3. cohort bench alternated over the state passes (16, 64 and 32 columns
#      a block): batch-1 decode, the 1k and 8k prefill, the 1k TTFT; two
#      rounds;
#   4. on an H200 with time left, the prefix cache's chat benchmark.
# Files in $OUT: gpu.txt, cuda-tests.txt, gdn-bench.txt, wide-<mode>.txt (both rounds), chat.txt.
export OUT=${OUT:-/tmp/s16-first}
. tools/cuda/run-lib.sh
note_gpu
make_model
CUDA_TESTS='TestGDN|TestGatedDelta|TestLtBucket|TestModel|TestKernel' TEST_LIMIT=220 run_suite
(cd kernels/cuda && timeout -k 5 120 /tmp/bin/cuda.test -test.run '^$' -test.bench BenchmarkGDNPrefill -test.benchtime 1x >$OUT/gdn-bench.txt 2>&1)
grep -E '^Benchmark|new_ms' $OUT/gdn-bench.txt | head -8
at gdn-bench
wait_model
at model
for r in 1 2; do
	for m in default COHORT_CUDA_GDN_STATE_COLS=64 COHORT_CUDA_GDN_STATE_COLS=32; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		timeout -k 5 80 env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 32 \
			--prefill 1024,8192 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 >/tmp/wide.txt 2>&1
		{ echo "### round $r"; cat /tmp/wide.txt; } >>$OUT/wide-$n.txt # at most eight files come back
		echo "== $n round $r: $(grep -E '^decode batch|^prefill|^TTFT|rror' /tmp/wide.txt | tr '\n' ' ')"
	done
	at "round $r"
	[ "$(($(date +%s) - t0))" -gt 420 ] && break
done
if grep -q H200 $OUT/gpu.txt && [ "$(($(date +%s) - t0))" -le 450 ]; then
	timeout -k 5 $((580 - $(date +%s) + t0)) /tmp/bin/cohort bench --chat --model $M --device cuda >$OUT/chat.txt 2>&1
	grep -E 'hit rate|TTFT|identical|rror' $OUT/chat.txt | head -16
	at chat
fi
at done
