package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"cohort/model"
)

// Rooflines and the Hugging Face baseline for `cohort bench`.
//
// Decode floor: the bytes one decode step must read at batch 1 — every
// weight in bf16, where the embedding table counts only when it is the
// (tied) LM head, since the lookup reads one row — divided by the usable
// HBM bandwidth. For Qwen3.5-4B's shape that is 8.41 GB / 4.3 TB/s = 1.96
// ms/token (shared/docs/reference/performance-anchors.md). The batch floor
// adds each request's GDN state (read and written every step) and its KV
// (read, bf16) at the mean context of the measured window.
//
// Prefill floor: max(weight bytes / bandwidth, FLOPs / peak) with FLOPs = 2 ×
// the matmul weights per token, plus causal attention (QKᵀ and PV over the
// prefix) and the LM head for the one output row.

const (
	// defaultPeakTBps is the usable H200 HBM bandwidth the docs plan with
	// (4.8 TB/s nominal, 4.24 measured copy).
	defaultPeakTBps = 4.3
	// defaultPeakTFLOPS is the H200's nominal dense bf16 tensor-core rate
	// (794 measured on 8192³).
	defaultPeakTFLOPS = 989.0
)

// modelRoofline holds the model's numbers the floors are computed from.
type modelRoofline struct {
	PeakTBps        float64 `json:"peak_tb_per_s"`
	PeakTFLOPS      float64 `json:"peak_tflops"`
	WeightBytesRead int64   `json:"weight_bytes_read_bf16"` // one decode step at batch 1
	StateBytes      int64   `json:"state_bytes"`            // one request's GDN state as the backends keep it: fp32 S + fp32 conv
	KVBytesPerToken int64   `json:"kv_bytes_per_token_bf16"`
	MatmulParams    int64   `json:"matmul_params"`      // weights of the per-token GEMMs, LM head excluded
	LMHeadParams    int64   `json:"lm_head_params"`     // vocab × hidden
	AttnFLOPsPerKey float64 `json:"attn_flops_per_key"` // per (query, key) pair, all attention layers: 4 × heads × head_dim × layers
}

// roofline sums the declared weights of arch for cfg (one rank, TP=1).
func roofline(arch model.Architecture, cfg *model.Config, peakTBps, peakTFLOPS float64) (modelRoofline, error) {
	decls, err := arch.Declare(cfg, model.Single)
	if err != nil {
		return modelRoofline{}, err
	}
	size := arch.StateSize(cfg, model.Single, 2)
	r := modelRoofline{PeakTBps: peakTBps, PeakTFLOPS: peakTFLOPS,
		StateBytes: size.SlotBytes, KVBytesPerToken: size.TokenBytes}
	untied := false
	for _, d := range decls {
		if d.Name == "lm_head.weight" {
			untied = true
		}
	}
	for _, d := range decls {
		n := int64(1)
		for _, s := range d.Shape {
			n *= int64(s)
		}
		switch {
		case d.Name == "embed_tokens.weight":
			if !untied {
				r.WeightBytesRead += 2 * n
				r.LMHeadParams = n
			} else {
				r.WeightBytesRead += 2 * int64(d.Shape[len(d.Shape)-1]) // one row
			}
		case d.Name == "lm_head.weight":
			r.WeightBytesRead += 2 * n
			r.LMHeadParams = n
		default:
			r.WeightBytesRead += 2 * n
			if len(d.Shape) == 2 {
				r.MatmulParams += n
			}
		}
	}
	r.AttnFLOPsPerKey = 4 * float64(cfg.Heads*cfg.HeadDim*size.KVLayers)
	return r, nil
}

// decodeFloorMs is the batch-1 floor: the weights read once.
func (r modelRoofline) decodeFloorMs() float64 {
	return float64(r.WeightBytesRead) / (r.PeakTBps * 1e12) * 1e3
}

