#!/usr/bin/env bash
# Issue 6 acceptance on the GPU machine: fidelity of the CUDA backend against
# Hugging Face transformers, and `cohort bench` beside the bandwidth floor and
# HF's generate. From the repository root, with a prebuilt CUDA binary:
#
#	CGO_ENABLED=1 go build -tags cuda -ldflags='-s -w' -o out/cohort ./cmd/cohort   # here
#	bash tools/cuda/fidelity.sh [out/cohort]                                        # there (carry out/)
#
# Stages (each under `timeout`, each capped by what is left of the overall
# budget; a failed or skipped stage does not stop the next):
#   1. make-model --preset 4b-shape into $WORK/m4b
#   2. seeded random prompts of $LENS tokens (tools/hfref/bf16ref.py ids)
#   3. cohort score --device cuda at $POSITIONS (log-softmax rows to a file)
#   4. bf16ref.py logprobs: HF bf16 (and f32) on the same ids: top-8 |Δ| mean/p99/max, top-1
#   5. tiny fixtures (testdata/hf): cohort score (all positions) and greedy 32 tokens on CUDA,
#      the CPU backend as a second reference, then bf16ref.py fixtures against HF bf16 and f32
#   6. hfbench.py: HF generate decode/prefill/TTFT on the 4b-shape model
#   7. cohort bench --device cuda with --hf-json
# Files in $OUT (at most 7): fidelity.log (everything), summary.txt, fidelity-4b.json,
# fidelity-fixtures.json, fixtures-cuda-vs-cpu.json, hfbench.json, bench.json.
#
# Environment knobs: BUDGET (seconds for the whole script, default 510), LENS (default
# 1,128,1024,8192), POSITIONS (default stride:32), BATCHES (default 1,8,32,64,128,256),
# PREFILL (default 1024,8192), TTFT_LEN (default 1024), DEVICE and PRESET (default cuda and
# 4b-shape; DEVICE=cpu PRESET=tiny smoke-tests the script without a GPU),
# HF_DTYPES (reference dtypes, default bf16,f32), HF_BATCHES and HF_BUDGET (hfbench.py's batches,
# default BATCHES, and time budget, default 120 s), SCORE_FLAGS / BENCH_FLAGS (extra flags for
# cohort score+generate / bench), STAGES (default "model ids score ref fixtures hfbench bench"),
# WORK (scratch, default /tmp/fidelity).
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
bin=$(realpath "${1:-out/cohort}")
OUT=${OUT:-/tmp/fidelity-out}
WORK=${WORK:-/tmp/fidelity}
BUDGET=${BUDGET:-510}
LENS=${LENS:-1,128,1024,8192}
POSITIONS=${POSITIONS:-stride:32}
BATCHES=${BATCHES:-1,8,32,64,128,256}
HF_DTYPES=${HF_DTYPES:-bf16,f32}
SCORE_FLAGS=${SCORE_FLAGS:-}
BENCH_FLAGS=${BENCH_FLAGS:-}
STAGES=${STAGES:-model ids score ref fixtures hfbench bench}
DEVICE=${DEVICE:-cuda}     # cpu: a local smoke test of this script (with PRESET=tiny)
PRESET=${PRESET:-4b-shape}
PREFILL=${PREFILL:-1024,8192}
TTFT_LEN=${TTFT_LEN:-1024}
hfdev=cuda
[ "$DEVICE" = cpu ] && hfdev=cpu
mkdir -p "$OUT" "$WORK"
start=$(date +%s)
ref="python3 $root/tools/hfref/bf16ref.py"
m4b=$WORK/m4b
fx=$WORK/fixtures
summary=()
# Compound stages run as `bash -c` under timeout; they read these.
export bin root ref fx OUT WORK SCORE_FLAGS DEVICE

want() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
elapsed() { echo $(($(date +%s) - start)); }

