#!/bin/bash
# Tensor parallelism on GPUs over NCCL (issue 7), on a machine with 2 (or
# more) GPUs. From the repository root, with prebuilt binaries in out/
# (built on the development machine, stripped so the tree stays small):
#
#   CGO_ENABLED=1 go build  -tags cuda -ldflags='-s -w' -o out/cohort     ./cmd/cohort
#   CGO_ENABLED=1 go test -c -tags cuda -ldflags='-s -w' -o out/nccl.test  ./nccl
#   CGO_ENABLED=1 go test -c -tags cuda -ldflags='-s -w' -o out/cuda.test  ./kernels/cuda
#   CGO_ENABLED=1 go test -c -tags cuda -ldflags='-s -w' -o out/chaos.test ./cmd/cohort/gpuchaos
#   CGO_ENABLED=1 go test -c -tags cuda -ldflags='-s -w' -o out/remote.test ./actors/remote
#
#   tools/cuda/tp-test.sh            # everything, about 8-10 minutes
#   tools/cuda/tp-test.sh tests      # steps 1-4 (about 3 minutes)
#   tools/cuda/tp-test.sh bench      # step 5 (about 3-4 minutes)
#   tools/cuda/tp-test.sh workers    # step 6 (about 2-3 minutes; needs out/remote.test, out/nccl.test)
#
# Steps (each with its own time limit; logs in $OUT, or /tmp/tp-test):
#   1. nccl:    NCCL all-reduce/all-gather on 2 and all GPUs, abort of a rank
#               stuck in a collective (out/nccl.test -test.run Device)
#   2. tp:      TP=2 (one-shot and NCCL-only) and TP=4 (with 4 GPUs) logits of
#               a generated model against TP=1, the one-shot kernel's exact
#               sums, in a graph, and its abort
#   3. latency: all-reduce µs per call, NCCL vs one-shot, 4-256 KiB, eager and
#               in a CUDA graph (a table in latency.log)
#   4. chaos:   the engine at TP=2 under load, 7 rank faults mid-decode,
#               recovery detect -> ready
#   5. bench:   `cohort bench` batch 1/32/128 decode on the 4b-shape preset,
#               TP=1 vs TP=2 (one-shot) vs TP=2 (COHORT_ALLREDUCE=nccl)
#   6. workers: GPU ranks in `cohort worker`-style processes (issue 19), one
#               GPU each, NCCL between them: TP=2 logprobs and tokens against
#               in-process TP=2 (f32 weights; TestRemoteGPUMatchesInProcess),
#               kill -9 of a worker under 16 streaming clients
#               (TestRemoteGPUKillWorker), and NCCL all-reduce µs per call,
#               4-256 KiB, in one process vs two (workers-latency.log)
set -u
OUT=${OUT:-/tmp/tp-test}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/out"
what=${1:-all}

export NCCL_NVLS_ENABLE=0
nccl_dir=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

# step NAME LIMIT_S DIR CMD...: runs CMD in DIR under a time limit, logs to
# $OUT/NAME.log, and prints the verdicts and the interesting lines.
step() {
	local name=$1 limit=$2 dir=$3
	shift 3
	local start=$(date +%s)
	(cd "$dir" && timeout -k 10 "$limit" "$@") >"$OUT/$name.log" 2>&1
	local rc=$?
	note "== $name: exit $rc in $(($(date +%s) - start)) s"
	grep -E '^(--- |ok|FAIL|panic:)|^\s+\S+_test\.go:[0-9]+: ' "$OUT/$name.log" | grep -vE '^=== ' | head -60 | tee -a "$summary"
	if [ $rc -ne 0 ]; then
		tail -n 15 "$OUT/$name.log" | sed 's/^/    | /' | tee -a "$summary"
	fi
	return $rc
}

