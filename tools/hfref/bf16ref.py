#!/usr/bin/env python3
"""Fidelity of `cohort score` / `cohort generate` against Hugging Face transformers (issue 6).

Subcommands (run with -h for flags):

  ids       random prompts for cohort and HF alike:
              bf16ref.py ids --model DIR --lens 1,128,1024,8192 --seed 1 --out ids.json
            writes a JSON array of prompts (one array of token ids per length), the format of
            `cohort score --ids-file`.
  fixture-ids
            the prompts of the committed HF fixtures (testdata/hf/*/ref.json), one file per
            fixture: OUT_DIR/<fixture>.ids.json (prompt lengths ascending).
  logprobs  run HF Qwen3_5ForCausalLM on the same ids and compare with cohort's output:
              cohort score --device cuda --model DIR --ids-file ids.json --positions stride:64 \\
                  --out cohort.safetensors
              bf16ref.py logprobs --model DIR --ids ids.json --cohort cohort.safetensors \\
                  --json report.json [--dtypes bf16,f32] [--device cuda]
            HF runs the base model (model.model) over the whole prompt and applies the LM head only
            to the positions cohort wrote, so a long prompt never materializes [len, vocab]; the
            log-softmax is taken in float32.
  fixtures  the committed tiny fixtures: logprobs at every position (cohort score output per
            fixture) and greedy continuations (cohort generate --json output per fixture) against
            HF in the given dtypes.
  compare   two files in cohort's score format (e.g. cohort CUDA against cohort CPU, or a saved HF
            run from logprobs --save-hf).

Metric (the acceptance of issue 6): at each compared position take HF's 8 most likely tokens and
|cohort logprob - HF logprob| for each; report the mean, p99 and max over all those values, and the
top-1 agreement rate (cohort's argmax == HF's). Pass: mean <= 0.02 and p99 <= 0.08.

HF references, per dtype:
  hf-bf16         the model in bfloat16 as transformers runs it (bf16 activations, bf16 logits,
                  upcast to float32 before the log-softmax): the acceptance reference;
  hf-bf16-f32head the same bf16 hidden states through the LM head in float32 (separates the bf16
                  rounding of the logits themselves, about 0.03 at |logit| ~ 8);
  hf-f32          the model in float32 (TF32 off) on the same weights.

The checkpoint is loaded by load_hf, which hfbench.py and tools/bench/hf_generate.py share
(verified on the 4b-shape checkpoint of `cohort make-model`): Qwen3_5ForCausalLM built from the config's text_config, weights read
with safetensors and the `model.language_model.` prefix mapped to `model.` (strict; a tied LM head
shares the embedding). `--loader from_pretrained` tries Qwen3_5ForCausalLM.from_pretrained(DIR)
instead. Only torch, transformers, safetensors, numpy and the standard library are used; no
network.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import struct
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

NESTED_PREFIX = "model.language_model."
TOP = 8
MEAN_LIMIT = 0.02
P99_LIMIT = 0.08


def say(msg=""):
    print(msg, flush=True)


def die(msg):
    print(f"bf16ref: FATAL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def write_json(path, obj):
    if not path:
        return
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    say(f"wrote {path}")


# ----------------------------------------------------------------------------------------------
# safetensors (F32 / I32 only) with numpy: cohort's score output and saved HF runs
# ----------------------------------------------------------------------------------------------

_NP = {"F32": np.float32, "I32": np.int32}


def read_st(path):
    """name -> numpy array, and the metadata, of a safetensors file (F32/I32 tensors)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        meta = header.pop("__metadata__", {}) or {}
        out = {}
        for name, h in header.items():
            if h["dtype"] not in _NP:
                raise ValueError(f"{path}: tensor {name} has dtype {h['dtype']} (want F32 or I32)")
            b, e = h["data_offsets"]
            f.seek(base + b)
            a = np.frombuffer(f.read(e - b), dtype=np.dtype(_NP[h["dtype"]]).newbyteorder("<"))
            out[name] = a.reshape(h["shape"])
    return out, meta


