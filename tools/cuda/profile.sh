#!/bin/sh
# Profiles batch-1 decode of the 4b-shape model on one GPU: where the time of
# a decode step goes (GPU kernels vs host/launch overhead), per kernel.
# From the repository root on the GPU machine, after
#
#	mkdir -p out && CGO_ENABLED=1 go build -tags cuda -ldflags="-s -w" -o out/cohort ./cmd/cohort
#
# (carry out/ to the machine), run
#
#	tools/cuda/profile.sh [path/to/cohort]
#
# Stages (results in $OUT, or /tmp/cohort-profile):
#  0. env.txt       GPU, driver, which profilers exist;
#  1. bench.txt     a plain `cohort bench` (batch 1, 64 decode tokens): wall ms/token, no profiler;
#  2. trace pass    the short bench run under nsys (CUDA trace) if nsys exists, else under ncu
#                   with one cheap metric (gpu__time_duration) for every launch; the launch
#                   sequence is cut into engine steps at each embedding_f32 launch (one per
#                   step; its grid is the number of tokens, so grid 1 = a batch-1 decode step);
#                   steps.txt: launches, kernel time, copies and wall time per step;
#                   api.csv: nsys CUDA API summary (host time per cuLaunchKernel etc.);
#  3. ncu.csv       Nsight Compute (speed-of-light DRAM/SM throughput, DRAM bytes, duration)
#                   for a window of exactly two decode steps of the measured run;
#  4. table.md      per-kernel table for one decode step, summed against the step wall time.
#
# Cost (H200, 2026-11-29): make-model 24 s, plain bench ~35 s (engine load 27 s). The machine had
# ncu but no nsys, and the ncu trace pass over all 9,568 launches of the short run took most of a
# 7-minute limit, so the whole script needs about 10 minutes. The launch indices do not change
# with the code unchanged: 572 kernels per decode step, decode step 10 starts at launch 6032;
# a window of the last 4-layer group plus the LM head is --launch-skip 6531 --launch-count 73
# (43 s with engine load), which is what docs/gpu-profile.md used for stage 3.
set -u
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/cohort-profile}
mkdir -p "$O"
BIN=$(realpath "${1:-out/cohort}")
M=/tmp/m4b
PATH=$PATH:/usr/local/cuda/bin
for d in /opt/nvidia/nsight-compute/* /opt/nvidia/nsight-systems/*/bin /usr/local/cuda/nsight-systems-*/bin /usr/local/cuda/nsight-compute-*; do
	[ -d "$d" ] && PATH=$PATH:$d
done
export PATH

{
	date -u
	nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader
	echo "nsys: $(command -v nsys) $(nsys --version 2>/dev/null | head -1)"
	echo "ncu: $(command -v ncu) $(ncu --version 2>/dev/null | tail -1)"
	echo "compute-sanitizer: $(command -v compute-sanitizer)"
} >"$O/env.txt" 2>&1
cat "$O/env.txt"

t0=$(date +%s)
[ -f "$M/config.json" ] || "$BIN" make-model --preset 4b-shape --out "$M" >/dev/null || exit 1
echo "make-model: $(($(date +%s) - t0)) s"

# Stage 1: wall time per decode step, no profiler.
t0=$(date +%s)
timeout 150 "$BIN" bench --model "$M" --device cuda --batch 1 --prompt-len 16 --decode-tokens 64 \
	--prefill 16 --ttft-len 0 >"$O/bench.txt" 2>&1
grep -E '^decode' "$O/bench.txt"
echo "plain bench: $(($(date +%s) - t0)) s"

# The short run that is traced and profiled: warm-up (prefill + 3 decode
# steps, prefill + 2 decode steps), the measured decode run (prefill + 7
# decode steps), one 16-token prefill.
SHORT="$BIN bench --model $M --device cuda --batch 1 --prompt-len 16 --decode-tokens 8 --prefill 16 --ttft-len 0"

# Stage 2: the launch sequence, as "kind,name,grid,start_ns,dur_ns" lines in seq.csv
# (kind k = kernel, m = memcpy/memset; start empty under ncu).
t0=$(date +%s)
if command -v nsys >/dev/null; then
	timeout 200 nsys profile -t cuda --sample=none --cpuctxsw=none -o /tmp/cohort-trace -f true $SHORT >/tmp/nsys-run.log 2>&1
	nsys stats -r cuda_gpu_trace -f csv -o /tmp/cohort-trace /tmp/cohort-trace.nsys-rep >/dev/null 2>&1
	nsys stats -r cuda_api_sum -f csv -o /tmp/cohort-trace /tmp/cohort-trace.nsys-rep >/dev/null 2>&1
	cp /tmp/cohort-trace_cuda_api_sum.csv "$O/api.csv" 2>/dev/null
	python3 - /tmp/cohort-trace_cuda_gpu_trace.csv >/tmp/seq.csv <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def col(r, *names):
    for n in names:
        for k in r:
            if k.startswith(n):
                return r[k]
    return ""
