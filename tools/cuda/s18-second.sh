#!/bin/bash
# The eighteenth session's second device call, never run then (carry out/ with cohort.gz and
# cuda.test.gz built from main):
#   0. the tests of the eighteenth session's kernel changes, -short: the
#      wgmma flash entries with descriptors stepped by addition, the _wgc
#      twins (the next tile's copies issued under S) and the reordered _wgp
#      ones (S waited for before P·V goes out: no C7514 serialization;
#      TestAttentionPrefillWG wants the _ldm bits of each), the 8-wide SwiGLU
#      (TestSwiGLULinearBF16Products turns it on and wants swiglu4's bits),
#      and the whole model over a bf16 cache;
#   1. BenchmarkAttentionPrefillWG (ldm/wg, ldm/wgp, ldm/wgt and ldm/wgc in
#      one process; the first call measured ldm/wg 1.30 and ldm/wgp 0.99 at
#      8k);
#   2. the 1k and 8k prefill through cohort bench by default (the _wg
#      entries), with COHORT_CUDA_FLASH_WG=copies, COHORT_CUDA_SWIGLU8=1 and
#      COHORT_CUDA_FLASH_WG=0 (MODES);
#   3. every bar of issues 11 and 12 (run_allbars; BARS=0 leaves it out).
# On an H200 it also runs the prefix cache's chat benchmark (issue 17's last
# point) after the tests, and the prefill through cohort bench by default
# only. Files in $OUT: gpu.txt, tests.txt, wg-bench.txt, allbars.txt and,
# on an H200, chat.txt.
export OUT=${OUT:-/tmp/s18-second}
. tools/cuda/run-lib.sh
note_gpu
make_model
run_tests 150 'TestAttentionPrefillWG|TestSwiGLULinear|TestModelKVBF16|TestFlashWG'
modes=${MODES:-"default COHORT_CUDA_FLASH_WG=copies COHORT_CUDA_SWIGLU8=1 COHORT_CUDA_FLASH_WG=0"}
grep -q H200 "$OUT/gpu.txt" && modes=default
run_chat
(cd kernels/cuda && timeout -k 5 90 /tmp/bin/cuda.test -test.run '^$' -test.bench 'BenchmarkAttentionPrefillWG' -test.benchtime=1x \
	>$OUT/wg-bench.txt 2>&1)
grep -E 'Benchmark|FAIL' $OUT/wg-bench.txt | sed -E 's/ +[0-9]+ ns\/op//'
at bench
wait_model
at model
for m in $modes; do
	# shellcheck disable=SC2046
	env $(mode_env $m) timeout -k 5 60 /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 4 \
		--prefill 1024,8192 --prefill-runs 3 --ttft-len 0 >/tmp/pf.txt 2>&1
	echo "== $m: $(grep -E '^prefill|rror' /tmp/pf.txt | tr '\n' ' ')" | tee -a $OUT/wg-bench.txt
done
at prefill
if [ "${BARS:-1}" = 1 ]; then
	BENCH_LIMIT=${BENCH_LIMIT:-220} run_allbars
	rm -f $OUT/bench.json
fi
at done