def write_st(path, tensors, meta=None):
    """Write name -> numpy (float32 or int32) as safetensors."""
    names = sorted(tensors)
    header, off, blobs = {}, 0, []
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    for name in names:
        a = np.ascontiguousarray(tensors[name])
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[a.dtype]
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def score_cases(tensors):
    """Cases of a cohort score file: [(index or None, ids, positions, logprobs)]."""
    if "logprobs" in tensors:
        return [(None, tensors["ids"], tensors["positions"], tensors["logprobs"])]
    idx = sorted(int(k.split(".", 1)[1]) for k in tensors if k.startswith("logprobs."))
    if not idx:
        raise ValueError("no logprobs tensors (not a cohort score --out file?)")
    return [(i, tensors[f"ids.{i}"], tensors[f"positions.{i}"], tensors[f"logprobs.{i}"]) for i in idx]


# ----------------------------------------------------------------------------------------------
# Positions and metrics
# ----------------------------------------------------------------------------------------------


def resolve_positions(spec, n):
    """Same rules as `cohort score --positions`."""
    spec = spec.strip()
    if spec == "all":
        return list(range(n))
    if spec == "last":
        return [n - 1]
    if spec.startswith("stride:"):
        k = int(spec[len("stride:"):])
        if k < 1:
            raise ValueError(f"{spec}: the stride must be positive")
        out = list(range(0, n, k))
        if out[-1] != n - 1:
            out.append(n - 1)
        return out
    out = sorted({int(x) for x in spec.split(",") if x.strip()})
    if not out or out[0] < 0 or out[-1] >= n:
        raise ValueError(f"{spec}: positions must lie in [0, {n})")
    return out


def compare_rows(ref, got, top=TOP):
    """ref, got: [P, vocab] float32 logprobs (ref = HF). Per-row top-`top` |Δ| and top-1 agreement."""
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        raise ValueError(f"shapes differ: reference {ref.shape}, cohort {got.shape}")
    k = min(top, ref.shape[1])
    idx = np.argpartition(-ref, k - 1, axis=1)[:, :k]
    rows = np.arange(ref.shape[0])[:, None]
    deltas = np.abs(got[rows, idx] - ref[rows, idx])  # [P, k]
    ref_top1 = ref.argmax(axis=1)
    got_top1 = got.argmax(axis=1)
    srt = np.sort(ref, axis=1)
    margin = srt[:, -1] - srt[:, -2] if ref.shape[1] > 1 else np.full(ref.shape[0], np.inf)
    return deltas, ref_top1 == got_top1, margin


def summarize(deltas, agree, margin):
    d = np.concatenate([x.ravel() for x in deltas]) if deltas else np.zeros(0)
    a = np.concatenate(agree) if agree else np.zeros(0, dtype=bool)
    m = np.concatenate(margin) if margin else np.zeros(0)
    if d.size == 0:
        return {"positions": 0}
    out = {
        "positions": int(a.size),
        "values": int(d.size),
        "mean": float(d.mean()),
        "p99": float(np.percentile(d, 99)),
        "max": float(d.max()),
        "top1_agree": float(a.mean()),
        "top1_disagree": int((~a).sum()),
    }
    if (~a).any():
        out["top1_disagree_max_ref_margin"] = float(m[~a].max())  # a near-tie in the reference?
    out["pass"] = bool(out["mean"] <= MEAN_LIMIT and out["p99"] <= P99_LIMIT)
    return out


def fmt_summary(label, s):
    if not s.get("positions"):
        return f"{label:<34} (no positions)"
    extra = ""
    if s["top1_disagree"]:
        extra = f" (ref margin ≤ {s['top1_disagree_max_ref_margin']:.3g})"
    return (f"{label:<34} pos {s['positions']:>5}  mean {s['mean']:.4f}  p99 {s['p99']:.4f}  max {s['max']:.4f}  "
            f"top1 {100 * s['top1_agree']:.2f}%{extra}  {'PASS' if s['pass'] else 'FAIL'}")


# ----------------------------------------------------------------------------------------------
# Hugging Face model
# ----------------------------------------------------------------------------------------------


def hf_name(fname):
    """Checkpoint tensor name -> Qwen3_5ForCausalLM parameter name (None: not a text weight)."""
    if fname.startswith("model.visual.") or fname.startswith("mtp."):
        return None
    if fname.startswith(NESTED_PREFIX):
        return "model." + fname[len(NESTED_PREFIX):]
    return fname