rows.sort(key=lambda r: int(col(r, "Start") or 0))
for r in rows:
    name = col(r, "Name")
    kind = "m" if name.startswith("[CUDA") else "k"
    g = 1
    for a in ("GrdX", "GrdY", "GrdZ"):
        v = col(r, a)
        g *= int(v) if v.strip().isdigit() else 1
    print("%s\t%s\t%d\t%s\t%s" % (kind, name.replace("\t", " "), g, col(r, "Start"), col(r, "Duration")))
EOF
	echo "trace pass (nsys): $(($(date +%s) - t0)) s"
else
	timeout 300 ncu --target-processes all --cache-control none --clock-control none \
		--metrics gpu__time_duration.sum,launch__grid_size --csv --page raw --print-units base \
		$SHORT >/tmp/ncu-pass1.csv 2>/tmp/ncu-pass1.log
	python3 - /tmp/ncu-pass1.csv >/tmp/seq.csv <<'EOF'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.DictReader(lines))[1:]  # row 0: units
for r in rows:
    print("k\t%s\t%s\t\t%s" % (r["Kernel Name"], r["launch__grid_size"].replace(",", ""), r["gpu__time_duration.sum"].replace(",", "")))
EOF
	echo "trace pass (ncu, one metric per launch): $(($(date +%s) - t0)) s"
fi

# Cut into steps; pick the window (two decode steps in the middle of the
# measured 7-step decode run) and write steps.txt.
python3 - /tmp/seq.csv "$O/steps.txt" >/tmp/window.txt <<'EOF'
import sys, statistics as st
seq = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
out = open(sys.argv[2], "w")
kidx = 0
steps = []  # dicts: first launch index, grid, rows
for kind, name, grid, start, dur in seq:
    if kind == "k":
        if name.startswith("embedding_f32"):
            steps.append({"k0": kidx, "grid": int(grid), "rows": []})
        kidx += 1
    if steps:
        steps[-1]["rows"].append((kind, name, int(grid), int(start) if start else None, float(dur) if dur else 0.0))
print("launches before the first step: %d" % (steps[0]["k0"] if steps else kidx), file=out)
print("step k0 tokens kernels kernel_ms copies copy_ms span_ms(first kernel start to next step's)", file=out)
for i, s in enumerate(steps):
    ks = [r for r in s["rows"] if r[0] == "k"]
    ms = [r for r in s["rows"] if r[0] == "m"]
    s["nk"] = len(ks)
    s["kms"] = sum(r[4] for r in ks) / 1e6
    s["mms"] = sum(r[4] for r in ms) / 1e6
    s["span"] = None
    if i + 1 < len(steps) and ks[0][3] is not None:
        nxt = [r for r in steps[i + 1]["rows"] if r[0] == "k"][0]
        s["span"] = (nxt[3] - ks[0][3]) / 1e6
    print("%d %d %d %d %.3f %d %.3f %s" % (i, s["k0"], s["grid"], s["nk"], s["kms"], len(ms), s["mms"],
          "%.3f" % s["span"] if s["span"] is not None else "-"), file=out)
# decode runs: maximal runs of consecutive grid-1 steps; the longest, latest one is the measured run
runs, cur = [], []
for i, s in enumerate(steps):
    if s["grid"] == 1:
        cur.append(i)
    else:
        if cur: runs.append(cur)
        cur = []
if cur: runs.append(cur)
best = max(runs, key=len)
win = best[2:4] if len(best) >= 5 else best[:2]
skip = steps[win[0]]["k0"]
count = sum(steps[i]["nk"] for i in win)
# decode steps followed by another decode step (span is a whole decode step)
ds = [steps[i] for r in runs for i in r[:-1] if steps[i]["span"] is not None]
if ds:
    print("decode steps with a following decode step: %d; median span %.3f ms, median kernel time %.3f ms, "
          "median copy time %.3f ms, kernels %s" % (len(ds), st.median(s["span"] for s in ds),
          st.median(s["kms"] for s in ds), st.median(s["mms"] for s in ds), sorted({s["nk"] for s in ds})), file=out)
