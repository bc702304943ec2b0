#!/usr/bin/env python3
"""Hugging Face transformers baseline for `cohort bench --hf-json` (issue 6), on one GPU.

    python3 tools/hfref/hfbench.py --model DIR --out hf.json [--dtypes bf16] [--batch 1,8,32]
        [--prompt-len 128] [--new-tokens 8] [--prefill 1024,8192] [--ttft-len 1024]
        [--time-budget 150]

DIR is a checkpoint written by `cohort make-model` (or any Qwen3.5 checkpoint in HF layout); it is
loaded as tools/hfref/bf16ref.py does. Per dtype, greedy, EOS off, TF32 off:

  decode   B random prompts of --prompt-len tokens (ids < 256, as cohort bench), one warm-up
           generate of 2 tokens, then generate(max_new_tokens=min_new_tokens=N) with a streamer
           that timestamps each step: ms/token = (last step - first step) / (N - 1), i.e. the
           decode phase only; tok/s = B (N - 1) / that time.
  prefill  one forward of an L-token prompt (use_cache, logits_to_keep=1) after a warm-up; the
           median of --prefill-runs.
  ttft     generate(max_new_tokens=1) on a --ttft-len prompt, wall time, median of --ttft-runs.

Measurements run in priority order (batch <= 32 decode, prefills, TTFT, then the larger batches)
and stop when --time-budget seconds have gone (the rest is listed under "skipped"); an
out-of-memory error is recorded for that measurement and the run goes on. `--device cpu` works on
the tiny fixtures (for a smoke test).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bf16ref  # noqa: E402  (loader, dtype switch, environment)

say = bf16ref.say


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


class Stamps:
    """A generate() streamer timestamping every generated step (its first put is the prompt)."""

    def __init__(self, sync):
        self.sync = sync
        self.times = []
        self.seen_prompt = False

    def put(self, value):
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.sync()
        self.times.append(time.perf_counter())

    def end(self):
        pass


class Bench:
    def __init__(self, model, device, vocab, torch):
        self.model, self.device, self.vocab, self.torch = model, device, vocab, torch

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def prompt(self, batch, length, seed):
        g = self.torch.Generator().manual_seed(seed)
        return self.torch.randint(0, self.vocab, (batch, length), generator=g).to(self.device)

    def generate(self, ids, n, streamer=None):
        torch = self.torch
        kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                  eos_token_id=None, pad_token_id=0, use_cache=True)
        if streamer is not None:
            kw["streamer"] = streamer
        with torch.no_grad():
            out = self.model.generate(ids, **kw)
        seqs = out if torch.is_tensor(out) else out.sequences
        if seqs.shape[1] != ids.shape[1] + n:
            raise RuntimeError(f"generate returned {seqs.shape[1] - ids.shape[1]} new tokens, want {n}")

    def decode(self, batch, prompt_len, new_tokens):
        ids = self.prompt(batch, prompt_len, 1000 + batch)
        self.generate(ids, 2)  # warm-up at this shape
        self.sync()
        st = Stamps(self.sync)
        t0 = time.perf_counter()
        self.generate(ids, new_tokens, st)
        self.sync()
        total = time.perf_counter() - t0
        if len(st.times) != new_tokens:
            raise RuntimeError(f"the streamer saw {len(st.times)} steps, want {new_tokens}")
        d = st.times[-1] - st.times[0]
        steps = new_tokens - 1
        return {"batch": batch, "ms_per_token": d / steps * 1e3, "tok_per_s": batch * steps / d, "steps": steps,
                "decode_s": d, "generate_total_s": total, "ttft_ms": (st.times[0] - t0) * 1e3}

    def prefill(self, length, runs):
        torch = self.torch
        ids = self.prompt(1, length, 2000 + length)

        def once():
            self.sync()
            t = time.perf_counter()
            with torch.no_grad():
                try:
                    self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
                except TypeError:
                    self.model(input_ids=ids, use_cache=True)
            self.sync()
            return time.perf_counter() - t

        once()  # warm-up
        times = [once() for _ in range(runs)]
        med = statistics.median(times)
        return {"tokens": length, "ms": med * 1e3, "tok_per_s": length / med, "runs_ms": [t * 1e3 for t in times]}

    def ttft(self, length, runs):
        ids = self.prompt(1, length, 3000 + length)
        self.generate(ids, 1)  # warm-up
        times = []
        for _ in range(runs):
            self.sync()
            t = time.perf_counter()
            self.generate(ids, 1)
            self.sync()
            times.append((time.perf_counter() - t) * 1e3)
        return {"prompt_tokens": length, "median_ms": statistics.median(times), "runs_ms": times}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (cohort make-model --preset 4b-shape)")
    ap.add_argument("--out", default="", help="write the results as JSON here (cohort bench --hf-json)")
    ap.add_argument("--dtypes", default="bf16", help="comma-separated: bf16, f32")
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=8, help="tokens per decode measurement (>= 3)")
    ap.add_argument("--prefill", default="1024,8192")
    ap.add_argument("--prefill-runs", type=int, default=3)
    ap.add_argument("--ttft-len", type=int, default=1024, help="0: skip")
    ap.add_argument("--ttft-runs", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--time-budget", type=float, default=150, help="seconds after the load; later measurements are skipped")
    args = ap.parse_args()
    if args.new_tokens < 3:
        bf16ref.die("--new-tokens must be at least 3")

    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        bf16ref.die("no CUDA device (use --device cpu for a smoke test)")
    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = bf16ref.parse_dtypes(args.dtypes)
    report = {
        "what": "Hugging Face transformers Qwen3_5ForCausalLM: generate (greedy, EOS off) decode ms/token, "
                "forward prefill, generate(1) TTFT",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": args.model,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "time_budget_s": args.time_budget,
        "results": [],
        "skipped": [],
    }
    report.update(bf16ref.env_info())
    model, info = bf16ref.load_hf(args.model, device, args.attn)
    report["hf"] = info
    say(f"HF transformers {report['transformers']}, torch {report['torch']}, {report.get('gpu', args.device)}; "
        f"loaded {info['params'] / 1e9:.3f}B params in {info['load_s']:.1f}s; GDN kernels {report['gdn_kernels']}")
    b = Bench(model, device, min(info["vocab"], 256), torch)
    batches = ints(args.batch)
    plan = [("decode", n) for n in batches if n <= 32]
    plan += [("prefill", n) for n in ints(args.prefill)]
    if args.ttft_len > 0:
        plan.append(("ttft", args.ttft_len))
    plan += [("decode", n) for n in batches if n > 32]
    deadline = time.time() + args.time_budget
    for dt in dtypes:
        bf16ref.set_dtype(model, dt)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        res = {"dtype": dt, "decode": [], "prefill": [], "ttft": None}
        for kind, n in plan:
            if time.time() > deadline:
                report["skipped"].append(f"{dt} {kind} {n}")
                say(f"  {dt} {kind} {n}: skipped (time budget)")
                continue
            t = time.perf_counter()
            try:
                if kind == "decode":
                    r = b.decode(n, args.prompt_len, args.new_tokens)
                    msg = f"{r['ms_per_token']:.2f} ms/token, {r['tok_per_s']:.1f} tok/s"
                elif kind == "prefill":
                    r = b.prefill(n, args.prefill_runs)
                    msg = f"{r['ms']:.1f} ms, {r['tok_per_s']:.0f} tok/s"
                else:
                    r = b.ttft(n, args.ttft_runs)
                    msg = f"median {r['median_ms']:.1f} ms"
            except torch.cuda.OutOfMemoryError as e:
                r = {"batch" if kind == "decode" else ("tokens" if kind == "prefill" else "prompt_tokens"): n,
                     "error": f"out of memory: {str(e).splitlines()[0]}"}
                msg = r["error"]
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001
                r = {"batch" if kind == "decode" else ("tokens" if kind == "prefill" else "prompt_tokens"): n,
                     "error": f"{type(e).__name__}: {e}"}
                msg = r["error"]
            r["wall_s"] = time.perf_counter() - t
            say(f"  {dt} {kind} {n}: {msg} ({r['wall_s']:.1f}s)")
            if kind == "ttft":
                res["ttft"] = r
            else:
                res[kind].append(r)
        res["decode"].sort(key=lambda r: r["batch"])
        res["prefill"].sort(key=lambda r: r["tokens"])
        if device.type == "cuda":
            res["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        report["results"].append(res)

    say("")
    say(f"HF transformers {report['transformers']} on {report.get('gpu', args.device)} "
        f"(prompt {args.prompt_len}, {args.new_tokens} new tokens, greedy)")
    for r in report["results"]:
        for d in r["decode"]:
            say(f"  {r['dtype']:>5} decode batch {d['batch']:>4}: " +
                (d["error"] if "error" in d else f"{d['ms_per_token']:9.2f} ms/token {d['tok_per_s']:10.1f} tok/s"))
        for p in r["prefill"]:
            say(f"  {r['dtype']:>5} prefill {p['tokens']:>6}: " +
                (p["error"] if "error" in p else f"{p['ms']:9.1f} ms {p['tok_per_s']:10.0f} tok/s"))
        if r["ttft"]:
            t = r["ttft"]
            say(f"  {r['dtype']:>5} TTFT {t['prompt_tokens']:>6}: " + (t["error"] if "error" in t else f"{t['median_ms']:9.1f} ms"))
    if report["skipped"]:
        say(f"  skipped (time budget): {', '.join(report['skipped'])}")
    bf16ref.write_json(args.out, report)


if __name__ == "__main__":
    main()