def load_text_config(model_dir):
    import transformers

    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    if "text_config" in raw:
        try:
            return transformers.Qwen3_5Config.from_pretrained(model_dir).text_config, raw, "Qwen3_5Config.text_config"
        except Exception as e:  # noqa: BLE001
            say(f"WARN: Qwen3_5Config.from_pretrained failed ({type(e).__name__}: {e}); using text_config as is")
            return transformers.Qwen3_5TextConfig.from_dict(dict(raw["text_config"])), raw, "Qwen3_5TextConfig.from_dict"
    return transformers.Qwen3_5TextConfig.from_pretrained(model_dir), raw, "Qwen3_5TextConfig (flat)"


def load_hf(model_dir, device, attn="sdpa", loader="state_dict"):
    """The checkpoint as Qwen3_5ForCausalLM in float32 on device (cast it for other dtypes)."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    t0 = time.perf_counter()
    info = {"loader": loader, "attn_implementation": attn}
    if loader == "from_pretrained":
        model = Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attn)
        model.to(device)
        info["config_source"] = "Qwen3_5ForCausalLM.from_pretrained"
        cfg = model.config
    else:
        from safetensors.torch import load_file

        cfg, raw, how = load_text_config(model_dir)
        info["config_source"] = how
        info["preset"] = raw.get("cohort_preset")
        for attr, val in (("_attn_implementation", attn), ("eos_token_id", None)):
            try:
                setattr(cfg, attr, val)
            except Exception as e:  # noqa: BLE001
                say(f"WARN: could not set config.{attr}={val!r}: {e}")
        sd = {}
        files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors") and not f.startswith("ref"))
        if not files:
            die(f"no .safetensors files in {model_dir}")
        for fn in files:
            for k, v in load_file(os.path.join(model_dir, fn), device=str(device)).items():
                n = hf_name(k)
                if n is not None:
                    sd[n] = v
        # Build the (randomly initialized) model on the device directly: on the CPU a 4B model
        # takes minutes to initialize. (torch < 2 has no device context: build it on the CPU.)
        with torch.device(device) if hasattr(torch.device, "__enter__") else contextlib.nullcontext():
            model = Qwen3_5ForCausalLM(cfg)
        model.to(device=device, dtype=torch.float32)
        res = model.load_state_dict(sd, strict=False)
        try:
            params = dict(model.named_parameters(remove_duplicate=False))
        except TypeError:  # torch < 2
            params = dict(model.named_parameters())
        missing = [k for k in res.missing_keys if k in params]
        if "lm_head.weight" in missing and "lm_head.weight" not in sd:
            if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
                model.lm_head.weight = model.model.embed_tokens.weight
            missing.remove("lm_head.weight")
            info["tied_lm_head"] = True
        if missing or res.unexpected_keys:
            die(f"load_state_dict: missing {missing[:8]}, unexpected {list(res.unexpected_keys)[:8]}")
        del sd
    model.eval()
    remember_f32(model)
    try:
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
    except Exception as e:  # noqa: BLE001
        say(f"WARN: could not edit generation_config: {e}")
    info["params"] = int(sum(p.numel() for p in model.parameters()))
    info["vocab"] = int(cfg.vocab_size)
    info["load_s"] = time.perf_counter() - t0
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return model, info


def env_info():
    import torch
    import transformers

    gdn = {}
    for name in ("is_flash_linear_attention_available", "is_causal_conv1d_available"):
        fn = getattr(transformers.utils, name, None)
        try:
            gdn[name] = bool(fn()) if fn else None
        except Exception:  # noqa: BLE001
            gdn[name] = None
    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "gdn_kernels": gdn,
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


DTYPES = {"bf16": "bfloat16", "f32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "float32": "float32"}


def remember_f32(model):
    """Keep host copies of the float32 parameters that bfloat16 cannot hold exactly (A_log and the
    gated-norm weights are F32 in the checkpoint), so that a float32 pass after a bf16 one runs on
    the checkpoint's values."""
    import torch

    model._cohort_f32 = {}
    for name, p in model.named_parameters():
        if p.dtype == torch.float32 and not torch.equal(p.data, p.data.to(torch.bfloat16).to(torch.float32)):
            model._cohort_f32[name] = p.detach().cpu().clone()