// batchFloorMs adds each of batch requests' state (read and written) and KV
// (read at context tokens).
func (r modelRoofline) batchFloorMs(batch int, context float64) float64 {
	bytes := float64(r.WeightBytesRead) + float64(batch)*(2*float64(r.StateBytes)+context*float64(r.KVBytesPerToken))
	return bytes / (r.PeakTBps * 1e12) * 1e3
}

// prefillFloorMs is the shortest time one n-token prompt can take.
func (r modelRoofline) prefillFloorMs(n int) float64 {
	flops := 2*float64(r.MatmulParams)*float64(n) + r.AttnFLOPsPerKey*float64(n)*float64(n+1)/2 + 2*float64(r.LMHeadParams)
	compute := flops / (r.PeakTFLOPS * 1e12) * 1e3
	return max(compute, r.decodeFloorMs())
}

// hfBench is what tools/hfref/hfbench.py (and tools/bench/hf_generate.py)
// write; only the fields bench reads.
type hfBench struct {
	Transformers string `json:"transformers"`
	Torch        string `json:"torch"`
	GPU          string `json:"gpu"`
	PromptLen    int    `json:"prompt_len"`
	Results      []struct {
		Dtype  string `json:"dtype"`
		Decode []struct {
			Batch      int     `json:"batch"`
			MsPerToken float64 `json:"ms_per_token"`
			TokPerSec  float64 `json:"tok_per_s"`
			Error      string  `json:"error"`
		} `json:"decode"`
		Prefill []struct {
			Tokens    int     `json:"tokens"`
			Ms        float64 `json:"ms"`
			TokPerSec float64 `json:"tok_per_s"`
			Error     string  `json:"error"`
		} `json:"prefill"`
		TTFT *struct {
			PromptTokens int     `json:"prompt_tokens"`
			MedianMs     float64 `json:"median_ms"`
			Error        string  `json:"error"`
		} `json:"ttft"`
	} `json:"results"`
}

// hfBaseline is one dtype's HF numbers, keyed for lookup.
type hfBaseline struct {
	Source       string `json:"source"`
	Dtype        string `json:"dtype"`
	Transformers string `json:"transformers"`
	Torch        string `json:"torch"`
	GPU          string `json:"gpu"`
	PromptLen    int    `json:"prompt_len"`

	decodeMs  map[int]float64 // batch -> ms/token
	decodeTok map[int]float64
	prefillMs map[int]float64 // tokens -> ms
	ttftMs    map[int]float64 // prompt tokens -> median ms
}

func loadHFBaseline(path, dtype string) (*hfBaseline, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h hfBench
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var have []string
	for _, r := range h.Results {
		have = append(have, r.Dtype)
		if r.Dtype != dtype {
			continue
		}
		b := &hfBaseline{Source: path, Dtype: dtype, Transformers: h.Transformers, Torch: h.Torch, GPU: h.GPU, PromptLen: h.PromptLen,
			decodeMs: map[int]float64{}, decodeTok: map[int]float64{}, prefillMs: map[int]float64{}, ttftMs: map[int]float64{}}
		for _, d := range r.Decode {
			if d.Error == "" && d.MsPerToken > 0 {
				b.decodeMs[d.Batch], b.decodeTok[d.Batch] = d.MsPerToken, d.TokPerSec
			}
		}
		for _, p := range r.Prefill {
			if p.Error == "" && p.Ms > 0 {
				b.prefillMs[p.Tokens] = p.Ms
			}
		}
		if r.TTFT != nil && r.TTFT.Error == "" && r.TTFT.MedianMs > 0 {
			b.ttftMs[r.TTFT.PromptTokens] = r.TTFT.MedianMs
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s has no %q results (it has: %s)", path, dtype, strings.Join(have, ", "))
}

// speedup is hf / cohort (> 1: cohort is faster); 0 when either is missing.
func speedup(hf, cohort float64) float64 {
	if hf <= 0 || cohort <= 0 {
		return 0
	}
	return hf / cohort
}

// orDash formats v with format, or "—" when v is 0 (not measured).
func orDash(format string, v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}
