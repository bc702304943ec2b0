#!/bin/bash
# One device call that checks the storage options side by side (carry out/ with
# cohort.gz, cuda.test.gz):
#   1. the GPU suite while the 4b-shape model is made;
#   2. cohort score at $LENS in each mode of $MODES (a mode is a list of
#      VAR=value settings joined by "+", "default" for none), then HF bf16 and
#      f32 once on the same ids (saved), and every mode against HF f32 (and
#      HF bf16 against HF f32, the bar);
#   3. with BENCH=1, cohort bench (decode at $BATCHES, prefill $PREFILL, TTFT)
#      in each mode, one after the other on the same GPU.
# Files in $OUT: cuda-tests.txt, fidelity.txt, bench-<mode>.txt.
# The suite's limit: TEST_LIMIT (run-lib.sh).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/modes-run}
. tools/cuda/run-lib.sh
MODES=${MODES:-default COHORT_CUDA_KV=bf16 COHORT_CUDA_GDN_STATE=bf16 COHORT_CUDA_KV=bf16+COHORT_CUDA_GDN_STATE=bf16}
LENS=${LENS:-1,128,1024,8192}
W=/tmp/modes
mkdir -p $W
make_model
[ "${TESTS:-1}" = 1 ] && run_suite
wait_model
ref="python3 tools/hfref/bf16ref.py"
if [ "${FIDELITY:-1}" = 1 ]; then
	{
	$ref ids --model $M --lens "$LENS" --seed 1 --out $W/ids.json
	for m in $MODES; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		timeout -k 5 120 env $(mode_env $m) /tmp/bin/cohort score --device cuda --model $M --ids-file $W/ids.json \
			--positions stride:32 --out $W/$n.safetensors 2>&1 | tail -2
		at "score $n"
	done
	first=$(mode_name ${MODES%% *})
	timeout -k 5 240 $ref logprobs --model $M --ids $W/ids.json --cohort $W/$first.safetensors --dtypes bf16,f32 \
		--time-budget 200 --label 4b-shape --save-hf $W/hf.safetensors --json $OUT/fidelity-4b.json 2>&1 | grep -E 'vs hf|wrote' | head -20
	at "HF"
	echo "=== HF bf16 vs HF f32 (the bar)"
	$ref compare --ref $W/hf.f32.safetensors --got $W/hf.bf16.safetensors 2>&1 | tail -6
	for m in $MODES; do
		n=$(mode_name $m)
		echo "=== $n vs HF f32"
		$ref compare --ref $W/hf.f32.safetensors --got $W/$n.safetensors 2>&1 | tail -6
	done
	} >$OUT/fidelity.txt 2>&1
	cat $OUT/fidelity.txt | grep -vE '^\s*$' | tail -50
	at fidelity
fi
if [ "${BENCH:-0}" = 1 ]; then
	for m in $MODES; do
		n=$(mode_name $m)
		# shellcheck disable=SC2046
		timeout -k 5 "${BENCH_LIMIT:-120}" env $(mode_env $m) /tmp/bin/cohort bench --model $M --device cuda \
			--batch "${BATCHES:-1,32,128,256}" --prompt-len 128 --decode-tokens 64 --prefill "${PREFILL:-1024,8192}" \
			--ttft-len 1024 ${BENCH_FLAGS:-} >$OUT/bench-$n.txt 2>&1
		echo "=== bench $n"; grep -v "captured CUDA graph" $OUT/bench-$n.txt | tail -${BENCH_TAIL:-16}
		at "bench $n"
	done
fi
