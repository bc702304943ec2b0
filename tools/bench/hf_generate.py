#!/usr/bin/env python3
"""Hugging Face transformers baseline for `cohort bench`, on one GPU.

    python3 tools/bench/hf_generate.py --model DIR [--out hf.json] [--dtypes bf16,f32]
        [--batch 1,8] [--prompt-len 128] [--new-tokens 64] [--prefill 1024]

DIR is a checkpoint written by `cohort make-model` (nested Qwen3.5 config, tensors under
model.language_model.*). It is loaded by tools/hfref/bf16ref.py's load_hf: Qwen3_5ForCausalLM
built from the config's text_config, with the `model.language_model.` prefix mapped to `model.`
(strict: every parameter must be loaded), in float32 with SDPA attention.

For each dtype it measures, with greedy decoding and EOS disabled (through tools/hfref/hfbench.py's Bench):
  * decode ms/token at each batch size: model.generate(max_new_tokens=N) on B random prompts of
    prompt-len tokens; a streamer timestamps every generated token (after a device sync), and
    ms/token = (time of the last token - time of the first) / (N - 1): the first token comes from
    the prefill, so this is the decode phase only. tok/s = B * (N - 1) / that time.
  * prefill tok/s: one forward of a single prompt (use_cache=True, logits_to_keep=1), median of 3
    after a warm-up.

Only torch, transformers, safetensors and numpy (through bf16ref) are used. No network
(HF_HUB_OFFLINE=1).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hfref"))
import bf16ref  # noqa: E402  (the checkpoint loader)
from hfbench import Bench  # noqa: E402  (the generate and forward timings)

say = bf16ref.say
ints = bf16ref.ints


def die(msg):
    print(f"FATAL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def bench_decode(b, batch, prompt_len, new_tokens):
    """Decode ms/token at one batch size: Bench.decode (streamer timestamps) or, if the streamer
    fails, generate(N) - generate(1)."""
    try:
        return {**b.decode(batch, prompt_len, new_tokens), "method": "streamer timestamps"}
    except Exception as e:  # noqa: BLE001
        say(f"WARN: streamer timing failed ({type(e).__name__}: {e}); timing generate(N) - generate(1)")
    ids = b.prompt(batch, prompt_len, 1000 + batch)
    b.sync()
    t0 = time.perf_counter()
    b.generate(ids, new_tokens)
    b.sync()
    total = time.perf_counter() - t0
    t1 = time.perf_counter()
    b.generate(ids, 1)
    b.sync()
    decode_s = total - (time.perf_counter() - t1)
    steps = new_tokens - 1
    return {
        "batch": batch,
        "ms_per_token": decode_s / steps * 1e3,
        "tok_per_s": batch * steps / decode_s,
        "steps": steps,
        "decode_s": decode_s,
        "generate_total_s": total,
        "method": "generate(N) - generate(1)",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (cohort make-model)")
    ap.add_argument("--out", default="", help="write the results as JSON here")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prefill", default="1024")
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    if args.new_tokens < 2:
        die("--new-tokens must be at least 2")

    import torch
    import transformers

    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        die("this baseline needs a CUDA device")
    env = bf16ref.env_info()
    gdn = env["gdn_kernels"]
    report = {
        "what": "Hugging Face transformers Qwen3_5ForCausalLM.generate (greedy, EOS off) and forward, one GPU",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": args.model,
        **env,
        "gpu": torch.cuda.get_device_name(device),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "results": [],
    }
    say(f"torch {torch.__version__}, transformers {transformers.__version__}, {report['gpu']}, GDN kernels {gdn}")

    model, info = bf16ref.load_hf(args.model, device)
    how = info["config_source"]
    report["config_source"] = how
    report["preset"] = info.get("preset")
    report["tied_lm_head"] = info.get("tied_lm_head", False)
    report["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    report["params"] = info["params"]
    report["load_s"] = info["load_s"]
    bench = Bench(model, device, min(info["vocab"], 256), torch)
    say(f"loaded {report['params'] / 1e9:.2f}B parameters in {report['load_s']:.1f}s ({how}; attention {report['attn_implementation']})")

    # f32 first (the weights were loaded in f32), then cast in place to bf16.
    order = sorted(ints_or_names(args.dtypes), key=lambda d: d != "f32")
    for dt in order:
        model.to(dtype={"f32": torch.float32, "bf16": torch.bfloat16}[dt])
        torch.cuda.empty_cache()
        res = {"dtype": dt, "decode": [], "prefill": []}
        for b in ints(args.batch):
            d = bench_decode(bench, b, args.prompt_len, args.new_tokens)
            say(f"  {dt} decode batch {b}: {d['ms_per_token']:.2f} ms/token, {d['tok_per_s']:.1f} tok/s ({d['method']})")
            res["decode"].append(d)
        for n in ints(args.prefill):
            p = bench.prefill(n, 3)
            say(f"  {dt} prefill {n}: {p['ms']:.1f} ms, {p['tok_per_s']:.0f} tok/s")
            res["prefill"].append(p)
        res["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        report["results"].append(res)

    say("")
    say(f"HF transformers {transformers.__version__} on {report['gpu']} (prompt {args.prompt_len}, {args.new_tokens} new tokens, greedy)")
    say(f"{'dtype':>6} {'batch':>6} {'ms/token':>10} {'tok/s':>10}")
    for r in report["results"]:
        for d in r["decode"]:
            say(f"{r['dtype']:>6} {d['batch']:>6} {d['ms_per_token']:>10.2f} {d['tok_per_s']:>10.1f}")
    say(f"{'dtype':>6} {'prefill':>7} {'ms':>9} {'tok/s':>10}")
    for r in report["results"]:
        for p in r["prefill"]:
            say(f"{r['dtype']:>6} {p['tokens']:>7} {p['ms']:>9.1f} {p['tok_per_s']:>10.0f}")
    bf16ref.write_json(args.out, report)


def ints_or_names(s):
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in ("f32", "bf16")]
    if bad:
        die(f"--dtypes: unknown {bad} (want f32, bf16)")
    return out


if __name__ == "__main__":
    main()
