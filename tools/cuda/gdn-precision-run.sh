#!/bin/bash
# One device call for the chunked GDN rule's precision options (carry out/
# with cohort.gz and cuda.test.gz):
#   1. the GPU tests matching $CUDA_TESTS (default: the GDN tests) while
#      the 4b-shape model is made, and the tf32 variants' largest
#      differences;
#   2. BenchmarkGDNPrefill at 1,024 and 8,192 tokens (every entry pair side
#      by side, tf32state/new, tf32out/new and tf32all/new among them);
#   3. cohort bench's prefill (1k, 8k) and 1k TTFT in each of $MODES,
#      alternated twice;
#   4. fidelity against HF f32 at $LENS in each mode (modes-run.sh).
# Files in $OUT: cuda-tests.txt, gdn-bench.txt, bench-<mode>-<n>.txt,
# fidelity.txt.
OUT=${OUT:-/tmp/gdn-precision-run}
. tools/cuda/run-lib.sh
# The default is tf32all with bf16 weights (Backend.gdnChunk).
MODES=${MODES:-default COHORT_CUDA_GDN_CHUNK=tf32 COHORT_CUDA_GDN_CHUNK=tf32out COHORT_CUDA_GDN_CHUNK=exact}
make_model
CUDA_TESTS=${CUDA_TESTS:-TestGDN} TEST_LIMIT=${TEST_LIMIT:-150} run_suite
grep -A40 -E "=== RUN .*/tf32" $OUT/cuda-tests.txt | grep -oE "relative difference [0-9.e-]+ \(tol [^)]+\)" | sort -k3 -g | tail -2
(cd kernels/cuda && timeout -k 5 100 /tmp/bin/cuda.test -test.run '^$' -test.bench 'BenchmarkGDNPrefill/T(1024|8192)$' \
	-test.benchtime 1x >$OUT/gdn-bench.txt 2>&1)
grep -E "^Benchmark|tf32" $OUT/gdn-bench.txt | head -8
at gdn-bench
wait_model
for n in 1 2; do
	for m in $MODES; do
		# shellcheck disable=SC2046
		timeout -k 5 80 env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda --batch 1 --decode-tokens 2 \
			--prompt-len 16 --prefill 1024,8192 --prefill-runs 3 --ttft-len 1024 --ttft-runs 5 >$OUT/bench-$(mode_name $m)-$n.txt 2>&1
		echo "== $(mode_name $m) ($n)"; grep -E "^prefill|^TTFT" $OUT/bench-$(mode_name $m)-$n.txt
	done
	at "benches $n"
done
TESTS=0 FIDELITY=1 BENCH=0 LENS=${LENS:-1,128,1024,8192} MODES="$MODES" OUT=$OUT bash tools/cuda/modes-run.sh 2>&1 | grep -E "^===|^len|^all" | tail -24