# stage NAME LIMIT CMD...: run CMD under timeout min(LIMIT, budget left - 5 s). A CMD that is
# a shell function of this script runs as `bash -c` with the function's definition.
stage() {
	local name=$1 limit=$2
	shift 2
	local left=$((start + BUDGET - $(date +%s) - 5))
	((limit > left)) && limit=$left
	echo
	echo "=================== [t=$(elapsed)s] $name (limit ${limit}s) ==================="
	if ((limit < 10)); then
		echo "SKIPPED: the budget of ${BUDGET}s is spent"
		summary+=("$name: skipped (budget)")
		return 1
	fi
	local t0 rc
	t0=$(date +%s)
	if [ "$(type -t "$1")" = function ]; then
		timeout -k 10 "$limit" bash -c "$(declare -f "$1")"'; "$@"' stage "$@"
	else
		timeout -k 10 "$limit" "$@"
	fi
	rc=$?
	local msg="rc $rc"
	((rc == 124 || rc == 137)) && msg="TIMED OUT after ${limit}s"
	echo "--- $name: $msg in $(($(date +%s) - t0))s"
	summary+=("$name: $msg in $(($(date +%s) - t0))s")
	return $rc
}

fixture_run() {
	local ok=0 ids name dir
	for ids in "$fx"/*.ids.json; do
		name=$(basename "$ids" .ids.json)
		dir=$root/testdata/hf/$name
		echo "- $name"
		# shellcheck disable=SC2086
		"$bin" score --device "$DEVICE" --model "$dir" --ids-file "$ids" --positions all --out "$fx/$name.safetensors" $SCORE_FLAGS || ok=1
		# shellcheck disable=SC2086
		"$bin" generate --device "$DEVICE" --model "$dir" --ids-file "$ids" --max-tokens 32 --ignore-eos --json $SCORE_FLAGS \
			>"$fx/$name.greedy.json" || ok=1
		"$bin" score --device cpu --model "$dir" --ids-file "$ids" --positions all --out "$fx/cpu/$name.safetensors" >/dev/null || ok=1
	done
	return $ok
}

compare_cpu() {
	local rc=0 f name
	for f in "$fx"/cpu/*.safetensors; do
		name=$(basename "$f" .safetensors)
		echo "- $name: cohort cuda vs cohort cpu (the f32 oracle)"
		$ref compare --ref "$f" --got "$fx/$name.safetensors" --json "$fx/$name.cuda-vs-cpu.json" | grep -E '^all' || rc=1
	done
	python3 -c 'import glob, json, os, sys
out = {os.path.basename(p).split(".")[0]: json.load(open(p)) for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.cuda-vs-cpu.json")))}
json.dump(out, open(sys.argv[2], "w"), indent=2)' "$fx" "$OUT/fixtures-cuda-vs-cpu.json"
	return $rc
}

bench_run() {
	"$bin" bench "$@" | tee "$WORK/bench.out"
	return "${PIPESTATUS[0]}"
}

main() {
echo "fidelity.sh: $(date -u +%FT%TZ), binary $bin, device $DEVICE, model $PRESET, budget ${BUDGET}s, lengths $LENS, positions $POSITIONS, batches $BATCHES"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true
python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'
[ -x "$bin" ] || { echo "FATAL: no executable $bin (build it with: CGO_ENABLED=1 go build -tags cuda -ldflags='-s -w' -o out/cohort ./cmd/cohort)"; exit 1; }

# --- 4b-shape model -------------------------------------------------------------------------
if want model; then
	if [ -s "$m4b/model.safetensors" ]; then
		echo "reusing $m4b"
	else
		stage "make-model $PRESET" 150 "$bin" make-model --preset "$PRESET" --out "$m4b"
	fi
fi
if want ids; then
	stage "prompts $LENS" 30 $ref ids --model "$m4b" --lens "$LENS" --seed 1 --out "$WORK/ids4b.json"
fi
if want score; then
	rm -f "$WORK/cohort4b.safetensors"
	# shellcheck disable=SC2086
	stage "cohort score $PRESET ($DEVICE)" 180 "$bin" score --device "$DEVICE" --model "$m4b" --ids-file "$WORK/ids4b.json" \
		--positions "$POSITIONS" --out "$WORK/cohort4b.safetensors" $SCORE_FLAGS
fi
if want ref; then
	if [ -s "$WORK/cohort4b.safetensors" ]; then
		stage "HF reference $PRESET ($HF_DTYPES)" 200 $ref logprobs --model "$m4b" --ids "$WORK/ids4b.json" \
			--cohort "$WORK/cohort4b.safetensors" --dtypes "$HF_DTYPES" --time-budget 120 --label "$PRESET" --device $hfdev \
			--json "$OUT/fidelity-4b.json"
	else
		echo "no cohort score output for the $PRESET model: HF reference skipped"
		summary+=("HF reference $PRESET: skipped (no cohort output)")
	fi
fi

# --- tiny fixtures -------------------------------------------------------------------------
if want fixtures; then
	mkdir -p "$fx/cpu"
	$ref fixture-ids --root "$root/testdata/hf" --out-dir "$fx"
	stage "cohort on the tiny fixtures ($DEVICE + cpu)" 90 fixture_run
	stage "fixtures: cohort $DEVICE vs cohort cpu" 30 compare_cpu
	stage "fixtures: cohort $DEVICE vs HF ($HF_DTYPES)" 150 $ref fixtures --root "$root/testdata/hf" --cohort-dir "$fx" \
		--dtypes "$HF_DTYPES" --time-budget 120 --label fixtures --device $hfdev --json "$OUT/fidelity-fixtures.json"
fi

# --- benchmarks ----------------------------------------------------------------------------
if want hfbench; then
	stage "HF generate baseline (bf16)" 180 python3 "$root/tools/hfref/hfbench.py" --model "$m4b" --dtypes bf16 \
		--batch "${HF_BATCHES:-$BATCHES}" --prefill "$PREFILL" --ttft-len "$TTFT_LEN" --new-tokens 8 --time-budget "${HF_BUDGET:-120}" --out "$OUT/hfbench.json" \
		--device $hfdev
fi
if want bench; then
	hf=()
	[ -s "$OUT/hfbench.json" ] && hf=(--hf-json "$OUT/hfbench.json")
	rm -f "$WORK/bench.out"
	# shellcheck disable=SC2086
	stage "cohort bench ($DEVICE)" 240 bench_run --model "$m4b" --device "$DEVICE" --batch "$BATCHES" --prefill "$PREFILL" \
		--decode-tokens 32 --ttft-len "$TTFT_LEN" --json "$OUT/bench.json" "${hf[@]}" $BENCH_FLAGS
fi

# --- summary -------------------------------------------------------------------------------
{
	echo "fidelity.sh summary ($(date -u +%FT%TZ), $(elapsed)s of ${BUDGET}s)"
	printf '  %s\n' "${summary[@]}"
	echo
	echo "$PRESET logprobs (top-8 |Δ| vs HF; pass: mean <= 0.02, p99 <= 0.08):"
	grep -E '^  (len=[0-9]+|all) vs hf-' "$OUT/fidelity.log" | grep -v fixtures || echo "  (none)"
	echo
	echo "tiny fixtures:"
	grep -E '^(fixtures vs|greedy vs)' "$OUT/fidelity.log" || echo "  (none)"
	grep -E '^  greedy 32 tokens vs' "$OUT/fidelity.log" | cut -c1-200
	echo
	[ -s "$WORK/bench.out" ] && sed -n '/^cohort bench:/,$p' "$WORK/bench.out"
} >"$OUT/summary.txt"
echo
cat "$OUT/summary.txt"
ls -la "$OUT"
}

main 2>&1 | tee "$OUT/fidelity.log"