note "tp-test $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader | tee -a "$summary"
nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
ls "$nccl_dir" 2>/dev/null | tr '\n' ' ' | tee -a "$summary"
echo | tee -a "$summary"
case $what in
all) need="cohort nccl.test cuda.test chaos.test remote.test" ;;
tests) need="nccl.test cuda.test chaos.test" ;;
bench) need="cohort" ;;
workers) need="nccl.test remote.test" ;;
*) note "usage: $0 [all|tests|bench|workers]"; exit 2 ;;
esac
for f in $need; do
	[ -x "$bin/$f" ] || { note "missing $bin/$f: build it first (see the top of this script)"; exit 1; }
done

if [ "$what" = all ] || [ "$what" = tests ]; then
	step nccl 120 "$root/nccl" "$bin/nccl.test" -test.v -test.count=1 -test.run 'Device|AsDevice|Local' -test.timeout 110s
	step tp 180 "$root/kernels/cuda" "$bin/cuda.test" -test.v -test.count=1 \
		-test.run '^(TestCompileKernels|TestTensorParallelMatchesSingleGPU|TestOneShotAllReduce|TestOneShotAbort)$' -test.timeout 170s
	step latency 90 "$root/kernels/cuda" "$bin/cuda.test" -test.v -test.count=1 -test.run '^TestAllReduceLatency$' -test.timeout 80s
	step chaos 180 "$root/cmd/cohort/gpuchaos" "$bin/chaos.test" -test.v -test.count=1 -test.run '^TestGPUChaos$' -test.timeout 170s
fi

if [ "$what" = all ] || [ "$what" = workers ]; then
	step workers 300 "$root/actors/remote" "$bin/remote.test" -test.v -test.count=1 \
		-test.run '^(TestRemoteGPUMatchesInProcess|TestRemoteGPUKillWorker)$' -test.timeout 290s
	step workers-latency 90 "$root/nccl" "$bin/nccl.test" -test.v -test.count=1 -test.run '^TestAllReduceLatencyProcesses$' -test.timeout 80s
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
	model=/tmp/m4b
	if [ ! -f "$model/model.safetensors" ]; then
		step make-model 90 "$root" "$bin/cohort" make-model --preset 4b-shape --out "$model"
	fi
	common=(bench --model "$model" --device cuda --prompt-len 128 --decode-tokens 32 --prefill 1024 --ttft-len 0)
	step bench-tp1 120 "$root" "$bin/cohort" "${common[@]}" --batch 1,32,128 --tp 1 --json "$OUT/bench-tp1.json"
	step bench-tp2 120 "$root" "$bin/cohort" "${common[@]}" --batch 1,32,128 --tp 2 --json "$OUT/bench-tp2.json"
	step bench-tp2-nccl 90 "$root" env COHORT_ALLREDUCE=nccl "$bin/cohort" "${common[@]}" --batch 1 --tp 2 \
		--json "$OUT/bench-tp2-nccl.json"
	note "== decode through the engine, 4b-shape (f32 weights), prompt 128, 32 tokens"
	python3 - "$OUT" <<'PY' | tee -a "$summary"
import json, os, sys
out = sys.argv[1]
runs = {}
for name in ("tp1", "tp2", "tp2-nccl"):
    try:
        with open(os.path.join(out, "bench-%s.json" % name)) as f:
            runs[name] = {d["batch"]: d["ms_per_token"] for d in json.load(f)["decode"]}
    except (OSError, ValueError, KeyError) as e:
        print("  %s: no results (%s)" % (name, e))
print("  %6s %12s %18s %18s" % ("batch", "tp1 ms/tok", "tp2 one-shot", "tp2 nccl-only"))
for b in sorted(set().union(*[set(r) for r in runs.values()]) if runs else []):
    t1 = runs.get("tp1", {}).get(b)
    cells = []
    for name in ("tp2", "tp2-nccl"):
        v = runs.get(name, {}).get(b)
        cells.append("-" if v is None else ("%.3f (%.2fx)" % (v, v / t1) if t1 else "%.3f" % v))
    print("  %6d %12s %18s %18s" % (b, "-" if t1 is None else "%.3f" % t1, cells[0], cells[1]))
PY
fi
note "logs in $OUT"
