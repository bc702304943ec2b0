#!/bin/bash
# The eighteenth session's first device call, as the seventeenth left it
# (carry out/ with cohort.gz and cuda.test.gz built from main):
#   0. the tests of what no GPU has run yet: the wgmma entries' last commit
#      (TestAttentionPrefillWG wants the ldm entries' bits) and the
#      cuBLASLt tidy of 00e4f47 (TestLinearAddRMSNorm*), -short;
#   0b. on an H200, the prefix cache's chat benchmark (issue 17's last
#      point);
#   1. tools/cuda/ncu-flash.sh: what the ldm, wg, wgp and wgt flash kernels wait
#      on at 8k rows (phase 18: the wgmma ones are no faster);
#   2. BenchmarkAttentionPrefillWG with the wgmma entries' rescale skip and
#      copy offsets and the _wgt entries (the warpgroups taking turns at
#      the tensor cores), all untested; then the 1k and 8k prefill through
#      cohort bench with COHORT_CUDA_FLASH_WG=0, 1 and turns;
#   3. the mixed load at 128 prefill tokens a step with the step timing and
#      a host CPU profile (a mixed step spent 4.5-6.0 ms in the rank's
#      forward call in phase 18);
#   4. every bar of issues 11 and 12 (run_allbars), last: with ncu's four
#      runs the whole may pass the call's 600 s (BARS=0 leaves them out, for
#      a call of their own).
# Files in $OUT (8 at most): gpu.txt, tests.txt, ncu.txt, wg-bench.txt, mixed.txt,
# mixed.pprof, chat.txt, allbars.txt.
export OUT=${OUT:-/tmp/s18-first}
. tools/cuda/run-lib.sh
note_gpu
make_model
run_tests 120 'TestAttentionPrefillWG|TestLinearAddRMSNorm|TestAttentionPrefillSwitches'
run_chat
OUT=/tmp/ncuf bash tools/cuda/ncu-flash.sh >/dev/null 2>&1
cat /tmp/ncuf/summary.txt
cat /tmp/ncuf/summary.txt /tmp/ncuf/ncu-*.txt >$OUT/ncu.txt 2>/dev/null
at ncu
(cd kernels/cuda && timeout -k 5 90 /tmp/bin/cuda.test -test.run '^$' -test.bench 'BenchmarkAttentionPrefillWG' -test.benchtime=1x \
	>$OUT/wg-bench.txt 2>&1)
grep -E 'Benchmark|FAIL' $OUT/wg-bench.txt
at bench
wait_model
at model
for m in 0 1 turns; do
	COHORT_CUDA_FLASH_WG=$m timeout -k 5 60 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 4 \
		--prefill 1024,8192 --prefill-runs 3 --ttft-len 0 >/tmp/pf-$m.txt 2>&1
	echo "== COHORT_CUDA_FLASH_WG=$m: $(grep -E '^prefill|rror' /tmp/pf-$m.txt | tr '\n' ' ')" | tee -a $OUT/wg-bench.txt
done
at prefill
COHORT_STEP_TIMING=1 timeout -k 5 90 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 4 --prefill= \
	--ttft-len 0 --mixed-prefill-tokens 128 --cpuprofile $OUT/mixed.pprof >$OUT/mixed.txt 2>&1
grep -E 'other step|mixed load|rror' $OUT/mixed.txt | tail -6
at mixed
if [ "${BARS:-1}" = 1 ]; then
	BENCH_LIMIT=${BENCH_LIMIT:-180} run_allbars
	rm -f $OUT/bench.json
fi
at done
