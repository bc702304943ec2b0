#!/usr/bin/env python3
"""Build tiny random-weight Qwen3.5 checkpoints in real Hugging Face layout and
record transformers reference outputs for them.

    python3 tools/hfref/make_fixtures.py --out testdata/hf

One directory per fixture:
  nested-tied-gva2/  multimodal container config (Qwen3_5ForConditionalGeneration),
                     tied embeddings, GDN 2 key / 4 value heads, tensors under
                     model.language_model.*, dummy model.visual.* and mtp.* tensors,
                     two shards plus model.safetensors.index.json
  flat-untied-gva1/  flat Qwen3_5ForCausalLM config with legacy RoPE fields and
                     full_attention_interval, untied lm_head, GDN 4/4 heads,
                     tensors under model.*, single model.safetensors
  nested-untied-gva2/ nested config, untied lm_head, GDN 4 key / 8 value heads
                     (so tensor parallelism up to 4 divides every head count)

With --qwen3 DIR it instead records references for a dense Qwen3 checkpoint that
already exists (the qwen3-tiny preset that `cohort make-model` writes, committed under
testdata/hf-qwen3/qwen3-tiny): it loads DIR with Qwen3ForCausalLM in float32 (eager
attention), checks that every parameter holds the stored value, and writes ref.safetensors
and ref.json next to the checkpoint:

    python3 tools/hfref/make_fixtures.py --qwen3 testdata/hf-qwen3/qwen3-tiny

Each directory also gets ref.safetensors (F32 logits.<len> [len,256] from one
no-cache forward, greedy_logits.<len> [32,256] = the raw logits generate() saw
at each decode step) and ref.json (prompts, greedy continuations, metadata).

The reference model is Qwen3_5ForCausalLM in float32 with eager attention. Its
weights are read back from the written safetensors files, so it runs on exactly
the saved (bf16-rounded) values. Only torch, transformers and safetensors
are used, plus the standard library.
"""

import argparse
import copy
import hashlib
import importlib.util
import json
import math
import os
import platform
import re
import sys
import traceback

# No network on the reference machine: never try the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# --------------------------------------------------------------------------------------------
# Fixture definition
# --------------------------------------------------------------------------------------------

VOCAB = 256
HIDDEN = 64
LAYERS = 8
N_HEADS = 4
N_KV = 2
HEAD_DIM = 64
LIN_DK = 32
LIN_DV = 32
CONV_K = 4
INTER = 192
EPS = 1e-6
THETA = 10000000.0
PARTIAL = 0.25
ROT_DIM = int(HEAD_DIM * PARTIAL)  # 16
MROPE_SECTION = [3, 3, 2]  # sums to ROT_DIM // 2 (the real models use [11, 11, 10] for 64)
MAX_POS = 4096
EOS = 255
FULL_INTERVAL = 4

PROMPT_LENS = [1, 63, 64, 65, 130, 300]
NEW_TOKENS = 32

# How every fixture's greedy continuation is generated, as recorded in its ref.json.
GENERATE_KWARGS = {
    "max_new_tokens": NEW_TOKENS,
    "min_new_tokens": NEW_TOKENS,
    "do_sample": False,
    "eos_token_id": None,
    "pad_token_id": 0,
    "use_cache": True,
    "attention_mask": "all ones",
}
CALIB_LEN = 64
TARGET_STD = 3.0
STD_LO, STD_HI = 2.5, 3.5
CALIB_TOL = 0.05
CALIB_MAX_ITERS = 12

# Vision stub (only so the container config is complete; never run by the reference).
VIS_HIDDEN = 16
VIS_MERGE = 2

F32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")
ZC_NORM_SUFFIXES = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
)
OUT_PROJ_SUFFIXES = ("self_attn.o_proj.weight", "linear_attn.out_proj.weight", "mlp.down_proj.weight")
NESTED_PREFIX = "model.language_model."
SHARD_FILES = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
OUTPUT_FILES = ("config.json", SINGLE_FILE) + SHARD_FILES + (INDEX_FILE, "ref.safetensors", "ref.json")

FIXTURES = [
    {"name": "nested-tied-gva2", "seed": 3501, "nk": 2, "nv": 4, "tied": True, "nested": True},
    {"name": "flat-untied-gva1", "seed": 3502, "nk": 4, "nv": 4, "tied": False, "nested": False},
    # GVA 2:1 with 4 key heads, so that tensor parallelism up to 4 fits; nested and untied.
    {"name": "nested-untied-gva2", "seed": 3503, "nk": 4, "nv": 8, "tied": False, "nested": True},
]

# Filled by load_libs().
torch = None
transformers = None
save_file = None
safe_open = None
Qwen3_5ForCausalLM = None
Qwen3_5TextConfig = None
Qwen3_5Config = None
Qwen3_5ForConditionalGeneration = None
mq = None  # transformers.models.qwen3_5.modeling_qwen3_5
EAGER_CALLS = {"n": 0, "hooked": False}