def set_dtype(model, name):
    """Cast the parameters (not the buffers: RoPE's inv_freq stays float32, as in
    from_pretrained(dtype=...)) to the dtype; float32 restores the exact checkpoint values."""
    import torch

    dt = getattr(torch, DTYPES[name])
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dtype != dt:
                p.data = p.data.to(dt)
            if dt == torch.float32 and pname in getattr(model, "_cohort_f32", {}):
                p.data.copy_(model._cohort_f32[pname].to(p.device))


def hf_logprobs(model, ids, positions, device, dtype_name):
    """HF log-softmax rows [P, vocab] (float32) at positions, and the same through an fp32 LM head
    (None in float32, where they are the same)."""
    import torch

    x = torch.tensor([list(map(int, ids))], dtype=torch.long, device=device)
    pos = torch.tensor(list(map(int, positions)), dtype=torch.long, device=device)
    with torch.no_grad():
        out = model.model(input_ids=x, use_cache=False)
        h = out.last_hidden_state[0].index_select(0, pos)  # [P, hidden], the model's dtype
        del out
        native = torch.log_softmax(model.lm_head(h).float(), dim=-1)
        f32head = None
        if DTYPES[dtype_name] != "float32":
            w = model.lm_head.weight
            f32head = torch.log_softmax(h.float() @ w.float().t(), dim=-1)
    res = native.cpu().numpy(), None if f32head is None else f32head.cpu().numpy()
    del h, native, f32head
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return res


def ref_labels(dtype_name):
    return ["hf-f32"] if DTYPES[dtype_name] == "float32" else [f"hf-{dtype_name}", f"hf-{dtype_name}-f32head"]


# ----------------------------------------------------------------------------------------------
# Subcommands
# ----------------------------------------------------------------------------------------------


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def model_vocab(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    return int(raw.get("text_config", raw)["vocab_size"])


def cmd_ids(a):
    vocab = a.vocab or model_vocab(a.model)
    lens = ints(a.lens)
    if not lens or min(lens) < 1:
        die("--lens: want positive lengths")
    prompts = []
    for n in lens:
        rng = np.random.default_rng([a.seed, n])
        prompts.append([int(v) for v in rng.integers(0, vocab, size=n)])
    with open(a.out, "w") as f:
        json.dump(prompts, f)
    say(f"wrote {a.out}: {len(prompts)} prompts of {lens} tokens, ids in [0, {vocab}), seed {a.seed}")


def fixture_dirs(root, only=""):
    names = sorted(d for d in os.listdir(root) if os.path.exists(os.path.join(root, d, "ref.json")))
    if only:
        keep = set(only.split(","))
        names = [n for n in names if n in keep]
    if not names:
        die(f"no fixtures (dirs with ref.json) under {root}")
    return [(n, os.path.join(root, n)) for n in names]


def fixture_ref(d):
    with open(os.path.join(d, "ref.json")) as f:
        ref = json.load(f)
    lens = sorted(int(k) for k in ref["prompts"])
    return ref, lens


def cmd_fixture_ids(a):
    os.makedirs(a.out_dir, exist_ok=True)
    for name, d in fixture_dirs(a.root, a.only):
        ref, lens = fixture_ref(d)
        path = os.path.join(a.out_dir, f"{name}.ids.json")
        with open(path, "w") as f:
            json.dump([ref["prompts"][str(n)] for n in lens], f)
        say(f"wrote {path}: prompt lengths {lens}")


def parse_dtypes(s):
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in DTYPES]
    if bad or not out:
        die(f"--dtypes: unknown {bad} (want bf16, f32)")
    return out


def compare_logprobs(model, device, dtypes, cases, label_of, deadline):
    """cases: [(label, ids, positions, cohort_logprobs)]. Returns {ref_label: {case_label: summary,
    'all': pooled}} and the saved HF rows {dtype: [rows per case]}."""
    results, saved = {}, {}
    for dt in dtypes:
        if time.time() > deadline:
            say(f"  {dt}: skipped (time budget spent)")
            results[f"hf-{dt}"] = {"skipped": "time budget"}
            continue
        set_dtype(model, dt)
        labels = ref_labels(dt)
        acc = {lab: ([], [], []) for lab in labels}
        per = {lab: {} for lab in labels}
        saved[dt] = []
        for case, ids, positions, got in cases:
            t = time.perf_counter()
            native, f32head = hf_logprobs(model, ids, positions, device, dt)
            secs = time.perf_counter() - t
            saved[dt].append(native)
            for lab, ref in zip(labels, (native, f32head)):
                dlt, agr, mar = compare_rows(ref, got)
                s = summarize([dlt], [agr], [mar])
                s["hf_seconds"] = secs
                per[lab][case] = s
                for lst, v in zip(acc[lab], (dlt, agr, mar)):
                    lst.append(v)
                say("  " + fmt_summary(f"{label_of(case)} vs {lab}", s))
        for lab in labels:
            per[lab]["all"] = summarize(*acc[lab])
            say("  " + fmt_summary(f"{label_of('all')} vs {lab}", per[lab]["all"]))
            results[lab] = per[lab]
    return results, saved