# one decode step's launch sequence, collapsed into runs of the same kernel
s = steps[win[0]]
print("\nlaunch sequence of decode step %d (kind name grid dur_us):" % win[0], file=out)
for r in s["rows"][:400]:
    print("%s %s %d %.1f" % (r[0], r[1][:90], r[2], r[4] / 1e3), file=out)
print("window steps %s" % win, file=out)
print(skip, count)
EOF
read SKIP COUNT </tmp/window.txt
echo "ncu window: --launch-skip $SKIP --launch-count $COUNT (two decode steps)"
head -30 "$O/steps.txt"

# Stage 3: Nsight Compute on the window. Clocks are not locked (boost, as in
# the plain run); caches are flushed before each kernel (the default), which
# matches decode, where 16 GB of f32 weights never stay in the 60 MB L2.
t0=$(date +%s)
timeout 300 ncu --target-processes all --launch-skip "$SKIP" --launch-count "$COUNT" --clock-control none \
	--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size \
	--csv --page raw --print-units base $SHORT >/tmp/ncu-window.csv 2>/tmp/ncu-window.log
grep -v '^==PROF==' /tmp/ncu-window.csv | grep '^"' >"$O/ncu.csv"
tail -3 /tmp/ncu-window.log
echo "ncu window pass: $(($(date +%s) - t0)) s"

# Stage 4: the per-kernel table (one decode step = the window / 2).
python3 - "$O/ncu.csv" /tmp/seq.csv "$SKIP" "$COUNT" "$O/bench.txt" >"$O/table.md" <<'EOF'
import csv, re, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))[1:]
def f(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0
skip, count = int(sys.argv[3]), int(sys.argv[4])
seq = [l.rstrip("\n").split("\t") for l in open(sys.argv[2]) if l.strip()]
ks = [r for r in seq if r[0] == "k"][skip:skip + count]
steps = 2.0
def short(n):
    n = re.sub(r"\(.*", "", n)
    return n[:48]
agg = collections.OrderedDict()
for i, r in enumerate(rows):
    key = (short(r["Kernel Name"]), r["launch__grid_size"])
    a = agg.setdefault(key, dict(n=0, t=0.0, rb=0.0, wb=0.0, pct=0.0, sm=0.0, tt=0.0))
    t = f(r["gpu__time_duration.sum"])
    a["n"] += 1
    a["t"] += t
    a["rb"] += f(r["dram__bytes_read.sum"])
    a["wb"] += f(r["dram__bytes_write.sum"])
    a["pct"] += t * f(r["dram__throughput.avg.pct_of_peak_sustained_elapsed"])
    a["sm"] += t * f(r["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
    if i < len(ks) and ks[i][4]:
        a["tt"] += float(ks[i][4])
tot = sum(a["t"] for a in agg.values())
totb = sum(a["rb"] + a["wb"] for a in agg.values())
tott = sum(a["tt"] for a in agg.values())
print("kernels profiled: %d (%d per step); names in ncu order match the trace: %s" % (
    len(rows), len(rows) / steps, all(short(r["Kernel Name"]) == short(k[1]) for r, k in zip(rows, ks))))
print()
print("| kernel | grid | launches/step | ncu µs/step | trace µs/step | % of kernel time | DRAM MB/step | GB/s | DRAM % of peak | SM % | µs at 4.3 TB/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (name, grid), a in sorted(agg.items(), key=lambda kv: -kv[1]["t"]):
    b = (a["rb"] + a["wb"]) / steps
    t = a["t"] / steps
    print("| %s | %s | %g | %.1f | %s | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f |" % (
        name, grid, a["n"] / steps, t / 1e3, "%.1f" % (a["tt"] / steps / 1e3) if tott else "-", 100 * a["t"] / tot,
        b / 1e6, b / t if t else 0, a["pct"] / a["t"] if a["t"] else 0, a["sm"] / a["t"] if a["t"] else 0, b / 4.3e12 * 1e6))
print()
print("sum per step: ncu kernel time %.3f ms, trace kernel time %s ms, DRAM %.1f MB -> %.3f ms at 4.3 TB/s; "
      "effective %.0f GB/s over kernel time" % (tot / steps / 1e6, "%.3f" % (tott / steps / 1e6) if tott else "-",
      totb / steps / 1e6, totb / steps / 4.3e12 * 1e3, totb / tot if tot else 0))
EOF
cat "$O/table.md"
cp /tmp/ncu-window.log "$O/ncu.log" 2>/dev/null
ls -la "$O"