def die(msg):
    print(f"\nFATAL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def warn(msg):
    print(f"WARN: {msg}", flush=True)


def say(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def load_libs(qwen35=True):
    global torch, transformers, save_file, safe_open
    global Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3_5Config, Qwen3_5ForConditionalGeneration, mq
    say(f"python {platform.python_version()} ({sys.executable})")
    try:
        import torch as _torch
    except Exception as e:  # noqa: BLE001
        die(f"cannot import torch: {type(e).__name__}: {e}")
    torch = _torch
    say(f"torch {torch.__version__} (cuda build {torch.version.cuda}, cuda available {torch.cuda.is_available()})")
    try:
        import transformers as _tf
    except Exception as e:  # noqa: BLE001
        die(f"cannot import transformers: {type(e).__name__}: {e}")
    transformers = _tf
    say(f"transformers {transformers.__version__} ({os.path.dirname(transformers.__file__)})")
    try:
        import safetensors
        from safetensors import safe_open as _so
        from safetensors.torch import save_file as _sf
    except Exception as e:  # noqa: BLE001
        die(f"cannot import safetensors: {type(e).__name__}: {e}")
    save_file, safe_open = _sf, _so
    say(f"safetensors {getattr(safetensors, '__version__', '?')}")
    if not qwen35:
        return
    try:
        from transformers import Qwen3_5ForCausalLM as _lm, Qwen3_5TextConfig as _tc
    except Exception as e:  # noqa: BLE001
        die(
            f"transformers {transformers.__version__} has no Qwen3_5ForCausalLM / Qwen3_5TextConfig "
            f"({type(e).__name__}: {e}); a transformers release with Qwen3.5 support is required"
        )
    Qwen3_5ForCausalLM, Qwen3_5TextConfig = _lm, _tc
    try:
        from transformers import Qwen3_5Config as _c

        Qwen3_5Config = _c
    except Exception as e:  # noqa: BLE001
        warn(f"Qwen3_5Config not importable ({e}); nested config will be read from its text_config dict")
    try:
        from transformers import Qwen3_5ForConditionalGeneration as _cg

        Qwen3_5ForConditionalGeneration = _cg
    except Exception as e:  # noqa: BLE001
        warn(f"Qwen3_5ForConditionalGeneration not importable ({e}); nested cross-check disabled")
    try:
        import transformers.models.qwen3_5.modeling_qwen3_5 as _mq

        mq = _mq
    except Exception as e:  # noqa: BLE001
        warn(f"cannot import transformers.models.qwen3_5.modeling_qwen3_5 ({e}); eager-call hook disabled")


def pick_device(choice):
    if choice == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda:0")
        warn("CUDA not available: falling back to CPU (slow but fine for these sizes)")
        return torch.device("cpu")
    if choice.startswith("cuda") and not torch.cuda.is_available():
        die(f"--device {choice} requested but torch.cuda.is_available() is False")
    return torch.device(choice)


def device_desc(device):
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return "cpu"


def setup_precision(device):
    """Disable TF32 and prove with a matmul that float32 really is float32."""
    notes = []
    for what, fn in (
        ("torch.backends.cuda.matmul.allow_tf32=False", lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", False)),
        ("torch.backends.cudnn.allow_tf32=False", lambda: setattr(torch.backends.cudnn, "allow_tf32", False)),
        ("torch.set_float32_matmul_precision('highest')", lambda: torch.set_float32_matmul_precision("highest")),
        ("torch.backends.cudnn.benchmark=False", lambda: setattr(torch.backends.cudnn, "benchmark", False)),
        ("torch.backends.cudnn.deterministic=True", lambda: setattr(torch.backends.cudnn, "deterministic", True)),
    ):
        try:
            fn()
            notes.append(what)
        except Exception as e:  # noqa: BLE001
            warn(f"could not apply {what}: {type(e).__name__}: {e}")
    check = "cpu (no tf32)"
    if device.type == "cuda":
        g = torch.Generator().manual_seed(0)
        a = torch.randn(512, 512, generator=g)
        b = torch.randn(512, 512, generator=g)
        ref = a.double() @ b.double()
        got = (a.to(device) @ b.to(device)).double().cpu()
        rel = ((got - ref).abs().max() / ref.abs().max()).item()
        if not rel < 1e-5:
            die(f"float32 matmul on {device} has relative error {rel:.2e} vs float64: TF32 or reduced precision is active")
        # Batched 4-D matmul, as used by eager attention.
        a4 = torch.randn(1, 4, 128, 64, generator=g)
        b4 = torch.randn(1, 4, 64, 128, generator=g)
        ref4 = a4.double() @ b4.double()
        got4 = (a4.to(device) @ b4.to(device)).double().cpu()
        rel4 = ((got4 - ref4).abs().max() / ref4.abs().max()).item()
        if not rel4 < 1e-5:
            die(f"batched float32 matmul on {device} has relative error {rel4:.2e}: TF32 is active")
        check = f"fp32 matmul rel err {rel:.1e} / batched {rel4:.1e} (TF32 off)"
    say(f"precision: {check}")
    return notes, check


def find_helper(name):
    fn = getattr(transformers.utils, name, None)
    if fn is None:
        try:
            from transformers.utils import import_utils

            fn = getattr(import_utils, name, None)
        except Exception:  # noqa: BLE001
            fn = None
    return fn


def detect_gdn_path():
    avail = {}
    for name in ("is_flash_linear_attention_available", "is_causal_conv1d_available", "is_kernels_available"):
        fn = find_helper(name)
        if fn is None:
            avail[name] = None
            continue
        try:
            avail[name] = bool(fn())
        except Exception as e:  # noqa: BLE001
            avail[name] = f"error: {type(e).__name__}: {e}"
    for mod in ("fla", "causal_conv1d", "kernels"):
        try:
            avail[f"find_spec({mod})"] = importlib.util.find_spec(mod) is not None
        except Exception as e:  # noqa: BLE001
            avail[f"find_spec({mod})"] = f"error: {type(e).__name__}: {e}"
    fast = []
    if avail.get("is_flash_linear_attention_available") is True or avail.get("find_spec(fla)") is True:
        fast.append("flash-linear-attention")
    if avail.get("is_causal_conv1d_available") is True or avail.get("find_spec(causal_conv1d)") is True:
        fast.append("causal-conv1d")
    if fast:
        path = "fast kernels available: " + ", ".join(fast) + " (HF may use them instead of the torch fallback)"
        warn(f"GDN path: {path}")
    else:
        path = "torch fallback"
        if avail.get("is_kernels_available") is True:
            path += " (hub 'kernels' package present; no network, so hub kernels cannot load)"
    say(f"GDN path: {path}; availability {avail}")
    return path, avail


def hook_eager_attention():
    """Count calls to modeling_qwen3_5.eager_attention_forward (looked up as a module global)."""
    if mq is None or not hasattr(mq, "eager_attention_forward"):
        warn("modeling_qwen3_5.eager_attention_forward not found; cannot confirm eager attention by call count")
        return
    orig = mq.eager_attention_forward

    def counting_eager_attention_forward(*args, **kwargs):
        EAGER_CALLS["n"] += 1
        return orig(*args, **kwargs)

    mq.eager_attention_forward = counting_eager_attention_forward
    EAGER_CALLS["hooked"] = True


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def layer_types():
    return ["full_attention" if (i + 1) % FULL_INTERVAL == 0 else "linear_attention" for i in range(LAYERS)]


def text_fields(fx):
    return {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": N_HEADS,
        "num_key_value_heads": N_KV,
        "head_dim": HEAD_DIM,
        "linear_num_key_heads": fx["nk"],
        "linear_num_value_heads": fx["nv"],
        "linear_key_head_dim": LIN_DK,
        "linear_value_head_dim": LIN_DV,
        "linear_conv_kernel_dim": CONV_K,
        "hidden_act": "silu",
        "rms_norm_eps": EPS,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "max_position_embeddings": MAX_POS,
        "initializer_range": 0.02,
        "eos_token_id": EOS,
        "use_cache": True,
        "dtype": "bfloat16",
    }


def vision_config_json():
    return {
        "model_type": "qwen3_5_vision",
        "depth": 1,
        "hidden_size": VIS_HIDDEN,
        "num_heads": 2,
        "intermediate_size": 32,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": VIS_MERGE,
        "out_hidden_size": HIDDEN,
        "num_position_embeddings": 16,
        "initializer_range": 0.02,
    }


def config_json(fx):
    if fx["nested"]:
        tc = {"model_type": "qwen3_5_text"}
        tc.update(text_fields(fx))
        tc["tie_word_embeddings"] = bool(fx["tied"])
        tc["layer_types"] = layer_types()
        tc["full_attention_interval"] = FULL_INTERVAL
        tc["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": THETA,
            "partial_rotary_factor": PARTIAL,
            "mrope_section": list(MROPE_SECTION),
            "mrope_interleaved": True,
        }
        tc["mamba_ssm_dtype"] = "float32"
        tc["mtp_num_hidden_layers"] = 1
        tc["mtp_use_dedicated_embeddings"] = False
        return {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "image_token_id": 248056,
            "video_token_id": 248057,
            "vision_start_token_id": 248053,
            "vision_end_token_id": 248054,
            # Deliberately false: the container default. Loaders must read text_config.tie_word_embeddings.
            "tie_word_embeddings": False,
            "dtype": "bfloat16",
            "text_config": tc,
            "vision_config": vision_config_json(),
        }
    c = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text"}
    c.update(text_fields(fx))
    c["tie_word_embeddings"] = bool(fx["tied"])
    # Legacy form: no layer_types, no rope_parameters.
    c["full_attention_interval"] = FULL_INTERVAL
    c["rope_theta"] = THETA
    c["partial_rotary_factor"] = PARTIAL
    return c


# The text_fields an HF config object must carry as written (check_hf_config).
CHECKED_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "hidden_act",
    "rms_norm_eps", "attention_bias",
)


def check_hf_config(cfg, fx):
    """Return a list of problems with an HF text config object (empty when it matches the fixture)."""
    fields = text_fields(fx)
    want = {k: fields[k] for k in CHECKED_FIELDS}
    want["tie_word_embeddings"] = bool(fx["tied"])
    problems = []
    for k, v in want.items():
        got = getattr(cfg, k, "<missing>")
        if isinstance(v, float):
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) and abs(float(got) - v) <= 1e-12
        elif isinstance(v, bool):
            ok = got is v or (isinstance(got, bool) and got == v)
        else:
            ok = got == v
        if not ok:
            problems.append(f"{k}={got!r} (want {v!r})")
    lt = getattr(cfg, "layer_types", None)
    if lt is None or list(lt) != layer_types():
        problems.append(f"layer_types={lt!r} (want {layer_types()!r})")
    rp = getattr(cfg, "rope_parameters", None)
    if not isinstance(rp, dict):
        problems.append(f"rope_parameters={rp!r} is not a dict")
    else:
        if rp.get("rope_type", rp.get("type", "default")) != "default":
            problems.append(f"rope_parameters.rope_type={rp.get('rope_type')!r} (want 'default')")
        theta = rp.get("rope_theta")
        if not isinstance(theta, (int, float)) or abs(float(theta) - THETA) > 1e-3:
            problems.append(f"rope_parameters.rope_theta={theta!r} (want {THETA})")
        prf = rp.get("partial_rotary_factor")
        if not isinstance(prf, (int, float)) or abs(float(prf) - PARTIAL) > 1e-12:
            problems.append(f"rope_parameters.partial_rotary_factor={prf!r} (want {PARTIAL})")
        ms = rp.get("mrope_section")
        if fx["nested"] and ms is not None and list(ms) != MROPE_SECTION:
            problems.append(f"rope_parameters.mrope_section={ms!r} (want {MROPE_SECTION})")
    return problems


def explicit_config(fx):
    rope = {"rope_type": "default", "rope_theta": THETA, "partial_rotary_factor": PARTIAL}
    if fx["nested"]:
        rope["mrope_section"] = list(MROPE_SECTION)
        rope["mrope_interleaved"] = True
    return Qwen3_5TextConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV,
        head_dim=HEAD_DIM,
        linear_num_key_heads=fx["nk"],
        linear_num_value_heads=fx["nv"],
        linear_key_head_dim=LIN_DK,
        linear_value_head_dim=LIN_DV,
        linear_conv_kernel_dim=CONV_K,
        hidden_act="silu",
        rms_norm_eps=EPS,
        attention_bias=False,
        attention_dropout=0.0,
        max_position_embeddings=MAX_POS,
        initializer_range=0.02,
        eos_token_id=EOS,
        use_cache=True,
        tie_word_embeddings=bool(fx["tied"]),
        layer_types=layer_types(),
        rope_parameters=rope,
    )


