#!/bin/bash
# The seventeenth session's device call (carry the folder BINS names,
# default out/, with cohort.gz and cuda.test.gz built from main):
#   1. the wgmma flash entries (kernels/46_attention_prefill_wg.cu):
#      TestAttentionPrefillWG (against attention_f32 and the _ldm entries,
#      single pass and split), the other 4b-head flash tests (default
#      entries), the cuBLASLt plan tests, TestCompileKernels; the rest runs
#      with COHORT_CUDA_FLASH_WG=$WG (default 1), or 0 if the tests failed
#      or ran out of their TEST_LIMIT (as in the one call that ran);
#   2. BenchmarkAttentionPrefillWG (each entry's ms, ratios, TFLOP/s);
#   3. compute-sanitizer memcheck over a short TestAttentionPrefillWG case;
#   4. every bar of issues 11 and 12 in one cohort bench run (run_allbars),
#      and on an H200 the prefix cache's chat benchmark (issue 17);
#   5. the 1k and 8k prefill with COHORT_CUDA_FLASH_WG=0 and =pipe beside
#      it (PF_MODES), then with
#      COHORT_STEP_TIMING=steps (each rank's phases of the prefill step);
# MEMCHECK=0 skips 3, STEPS=0 the step timing of 5.
# Files in $OUT: gpu.txt, wg-tests.txt, wg-bench.txt, wg-memcheck.txt,
# allbars.txt, bench.json, pf-<mode>.txt, steps8k.txt, chat.txt.
export OUT=${OUT:-/tmp/s17-wg}
. tools/cuda/run-lib.sh
note_gpu
make_model
(cd kernels/cuda && timeout -k 5 "${TEST_LIMIT:-150}" /tmp/bin/cuda.test -test.v -test.count=1 \
	-test.run 'TestAttentionPrefillWG|TestFlashWGConstants|TestAttentionPrefillSwitches|TestAttentionPrefill4B|TestCompileKernels|TestAttentionPrefillSplitLong|TestLinearAddRMSNorm' \
	>$OUT/wg-tests.txt 2>&1; echo "rc=$?" >>$OUT/wg-tests.txt)
grep -E -- '--- (FAIL|PASS)|_wgp? flash|rc=|panic|sm_90a' $OUT/wg-tests.txt | head -70
export COHORT_CUDA_FLASH_WG=${WG:-1} # the _wg entries for the bars (not yet the default)
grep -q '^rc=0' $OUT/wg-tests.txt || { export COHORT_CUDA_FLASH_WG=0; echo "WG OFF for the rest"; }
at tests
(cd kernels/cuda && timeout -k 5 90 /tmp/bin/cuda.test -test.run '^$' -test.bench 'BenchmarkAttentionPrefillWG' -test.benchtime=1x \
	>$OUT/wg-bench.txt 2>&1)
grep -E 'Benchmark|FAIL' $OUT/wg-bench.txt
at bench
if [ "${MEMCHECK:-1}" = 1 ]; then
	(cd kernels/cuda && timeout -k 5 60 compute-sanitizer --tool memcheck /tmp/bin/cuda.test -test.count=1 -test.short \
		-test.run 'TestAttentionPrefillWG/128_after_3000' >$OUT/wg-memcheck.txt 2>&1; echo "rc=$?" >>$OUT/wg-memcheck.txt)
	tail -3 $OUT/wg-memcheck.txt
	at memcheck
fi
wait_model
at model
BENCH_LIMIT=${BENCH_LIMIT:-180} run_allbars
if grep -q H200 "$OUT/gpu.txt"; then
	timeout -k 5 "${CHAT_LIMIT:-120}" /tmp/bin/cohort bench --chat --model $M --device cuda >$OUT/chat.txt 2>&1
	grep -E 'hit rate|TTFT|identical|rror' $OUT/chat.txt | head -16
	at chat
fi
for m in ${PF_MODES:-COHORT_CUDA_FLASH_WG=0 COHORT_CUDA_FLASH_WG=pipe}; do
	n=$(mode_name $m)
	# shellcheck disable=SC2046
	timeout -k 5 60 env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 4 \
		--prefill 1024,8192 --prefill-runs 3 --ttft-len 0 >$OUT/pf-$n.txt 2>&1
	echo "== $n: $(grep -E '^prefill|rror' $OUT/pf-$n.txt | tr '\n' ' ')"
done
at nowg
if [ "${STEPS:-1}" = 1 ]; then
	COHORT_STEP_TIMING=steps timeout -k 5 60 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 4 \
		--prefill 8192 --prefill-runs 2 --ttft-len 0 >$OUT/steps8k.txt 2>&1
	grep -E 'other step|^prefill|rror' $OUT/steps8k.txt | tail -8
	at steps8k
fi
at done