def cmd_logprobs(a):
    import torch

    device = torch.device(a.device)
    deadline = time.time() + a.time_budget if a.time_budget > 0 else math.inf
    with open(a.ids) as f:
        prompts = json.load(f)
    if prompts and isinstance(prompts[0], int):
        prompts = [prompts]
    tensors, meta = read_st(a.cohort)
    cases = []
    for i, ids_c, pos, lp in score_cases(tensors):
        k = 0 if i is None else i
        if k >= len(prompts):
            die(f"{a.cohort} has prompt {k}; {a.ids} has only {len(prompts)}")
        if list(map(int, ids_c)) != list(prompts[k]):
            die(f"prompt {k}: the ids in {a.cohort} differ from {a.ids}")
        cases.append((f"len={len(ids_c)}", prompts[k], [int(p) for p in pos], lp))
    report = {
        "what": "cohort score logprobs vs HF transformers Qwen3_5ForCausalLM, top-8 |Δlogprob| over HF's top 8",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "label": a.label, "model": a.model, "ids": a.ids, "cohort": a.cohort, "cohort_meta": meta,
        "limits": {"mean": MEAN_LIMIT, "p99": P99_LIMIT, "top": TOP},
        "env": env_info(), "device": str(device),
        "cases": [{"label": c[0], "tokens": len(c[1]), "positions": len(c[2])} for c in cases],
    }
    torch.backends.cuda.matmul.allow_tf32 = False
    model, info = load_hf(a.model, device, a.attn, a.loader)
    report["hf"] = info
    say(f"[{a.label}] HF loaded in {info['load_s']:.1f}s ({info['params'] / 1e9:.3f}B params, {info['config_source']}); "
        f"{len(cases)} prompts {[len(c[1]) for c in cases]}")
    report["results"], saved = compare_logprobs(model, device, parse_dtypes(a.dtypes), cases, lambda c: c, deadline)
    if str(device).startswith("cuda"):
        report["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    if a.save_hf:
        for dt, rows in saved.items():
            t = {}
            for i, ((_, ids, pos, _), r) in enumerate(zip(cases, rows)):
                t[f"logprobs.{i}"], t[f"positions.{i}"] = r.astype(np.float32), np.asarray(pos, np.int32)
                t[f"ids.{i}"] = np.asarray(ids, np.int32)
            path = a.save_hf.replace(".safetensors", f".{dt}.safetensors")
            write_st(path, t, {"what": f"HF {dt} log-softmax", "model": a.model})
            say(f"wrote {path}")
    write_json(a.json, report)


def greedy_hf(model, ids, n, device):
    """HF generate greedy n tokens: (tokens, per-step top1-top2 logit margins)."""
    import torch

    x = torch.tensor([list(map(int, ids))], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0, use_cache=True, return_dict_in_generate=True,
                             output_logits=True)
    toks = [int(t) for t in out.sequences[0, x.shape[1]:]]
    margins = []
    for lg in out.logits:
        top2 = torch.topk(lg[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    return toks, margins


def compare_greedy(hf, hf_margins, got, got_margins):
    n = 0
    while n < min(len(hf), len(got)) and hf[n] == got[n]:
        n += 1
    out = {"match_prefix": n, "hf_len": len(hf), "cohort_len": len(got), "equal": n == len(hf) == len(got)}
    if not out["equal"] and n < min(len(hf), len(got)):
        out["diverge_step"] = n
        out["hf_margin_at_divergence"] = hf_margins[n]
        if got_margins and n < len(got_margins):
            out["cohort_margin_at_divergence"] = got_margins[n]
    return out


def cmd_fixtures(a):
    import torch

    device = torch.device(a.device)
    deadline = time.time() + a.time_budget if a.time_budget > 0 else math.inf
    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = parse_dtypes(a.dtypes)
    report = {
        "what": "HF fixtures (testdata/hf): cohort score logprobs at every position and cohort generate greedy "
                "continuations vs HF transformers in each dtype",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "label": a.label, "root": a.root, "limits": {"mean": MEAN_LIMIT, "p99": P99_LIMIT, "top": TOP},
        "env": env_info(), "device": str(device), "fixtures": {},
    }
    pooled = {}
    greedy_total = {}
    for name, d in fixture_dirs(a.root, a.only):
        ref, lens = fixture_ref(d)
        fx = {}
        report["fixtures"][name] = fx
        model, info = load_hf(d, device, a.attn, a.loader)
        fx["hf"] = info
        say(f"[{a.label}] fixture {name}: prompt lengths {lens}")
        score_path = os.path.join(a.cohort_dir, f"{name}.safetensors")
        if os.path.exists(score_path):
            tensors, _ = read_st(score_path)
            cases = []
            for i, ids_c, pos, lp in score_cases(tensors):
                n = lens[0 if i is None else i]
                if list(map(int, ids_c)) != ref["prompts"][str(n)]:
                    die(f"{score_path}: prompt {i} differs from {name}'s prompt of {n} tokens")
                cases.append((f"len={n}", ref["prompts"][str(n)], [int(p) for p in pos], lp))
            fx["logprobs"], _ = compare_logprobs(model, device, dtypes, cases, lambda c, nm=name: f"{nm} {c}", deadline)
            for lab, per in fx["logprobs"].items():
                for case, s in per.items():
                    if case != "all" and "mean" in s:
                        pooled.setdefault(lab, []).append(s)
        else:
            say(f"  no {score_path}: logprobs not compared")
        gpath = os.path.join(a.cohort_dir, f"{name}.greedy.json")
        if os.path.exists(gpath):
            with open(gpath) as f:
                got = json.load(f)
            if isinstance(got, dict):
                got = [got]
            fx["greedy"] = {}
            for dt in dtypes:
                if time.time() > deadline:
                    fx["greedy"][f"hf-{dt}"] = {"skipped": "time budget"}
                    continue
                set_dtype(model, dt)
                per = {}
                for n, g in zip(lens, got):
                    hf_toks, hf_m = greedy_hf(model, ref["prompts"][str(n)], a.new_tokens, device)
                    c = compare_greedy(hf_toks, hf_m, g["tokens"], g.get("top1_margins"))
                    if DTYPES[dt] == "float32":
                        c["hf_equals_fixture_greedy"] = hf_toks == ref["greedy"][str(n)][: a.new_tokens]
                    per[f"len={n}"] = c
                    tot = greedy_total.setdefault(f"hf-{dt}", [0, 0])
                    tot[0] += int(c["equal"])
                    tot[1] += 1
                eq = sum(int(c["equal"]) for c in per.values())
                say(f"  greedy {a.new_tokens} tokens vs hf-{dt}: {eq} of {len(per)} equal; match prefixes "
                    f"{[c['match_prefix'] for c in per.values()]}" +
                    "".join(f"; {k} diverges at {c['diverge_step']} (HF margin {c['hf_margin_at_divergence']:.3g})"
                            for k, c in per.items() if "diverge_step" in c))
                fx["greedy"][f"hf-{dt}"] = per
        else:
            say(f"  no {gpath}: greedy not compared")
        del model
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    summary = {}
    for lab, ss in pooled.items():
        vals = {
            "mean": sum(s["mean"] * s["values"] for s in ss) / sum(s["values"] for s in ss),
            "p99_max_over_prompts": max(s["p99"] for s in ss),
            "max": max(s["max"] for s in ss),
            "top1_agree": sum(s["top1_agree"] * s["positions"] for s in ss) / sum(s["positions"] for s in ss),
            "prompts": len(ss),
        }
        vals["pass"] = vals["mean"] <= MEAN_LIMIT and vals["p99_max_over_prompts"] <= P99_LIMIT
        summary[lab] = vals
        say(f"fixtures vs {lab}: mean {vals['mean']:.4f}, worst per-prompt p99 {vals['p99_max_over_prompts']:.4f}, "
            f"max {vals['max']:.4f}, top1 {100 * vals['top1_agree']:.2f}% over {vals['prompts']} prompts: "
            f"{'PASS' if vals['pass'] else 'FAIL'}")
    for lab, (eq, n) in greedy_total.items():
        summary[f"greedy vs {lab}"] = {"equal": eq, "of": n}
        say(f"greedy vs {lab}: {eq} of {n} continuations equal for {a.new_tokens} tokens")
    report["summary"] = summary
    write_json(a.json, report)


def cmd_compare(a):
    ref_t, _ = read_st(a.ref)
    got_t, _ = read_st(a.got)
    ref_c, got_c = score_cases(ref_t), score_cases(got_t)
    if len(ref_c) != len(got_c):
        die(f"{a.ref} has {len(ref_c)} prompts, {a.got} {len(got_c)}")
    report = {"ref": a.ref, "got": a.got, "limits": {"mean": MEAN_LIMIT, "p99": P99_LIMIT, "top": TOP}, "cases": {}}
    acc = ([], [], [])
    for (i, ids_r, pos_r, lp_r), (_, ids_g, pos_g, lp_g) in zip(ref_c, got_c):
        if not np.array_equal(ids_r, ids_g) or not np.array_equal(pos_r, pos_g):
            die(f"prompt {i}: ids or positions differ between the files")
        dlt, agr, mar = compare_rows(lp_r, lp_g, a.top)
        s = summarize([dlt], [agr], [mar])
        report["cases"][f"len={len(ids_r)}"] = s
        for lst, v in zip(acc, (dlt, agr, mar)):
            lst.append(v)
        say(fmt_summary(f"len={len(ids_r)}", s))
    report["all"] = summarize(*acc)
    say(fmt_summary("all", report["all"]))
    write_json(a.json, report)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("ids", help="seeded random prompts (JSON) for cohort score --ids-file")
    p.add_argument("--model", default="", help="model dir (for the vocabulary size)")
    p.add_argument("--vocab", type=int, default=0, help="vocabulary size (instead of --model)")
    p.add_argument("--lens", default="1,128,1024,8192")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_ids)

    p = sub.add_parser("fixture-ids", help="the HF fixtures' prompts, one ids file per fixture")
    p.add_argument("--root", default="testdata/hf")
    p.add_argument("--only", default="", help="comma-separated fixture names")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(fn=cmd_fixture_ids)

    def hf_flags(p):
        p.add_argument("--device", default="cuda", help="torch device (cpu works for the tiny fixtures)")
        p.add_argument("--dtypes", default="bf16,f32", help="HF dtypes to compare against, in order")
        p.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, eager)")
        p.add_argument("--loader", default="state_dict", choices=["state_dict", "from_pretrained"])
        p.add_argument("--time-budget", type=float, default=0, help="seconds; later dtypes are skipped past it (0: none)")
        p.add_argument("--label", default="")
        p.add_argument("--json", default="", help="write the report here")

    p = sub.add_parser("logprobs", help="HF vs a cohort score --out file on the same ids")
    p.add_argument("--model", required=True)
    p.add_argument("--ids", required=True, help="the --ids-file given to cohort score")
    p.add_argument("--cohort", required=True, help="cohort score --out file")
    p.add_argument("--save-hf", default="", help="also save HF's rows as NAME.<dtype>.safetensors (cohort's format)")
    hf_flags(p)
    p.set_defaults(fn=cmd_logprobs)

    p = sub.add_parser("fixtures", help="the committed tiny fixtures: logprobs and greedy vs HF")
    p.add_argument("--root", default="testdata/hf")
    p.add_argument("--only", default="")
    p.add_argument("--cohort-dir", required=True,
                   help="holds <fixture>.safetensors (cohort score --positions all --ids-file <fixture>.ids.json) "
                        "and <fixture>.greedy.json (cohort generate --json --ignore-eos --max-tokens 32 --ids-file ...)")
    p.add_argument("--new-tokens", type=int, default=32)
    hf_flags(p)
    p.set_defaults(fn=cmd_fixtures)

    p = sub.add_parser("compare", help="two cohort-format score files (ref first)")
    p.add_argument("--ref", required=True)
    p.add_argument("--got", required=True)
    p.add_argument("--top", type=int, default=TOP)
    p.add_argument("--json", default="")
    p.set_defaults(fn=cmd_compare)

    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