def load_hf_config(fx, fixture_dir, cfg_json):
    """Read the written config.json the way HF does; fall back to an explicit equivalent config."""
    attempts = []
    try:
        if fx["nested"]:
            if Qwen3_5Config is not None:
                cfg = Qwen3_5Config.from_pretrained(fixture_dir).text_config
                how = "Qwen3_5Config.from_pretrained(config.json).text_config"
            else:
                cfg = Qwen3_5TextConfig.from_dict(dict(cfg_json["text_config"]))
                how = "Qwen3_5TextConfig.from_dict(config.json['text_config'])"
        else:
            cfg = Qwen3_5TextConfig.from_pretrained(fixture_dir)
            how = "Qwen3_5TextConfig.from_pretrained(config.json)"
        problems = check_hf_config(cfg, fx)
        if not problems:
            say(f"  HF config: {how} reads the fixture config correctly")
            return cfg, how
        attempts.append(f"{how} mismatch: " + "; ".join(problems))
    except Exception as e:  # noqa: BLE001
        attempts.append(f"reading config.json failed: {type(e).__name__}: {e}")
    for a in attempts:
        warn(f"  {a}")
    warn("  using an explicitly constructed Qwen3_5TextConfig with equivalent values (config.json unchanged)")
    try:
        cfg = explicit_config(fx)
    except Exception as e:  # noqa: BLE001
        die(f"cannot construct Qwen3_5TextConfig explicitly: {type(e).__name__}: {e}")
    problems = check_hf_config(cfg, fx)
    if problems:
        die("explicit Qwen3_5TextConfig does not hold the fixture values: " + "; ".join(problems))
    return cfg, "explicit Qwen3_5TextConfig (" + " | ".join(attempts) + ")"


def runtime_config(cfg):
    """Copy for the reference run: no EOS (generation must not stop), float32, eager attention."""
    rc = copy.deepcopy(cfg)
    for attr, val in (("eos_token_id", None), ("dtype", torch.float32), ("_attn_implementation", "eager")):
        try:
            setattr(rc, attr, val)
        except Exception as e:  # noqa: BLE001
            warn(f"could not set config.{attr}={val!r}: {type(e).__name__}: {e}")
    return rc


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def expected_shapes(fx):
    """HF Qwen3_5ForCausalLM parameter names (prefix model.) and shapes; lm_head only when untied."""
    kd, vd = fx["nk"] * LIN_DK, fx["nv"] * LIN_DV
    cd = 2 * kd + vd
    nv = fx["nv"]
    s = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i, lt in enumerate(layer_types()):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (HIDDEN,)
        if lt == "full_attention":
            a = p + "self_attn."
            s[a + "q_proj.weight"] = (2 * N_HEADS * HEAD_DIM, HIDDEN)
            s[a + "k_proj.weight"] = (N_KV * HEAD_DIM, HIDDEN)
            s[a + "v_proj.weight"] = (N_KV * HEAD_DIM, HIDDEN)
            s[a + "o_proj.weight"] = (HIDDEN, N_HEADS * HEAD_DIM)
            s[a + "q_norm.weight"] = (HEAD_DIM,)
            s[a + "k_norm.weight"] = (HEAD_DIM,)
        else:
            g = p + "linear_attn."
            s[g + "in_proj_qkv.weight"] = (cd, HIDDEN)
            s[g + "in_proj_z.weight"] = (vd, HIDDEN)
            s[g + "in_proj_b.weight"] = (nv, HIDDEN)
            s[g + "in_proj_a.weight"] = (nv, HIDDEN)
            s[g + "conv1d.weight"] = (cd, 1, CONV_K)
            s[g + "A_log"] = (nv,)
            s[g + "dt_bias"] = (nv,)
            s[g + "norm.weight"] = (LIN_DV,)
            s[g + "out_proj.weight"] = (HIDDEN, vd)
        s[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        s[p + "mlp.gate_proj.weight"] = (INTER, HIDDEN)
        s[p + "mlp.up_proj.weight"] = (INTER, HIDDEN)
        s[p + "mlp.down_proj.weight"] = (HIDDEN, INTER)
    s["model.norm.weight"] = (HIDDEN,)
    if not fx["tied"]:
        s["lm_head.weight"] = (VOCAB, HIDDEN)
    return s


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _randn(shape, g, std, mean=0.0):
    return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean


def _uniform(shape, g, lo, hi):
    return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo


def init_tensor(name, shape, g, fx):
    if name == "model.embed_tokens.weight":
        # Tied: the embedding is also the output matrix; start near the logit-std target.
        return _randn(shape, g, 0.4 if fx["tied"] else 1.0)
    if name == "lm_head.weight":
        return _randn(shape, g, 0.375)
    if name == "model.norm.weight" or name.endswith(ZC_NORM_SUFFIXES):
        return _randn(shape, g, 0.1)  # zero-centred (1 + w) norms
    if name.endswith("linear_attn.norm.weight"):
        return _randn(shape, g, 0.1, 1.0)  # plain-weight gated norm
    if name.endswith("linear_attn.A_log"):
        return torch.log(_uniform(shape, g, 1.0, 16.0))
    if name.endswith("linear_attn.dt_bias"):
        # Spread over [-5, 0]: softplus(a + dt_bias) then ranges from ~0.007 to ~1, so some heads keep
        # state for hundreds of tokens (decay ~0.99) and others forget within a few tokens.
        return _uniform(shape, g, -5.0, 0.0)
    if name.endswith("linear_attn.conv1d.weight"):
        return _randn(shape, g, 0.35)
    if len(shape) == 2:
        scale = 0.7 if name.endswith(OUT_PROJ_SUFFIXES) else 1.0
        return _randn(shape, g, scale / math.sqrt(shape[1]))
    raise RuntimeError(f"no init rule for {name} {shape}")


def make_master_weights(fx):
    g = torch.Generator(device="cpu")
    g.manual_seed(fx["seed"])
    return {name: init_tensor(name, shape, g, fx) for name, shape in expected_shapes(fx).items()}


def make_extras(fx):
    """Dummy multimodal / MTP tensors that loaders must skip (nested fixture only)."""
    if not fx["nested"]:
        return {}
    g = torch.Generator(device="cpu")
    g.manual_seed(fx["seed"] + 7)
    vm = VIS_HIDDEN * VIS_MERGE * VIS_MERGE
    return {
        "model.visual.blocks.0.attn.qkv.weight": _randn((3 * VIS_HIDDEN, VIS_HIDDEN), g, 0.02),
        "model.visual.merger.linear_fc1.weight": _randn((vm, vm), g, 0.02),
        "mtp.fc.weight": _randn((HIDDEN, 2 * HIDDEN), g, 0.02),
        "mtp.layers.0.input_layernorm.weight": _randn((HIDDEN,), g, 0.1),
    }


def saved_dtype(name):
    return torch.float32 if name.endswith(F32_SUFFIXES) else torch.bfloat16


def round_like_saved(name, t):
    return t.to(saved_dtype(name)).to(torch.float32)


def rounded_state(master, fx):
    sd = {k: round_like_saved(k, v) for k, v in master.items()}
    if fx["tied"]:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd


def to_file_name(hf_name, fx):
    if fx["nested"] and hf_name.startswith("model."):
        return NESTED_PREFIX + hf_name[len("model."):]
    return hf_name


def from_file_name(fname, fx):
    """Checkpoint name -> Qwen3_5ForCausalLM name, or None for tensors a text loader skips."""
    if fname.startswith("model.visual.") or fname.startswith("mtp."):
        return None
    if fx["nested"]:
        if fname.startswith(NESTED_PREFIX):
            return "model." + fname[len(NESTED_PREFIX):]
        if fname == "lm_head.weight":
            return fname
        die(f"unexpected tensor {fname!r} in nested checkpoint")
    if fname.startswith("model.") or fname == "lm_head.weight":
        return fname
    die(f"unexpected tensor {fname!r} in flat checkpoint")
    return None


def shard_index(fname):
    if fname.startswith("model.visual.") or fname.startswith(NESTED_PREFIX + "embed_tokens."):
        return 0
    m = re.match(r"model\.language_model\.layers\.(\d+)\.", fname)
    if m and int(m.group(1)) < LAYERS // 2:
        return 0
    return 1


def write_checkpoint(d, fx, master, extras):
    tensors = {}
    for name, t in master.items():
        tensors[to_file_name(name, fx)] = t.to(saved_dtype(name)).contiguous().clone()
    for fname, t in extras.items():
        tensors[fname] = t.to(torch.bfloat16).contiguous().clone()
    meta = {"format": "pt"}
    if not fx["nested"]:
        save_file(tensors, os.path.join(d, SINGLE_FILE), metadata=meta)
        return
    parts = [{}, {}]
    for fname in sorted(tensors):
        parts[shard_index(fname)][fname] = tensors[fname]
    if not parts[0] or not parts[1]:
        die("internal: a shard would be empty")
    weight_map = {}
    total = 0
    for i, part in enumerate(parts):
        save_file(part, os.path.join(d, SHARD_FILES[i]), metadata=meta)
        for fname, t in part.items():
            weight_map[fname] = SHARD_FILES[i]
            total += t.numel() * t.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": {k: weight_map[k] for k in sorted(weight_map)}}
    with open(os.path.join(d, INDEX_FILE), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def read_checkpoint(d, fx, master, extras):
    """Read the written files back exactly as a loader would; return the CausalLM state dict (float32)."""
    idx_path = os.path.join(d, INDEX_FILE)
    single = os.path.join(d, SINGLE_FILE)
    wm = None
    if fx["nested"]:
        if not os.path.exists(idx_path):
            die(f"{idx_path} missing")
        if os.path.exists(single):
            die(f"{single} must not exist next to a sharded checkpoint")
        with open(idx_path) as f:
            index = json.load(f)
        wm = index["weight_map"]
        files = sorted(set(wm.values()))
        if files != sorted(SHARD_FILES):
            die(f"index names shards {files}, want {list(SHARD_FILES)}")
    else:
        if os.path.exists(idx_path):
            die(f"{idx_path} must not exist for a single-file checkpoint")
        files = [SINGLE_FILE]
    sd, skipped, seen = {}, [], {}
    total = 0
    for fn in files:
        with safe_open(os.path.join(d, fn), framework="pt") as f:
            md = f.metadata() or {}
            if md.get("format") != "pt":
                die(f"{fn}: safetensors metadata {md!r} lacks format=pt")
            for k in f.keys():
                t = f.get_tensor(k)
                if k in seen:
                    die(f"tensor {k} appears in both {seen[k]} and {fn}")
                seen[k] = fn
                total += t.numel() * t.element_size()
                if t.dtype != saved_dtype(k):
                    die(f"{fn}:{k} stored as {t.dtype}, want {saved_dtype(k)}")
                hf = from_file_name(k, fx)
                if hf is None:
                    skipped.append(k)
                    if not torch.equal(t, extras[k].to(torch.bfloat16)):
                        die(f"dummy tensor {k} not written correctly")
                    continue
                sd[hf] = t.to(torch.float32)
    if wm is not None:
        if set(wm) != set(seen):
            die(f"index/shard mismatch: only in index {sorted(set(wm) - set(seen))}, only in shards {sorted(set(seen) - set(wm))}")
        bad = [k for k, fn in wm.items() if seen[k] != fn]
        if bad:
            die(f"index points at the wrong shard for {bad[:5]}")
        if index["metadata"]["total_size"] != total:
            die(f"index total_size {index['metadata']['total_size']} != actual tensor bytes {total}")
    if sorted(skipped) != sorted(extras):
        die(f"skipped tensors {sorted(skipped)} != dummy tensors {sorted(extras)}")
    shapes = expected_shapes(fx)
    if set(sd) != set(shapes):
        die(f"checkpoint names differ from spec: missing {sorted(set(shapes) - set(sd))[:8]}, extra {sorted(set(sd) - set(shapes))[:8]}")
    for k, shp in shapes.items():
        if tuple(sd[k].shape) != tuple(shp):
            die(f"{k}: shape {tuple(sd[k].shape)} != spec {shp}")
        if not torch.equal(sd[k], round_like_saved(k, master[k])):
            die(f"{k}: value read back differs from the value written")
    if fx["tied"]:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd, sorted(skipped), total


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def all_named_params(model):
    """name -> Parameter, listing a shared (tied) Parameter under every name."""
    try:
        return dict(model.named_parameters(remove_duplicate=False))
    except TypeError:  # torch < 2.0
        out = {}
        for mname, mod in model.named_modules():
            for pname, p in mod._parameters.items():
                if p is not None:
                    out[f"{mname}.{pname}" if mname else pname] = p
        return out


def build_model(cfg_rt, device):
    try:
        model = Qwen3_5ForCausalLM(cfg_rt)
    except Exception as e:  # noqa: BLE001
        die(f"Qwen3_5ForCausalLM(config) failed: {type(e).__name__}: {e}")
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager" and hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation("eager")
        except Exception as e:  # noqa: BLE001
            warn(f"model.set_attn_implementation('eager') failed: {type(e).__name__}: {e}")
        impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        die(f"could not select eager attention (model.config._attn_implementation={impl!r})")
    model.to(device=device, dtype=torch.float32)
    model.eval()
    bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
    if bad:
        die(f"parameters not float32 after .to(float32): {bad[:5]}")
    try:
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
    except Exception as e:  # noqa: BLE001
        warn(f"could not edit model.generation_config: {type(e).__name__}: {e}")
    return model


def check_model(model, fx):
    """Structure, RoPE, tying and parameter-count checks. Returns (param_count, hf_shares_tied_weight)."""
    layers = model.model.layers
    if len(layers) != LAYERS:
        die(f"model has {len(layers)} layers, want {LAYERS}")
    for i, (layer, lt) in enumerate(zip(layers, layer_types())):
        has_lin, has_att = hasattr(layer, "linear_attn"), hasattr(layer, "self_attn")
        if (lt == "full_attention") != (has_att and not has_lin) or (lt == "linear_attention") != (has_lin and not has_att):
            die(f"layer {i}: want {lt}, module has linear_attn={has_lin} self_attn={has_att}")
    rot = model.model.rotary_emb
    inv = rot.inv_freq.detach().double().cpu()
    want = 1.0 / (THETA ** (torch.arange(0, ROT_DIM, 2, dtype=torch.float64) / ROT_DIM))
    if tuple(inv.shape) != tuple(want.shape) or not torch.allclose(inv, want, rtol=1e-5, atol=0.0):
        die(f"rotary inv_freq {inv.tolist()} != expected (theta={THETA}, rotary dim {ROT_DIM}) {want.tolist()}")
    scaling = float(getattr(rot, "attention_scaling", 1.0))
    if scaling != 1.0:
        die(f"rotary attention_scaling={scaling}, want 1.0")
    shares = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if fx["tied"] and not shares:
        warn("HF did not tie lm_head to embed_tokens; lm_head is loaded with the embedding values (equivalent)")
    if not fx["tied"] and shares:
        die("HF tied lm_head to embed_tokens although tie_word_embeddings is false")
    shapes = expected_shapes(fx)
    names = all_named_params(model)
    want_names = set(shapes) | ({"lm_head.weight"} if fx["tied"] else set())
    if set(names) != want_names:
        die(f"HF parameter names differ from spec: missing {sorted(want_names - set(names))[:8]}, extra {sorted(set(names) - want_names)[:8]}")
    for n, shp in shapes.items():
        if tuple(names[n].shape) != tuple(shp):
            die(f"HF parameter {n} has shape {tuple(names[n].shape)}, spec {shp}")
    expected = sum(numel(s) for s in shapes.values())
    if fx["tied"] and not shares:
        expected += VOCAB * HIDDEN
    actual = sum(p.numel() for p in model.parameters())
    if actual != expected:
        die(f"HF model has {actual} parameters, expected {expected}")
    return actual, shares


def load_exact(model, sd, what):
    """Load sd (CausalLM names) after poisoning every parameter with NaN; verify every value landed."""
    sd = dict(sd)
    # When HF shares one Parameter between lm_head and embed_tokens, load it once (via the embedding)
    # so the result does not depend on how load_state_dict treats the duplicate key.
    shares = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    allowed_missing = set()
    if shares:
        lm = sd.pop("lm_head.weight", None)
        if lm is not None and not torch.equal(lm, sd["model.embed_tokens.weight"]):
            die(f"{what}: lm_head and embed_tokens share storage in HF but the state dict holds different values")
        allowed_missing.add("lm_head.weight")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    try:
        res = model.load_state_dict(sd, strict=False)
    except Exception as e:  # noqa: BLE001
        die(f"{what}: load_state_dict failed: {type(e).__name__}: {e}")
    params = all_named_params(model)
    missing = [k for k in res.missing_keys if k not in allowed_missing]
    unexpected = list(res.unexpected_keys)
    missing_params = [k for k in missing if k in params]
    if unexpected or missing_params:
        die(f"{what}: unexpected keys {unexpected[:8]}, missing parameters {missing_params[:8]}")
    if missing:
        warn(f"{what}: non-parameter keys absent from the state dict (buffers): {missing[:8]}")
    for n, p in params.items():
        src = sd["model.embed_tokens.weight"] if (shares and n == "lm_head.weight") else sd.get(n)
        if src is None:
            die(f"{what}: no source tensor for parameter {n}")
        if not torch.isfinite(src).all():
            die(f"{what}: source tensor {n} is not finite")
        if not torch.equal(p.detach().cpu(), src):
            die(f"{what}: parameter {n} does not hold the loaded value (NaN poison left or value changed)")


def forward_logits(model, ids, device, **kw):
    with torch.no_grad():
        out = model(input_ids=ids.to(device), use_cache=False, **kw)
    logits = out.logits[0].float().cpu()
    if not torch.isfinite(logits).all():
        die("non-finite logits")
    return logits, out


def make_prompt(fx, L, salt=0):
    g = torch.Generator(device="cpu")
    g.manual_seed(fx["seed"] * 1000 + L + salt)
    return torch.randint(0, EOS, (1, L), generator=g, dtype=torch.long)  # ids in [0, 255)


def hidden_rms(model, ids, device):
    try:
        _, out = forward_logits(model, ids, device, output_hidden_states=True)
        hs = getattr(out, "hidden_states", None)
        if not hs:
            return None
        return [round(h[0].float().pow(2).mean().sqrt().item(), 3) for h in hs]
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001
        return f"unavailable ({type(e).__name__}: {e})"


def calibrate(model, master, fx, device, calib_ids):
    """Scale lm_head (untied) or the embedding (tied) until the logit std is ~TARGET_STD."""
    key = "model.embed_tokens.weight" if fx["tied"] else "lm_head.weight"
    history = []
    for it in range(CALIB_MAX_ITERS):
        load_exact(model, rounded_state(master, fx), f"calibration step {it}")
        logits, _ = forward_logits(model, calib_ids, device)
        std = logits.std().item()
        history.append(round(std, 5))
        if abs(std - TARGET_STD) <= CALIB_TOL or it == CALIB_MAX_ITERS - 1:
            break
        factor = float(f"{TARGET_STD / std:.4g}")  # 4 significant digits keeps weights device-independent
        master[key] = master[key] * factor
    std = history[-1]
    if not (STD_LO <= std <= STD_HI):
        die(f"logit std calibration failed: history {history} (want {STD_LO}..{STD_HI})")
    return history


# --------------------------------------------------------------------------------------------
# Reference run
# --------------------------------------------------------------------------------------------


def run_generate(model, ids, device):
    ids_d = ids.to(device)
    kw = dict(
        attention_mask=torch.ones_like(ids_d),  # explicit: pad_token_id=0 may occur in the prompt
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        use_cache=True,
    )
    step_logits = None
    with torch.no_grad():
        try:
            out = model.generate(ids_d, return_dict_in_generate=True, output_logits=True, **kw)
            seqs = out.sequences
            if getattr(out, "logits", None) is not None:
                step_logits = torch.stack([x[0].float().cpu() for x in out.logits])
        except (TypeError, ValueError) as e:
            warn(f"generate(output_logits=True) failed ({type(e).__name__}: {e}); retrying without step logits")
            out = model.generate(ids_d, **kw)
            seqs = out if torch.is_tensor(out) else out.sequences
    seq = seqs[0].cpu()
    L = ids.shape[1]
    if seq.shape[0] != L + NEW_TOKENS:
        die(f"generate returned {seq.shape[0] - L} new tokens, want {NEW_TOKENS} (did it stop on EOS?)")
    if not torch.equal(seq[:L], ids[0]):
        die("generate output does not start with the prompt")
    return seq, step_logits


def reference_run(model, prompt, vocab, device):
    """The references of every prompt length: forward logits, the greedy continuation and its step
    logits, checked against a teacher-forced no-cache forward. prompt(L) makes the L-token prompt."""
    tensors, prompts, greedy, checks = {}, {}, {}, {}
    top1_last = {}
    worst = 0.0
    for L in PROMPT_LENS:
        ids = prompt(L)
        logits, _ = forward_logits(model, ids, device)
        if tuple(logits.shape) != (L, vocab):
            die(f"logits shape {tuple(logits.shape)} != {(L, vocab)}")
        seq, step = run_generate(model, ids, device)
        new = seq[L:]
        # Teacher-forced no-cache forward over prompt + continuation.
        tf, _ = forward_logits(model, seq[None, :], device)
        tf_steps = tf[L - 1 : L - 1 + NEW_TOKENS]
        tf_argmax = tf_steps.argmax(-1)
        c = {"teacher_forced_argmax_mismatches": int((tf_argmax != new).sum().item())}
        if step is not None:
            if tuple(step.shape) != (NEW_TOKENS, vocab):
                die(f"generate step logits shape {tuple(step.shape)}")
            if not torch.equal(step.argmax(-1), new):
                die(
                    f"prompt {L}: generate() did not pick the argmax of its own logits at every step; a logits "
                    "processor (EOS/min_new_tokens masking?) is active, so the greedy reference would be wrong"
                )
            top2 = torch.topk(step, 2, dim=-1).values
            c["min_top1_margin"] = round((top2[:, 0] - top2[:, 1]).min().item(), 6)
            diff = (step - tf_steps).abs().max().item()
            c["decode_vs_forward_max_abs"] = diff
            worst = max(worst, diff)
            if diff > 5e-2:
                die(f"prompt {L}: HF cached decode logits differ from no-cache forward by {diff:.3e}")
            if diff > 1e-3:
                warn(f"prompt {L}: HF cached decode vs no-cache forward max abs diff {diff:.3e}")
            pre = (step[0] - logits[-1]).abs().max().item()
            c["prefill_vs_forward_max_abs"] = pre
            tensors[f"greedy_logits.{L}"] = step.contiguous()
        elif c["teacher_forced_argmax_mismatches"]:
            warn(f"prompt {L}: {c['teacher_forced_argmax_mismatches']} greedy tokens differ from teacher-forced argmax")
        tensors[f"logits.{L}"] = logits.contiguous()
        prompts[str(L)] = [int(x) for x in ids[0].tolist()]
        greedy[str(L)] = [int(x) for x in new.tolist()]
        checks[str(L)] = c
        top1_last[str(L)] = int(logits[-1].argmax().item())
    return tensors, prompts, greedy, checks, top1_last, worst


def run_fields(prompts, greedy, logit_std, env):
    """The ref.json fields of a reference run: its inputs and outputs and what computed them."""
    return {
        "prompts": prompts,
        "greedy": greedy,
        "logit_std": round(logit_std, 6),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": env["device"],
        "dtype": "float32",
    }


def write_refs(d, tensors, inputs, ref):
    """Write ref.safetensors (tensors) and ref.json (ref, plus the size and sha256 of the files
    of inputs that exist and of ref.safetensors) into d."""
    save_file(tensors, os.path.join(d, "ref.safetensors"), metadata={"format": "pt"})
    files = {}
    for fn in tuple(inputs) + ("ref.safetensors",):
        p = os.path.join(d, fn)
        if os.path.exists(p):
            files[fn] = {"bytes": os.path.getsize(p), "sha256": sha256_file(p)}
    ref["files"] = files
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def crosscheck(fx, d, device, ref_logits_65):
    """Optional: load the written directory with HF from_pretrained and compare logits (never fatal)."""
    cls = Qwen3_5ForConditionalGeneration if fx["nested"] else Qwen3_5ForCausalLM
    if cls is None:
        return {"error": "model class not importable"}
    res = {"class": cls.__name__}
    m = None
    try:
        kw = {"attn_implementation": "eager", "output_loading_info": True}
        try:
            m, linfo = cls.from_pretrained(d, dtype=torch.float32, **kw)
        except TypeError:
            m, linfo = cls.from_pretrained(d, torch_dtype=torch.float32, **kw)
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            v = linfo.get(k) if isinstance(linfo, dict) else None
            if v is not None:
                v = sorted(str(x) for x in v)
                res[k] = v[:20] + ([f"... {len(v) - 20} more"] if len(v) > 20 else [])
        m.to(device=device, dtype=torch.float32)
        m.eval()
        ids = make_prompt(fx, 65)
        with torch.no_grad():
            lg = m(input_ids=ids.to(device), use_cache=False).logits[0].float().cpu()
        diff = (lg - ref_logits_65).abs().max().item()
        res["max_abs_diff_logits_65"] = diff
        res["ok"] = bool(diff < 1e-4)
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"[:600]
        res["ok"] = False
    finally:
        del m
    return res


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def human(n):
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.2f} MiB"


def run_fixture(fx, out_root, device, env, do_crosscheck):
    name = fx["name"]
    say(f"\n=== {name} ===")
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    for fn in OUTPUT_FILES:
        p = os.path.join(d, fn)
        if os.path.exists(p):
            os.remove(p)
    torch.manual_seed(fx["seed"])

    cfg_json = config_json(fx)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
        f.write("\n")
    cfg, cfg_source = load_hf_config(fx, d, cfg_json)
    cfg_rt = runtime_config(cfg)

    master = make_master_weights(fx)
    extras = make_extras(fx)
    calib_ids = make_prompt(fx, CALIB_LEN, salt=777)

    # 1. Calibrate the logit scale on a scratch model.
    model = build_model(cfg_rt, device)
    check_model(model, fx)
    EAGER_CALLS["n"] = 0
    history = calibrate(model, master, fx, device, calib_ids)
    n_full = layer_types().count("full_attention")
    eager_seen = EAGER_CALLS["n"]
    if EAGER_CALLS["hooked"]:
        if eager_seen == 0:
            warn("eager_attention_forward was never called; attention may not be the eager path")
        elif eager_seen % n_full != 0:
            warn(f"eager_attention_forward called {eager_seen} times, not a multiple of {n_full}")
    rms = hidden_rms(model, calib_ids, device)
    say(f"  calibration logit std history {history}; hidden rms per layer {rms}")
    if isinstance(rms, list) and (max(rms) > 100 or min(rms) < 1e-2):
        warn(f"hidden-state rms outside [0.01, 100]: {rms}")
    del model

    # 2. Write the checkpoint, read it back, and build the reference model from the files.
    write_checkpoint(d, fx, master, extras)
    sd, skipped, ckpt_bytes = read_checkpoint(d, fx, master, extras)
    model = build_model(cfg_rt, device)
    n_params, shares = check_model(model, fx)
    load_exact(model, sd, "reference load")
    logits, _ = forward_logits(model, calib_ids, device)
    logit_std = logits.std().item()
    if not (STD_LO <= logit_std <= STD_HI):
        die(f"reference logit std {logit_std:.4f} outside {STD_LO}..{STD_HI}")
    if abs(logit_std - history[-1]) > 1e-4:
        warn(f"reference logit std {logit_std:.6f} differs from calibration {history[-1]}")

    # 3. Reference outputs.
    tensors, prompts, greedy, checks, top1_last, worst = reference_run(model, lambda L: make_prompt(fx, L), VOCAB, device)
    cross = None
    if do_crosscheck:
        cross = crosscheck(fx, d, device, tensors["logits.65"])
        if cross.get("ok"):
            say(f"  cross-check {cross['class']}.from_pretrained: OK (max abs diff {cross['max_abs_diff_logits_65']:.2e})")
        else:
            warn(f"  cross-check {cross.get('class')}.from_pretrained did not match (informational): {cross}")
    del model

    ref = {
        "fixture": name,
        **run_fields(prompts, greedy, logit_std, env),
        "gdn_path": env["gdn_path"],
        "kernel_availability": env["avail"],
        "attn_implementation": "eager",
        "eager_attention_calls_seen": eager_seen if EAGER_CALLS["hooked"] else None,
        "precision": env["precision"],
        "hf_config_source": cfg_source,
        "tie_word_embeddings": bool(fx["tied"]),
        "hf_shares_lm_head_with_embedding": bool(shares),
        "linear_num_key_heads": fx["nk"],
        "linear_num_value_heads": fx["nv"],
        "param_count": int(n_params),
        "checkpoint_tensor_bytes": int(ckpt_bytes),
        "skipped_checkpoint_tensors": skipped,
        "seed": fx["seed"],
        "calibration": {"target_std": TARGET_STD, "prompt_len": CALIB_LEN, "std_history": history},
        "generate_kwargs": GENERATE_KWARGS,
        "checks": checks,
        "top1_last": top1_last,
        "hf_from_pretrained_check": cross,
    }
    write_refs(d, tensors, ("config.json", SINGLE_FILE) + SHARD_FILES + (INDEX_FILE,), ref)

    sizes = ", ".join(f"{fn} {human(os.path.getsize(os.path.join(d, fn)))}" for fn in sorted(os.listdir(d)))
    total = sum(os.path.getsize(os.path.join(d, fn)) for fn in os.listdir(d))
    tops = " ".join(f"{k}:{v}" for k, v in top1_last.items())
    line = (
        f"[{name}] logit_std={logit_std:.3f} top1_last[{tops}] decode_vs_forward<={worst:.1e} "
        f"gdn={env['gdn_path'].split(' (')[0]} | {sizes} | total {human(total)}"
    )
    say(line)
    return line


# --------------------------------------------------------------------------------------------
# Dense Qwen3 (--qwen3 DIR): references for an existing checkpoint
# --------------------------------------------------------------------------------------------

QWEN3_SEED = 3001
QWEN3_FILES = ("config.json", SINGLE_FILE)


def load_qwen3_model(d, device):
    """Qwen3ForCausalLM from DIR in float32 with eager attention; strict about keys and values."""
    try:
        from transformers import Qwen3ForCausalLM
    except Exception as e:  # noqa: BLE001
        die(f"transformers {transformers.__version__} has no Qwen3ForCausalLM ({type(e).__name__}: {e})")
    kw = {"attn_implementation": "eager", "output_loading_info": True}
    try:
        model, info = Qwen3ForCausalLM.from_pretrained(d, dtype=torch.float32, **kw)
    except TypeError:
        model, info = Qwen3ForCausalLM.from_pretrained(d, torch_dtype=torch.float32, **kw)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = info.get(k) if isinstance(info, dict) else None
        if v:
            die(f"Qwen3ForCausalLM.from_pretrained({d}): {k} {sorted(str(x) for x in v)[:20]}")
    model.to(device=device, dtype=torch.float32)
    model.eval()
    if model.config._attn_implementation != "eager":
        die(f"attention implementation is {model.config._attn_implementation}, want eager")
    # Every parameter must hold the stored (bf16) value, upcast.
    stored = {}
    with safe_open(os.path.join(d, SINGLE_FILE), framework="pt") as f:
        for n in f.keys():
            stored[n] = f.get_tensor(n).float()
    shares = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    for n, p in model.named_parameters():
        src = stored.get(n)
        if src is None and n == "lm_head.weight" and shares:
            src = stored.get("model.embed_tokens.weight")
        if src is None:
            die(f"parameter {n} has no stored tensor")
        if not torch.equal(p.detach().cpu(), src):
            die(f"parameter {n} does not hold the stored value")
    return model, shares


def qwen3_prompt(vocab, L):
    g = torch.Generator(device="cpu")
    g.manual_seed(QWEN3_SEED * 1000 + L)
    return torch.randint(0, vocab - 3, (1, L), generator=g, dtype=torch.long)  # below the special tokens


def run_qwen3(d, device, env):
    say(f"\n=== Qwen3 {d} ===")
    for fn in QWEN3_FILES:
        if not os.path.exists(os.path.join(d, fn)):
            die(f"{d} has no {fn}: write it with `cohort make-model --preset qwen3-tiny --out {d}`")
    for fn in ("ref.safetensors", "ref.json"):
        if os.path.exists(os.path.join(d, fn)):
            os.remove(os.path.join(d, fn))
    with open(os.path.join(d, "config.json")) as f:
        cfg_json = json.load(f)
    if cfg_json.get("architectures") != ["Qwen3ForCausalLM"]:
        die(f"{d}/config.json: architectures {cfg_json.get('architectures')}, want ['Qwen3ForCausalLM']")
    vocab = int(cfg_json["vocab_size"])
    model, shares = load_qwen3_model(d, device)
    tensors, prompts, greedy, checks, top1_last, worst = reference_run(model, lambda L: qwen3_prompt(vocab, L), vocab, device)
    logit_std = tensors["logits.65"].std().item()
    if not (1.0 <= logit_std <= 10.0):
        warn(f"logit std {logit_std:.3f} outside [1, 10]: the references may be too flat or too peaky")
    del model
    ref = {
        "fixture": os.path.basename(os.path.normpath(d)),
        "architecture": "Qwen3ForCausalLM",
        **run_fields(prompts, greedy, logit_std, env),
        "gdn_path": "none (attention only)",
        "attn_implementation": "eager",
        "precision": env["precision"],
        "hf_shares_lm_head_with_embedding": bool(shares),
        "seed": QWEN3_SEED,
        "generate_kwargs": GENERATE_KWARGS,
        "checks": checks,
        "top1_last": top1_last,
    }
    write_refs(d, tensors, QWEN3_FILES, ref)
    tops = " ".join(f"{k}:{v}" for k, v in top1_last.items())
    line = f"[{ref['fixture']}] Qwen3 logit_std={logit_std:.3f} top1_last[{tops}] decode_vs_forward<={worst:.1e}"
    say(line)
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="testdata/hf", help="output root (one directory per fixture)")
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    ap.add_argument("--device", default="auto", help="auto | cuda | cuda:N | cpu")
    ap.add_argument("--no-crosscheck", action="store_true", help="skip the informational from_pretrained cross-check")
    ap.add_argument("--qwen3", default="", metavar="DIR", help="record references for the dense Qwen3 checkpoint in DIR instead")
    args = ap.parse_args()

    if args.qwen3:
        load_libs(qwen35=False)
        device = pick_device(args.device)
        say(f"device: {device_desc(device)}")
        _, precision = setup_precision(device)
        say("\nSUMMARY\n" + run_qwen3(args.qwen3, device, {"device": device_desc(device), "precision": precision}))
        return

    load_libs()
    names = [f["name"] for f in FIXTURES]
    selected = FIXTURES
    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [w for w in want if w not in names]
        if unknown:
            die(f"unknown fixture(s) {unknown}; known: {names}")
        selected = [f for f in FIXTURES if f["name"] in want]

    device = pick_device(args.device)
    say(f"device: {device_desc(device)}")
    _, precision = setup_precision(device)
    gdn_path, avail = detect_gdn_path()
    hook_eager_attention()
    env = {"device": device_desc(device), "gdn_path": gdn_path, "avail": avail, "precision": precision}

    os.makedirs(args.out, exist_ok=True)
    lines = []
    for fx in selected:
        try:
            lines.append(run_fixture(fx, args.out, device, env, not args.no_crosscheck))
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            die(f"fixture {fx['name']} failed: {type(e).__name__}: {e}")
    say("\nSUMMARY")
    for line in lines:
        say(line)


if __name__ == "__main__":
    main()
