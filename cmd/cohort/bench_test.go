package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cohort/internal/testmodels/modelgen"
	"cohort/model"
)

func TestBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	hf := writeJSON(t, map[string]any{"transformers": "5.17.0", "torch": "2.11", "gpu": "test GPU", "results": []any{
		map[string]any{"dtype": "f32", "decode": []any{map[string]any{"batch": 1, "ms_per_token": 1.0}}},
		map[string]any{"dtype": "bf16",
			"decode": []any{
				map[string]any{"batch": 1, "ms_per_token": 1000.0, "tok_per_s": 1.0},
				map[string]any{"batch": 2, "error": "out of memory"}},
			"prefill": []any{map[string]any{"tokens": 16, "ms": 500.0, "tok_per_s": 32.0}},
			"ttft":    map[string]any{"prompt_tokens": 64, "median_ms": 700.0}},
	}})
	var stdout bytes.Buffer
	args := []string{"bench", "--preset", "tiny", "--device", "cpu", "--batch", "1,2", "--prompt-len", "8",
		"--decode-tokens", "4", "--prefill", "16", "--prefill-runs", "2", "--ttft-len", "64", "--ttft-runs", "1", "--json", out, "--hf-json", hf}
	if err := dispatch(context.Background(), args, &stdout); err != nil {
		t.Fatalf("bench: %v\n%s", err, stdout.String())
	}
	text := stdout.String()
	for _, want := range []string{"through the engine", "floor/measured", "ms/token", "TTFT ms", "TTFT, 64-token prompt",
		"batch floor ms", "HF ms/token", "×HF", "HF baseline: bf16, transformers 5.17.0"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r benchReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("JSON: %v\n%s", err, data)
	}
	if r.Preset != "tiny" || r.Device != "cpu" || r.TP != 1 || r.PromptLen != 8 || r.DecodeTokens != 4 {
		t.Errorf("header: %+v", r)
	}
	if r.FloorMsPerToken <= 0 || r.WeightBytesBF16 <= 0 || r.StateBytesBF16 <= 0 || r.LoadSeconds <= 0 || r.Slots < 2 {
		t.Errorf("floor/model numbers not positive: %+v", r)
	}
	if want := float64(r.Roofline.WeightBytesRead) / 4.3e12 * 1e3; math.Abs(r.FloorMsPerToken-want) > 1e-12 {
		t.Errorf("floor %g ms, want weight bytes / 4.3 TB/s = %g", r.FloorMsPerToken, want)
	}
	if r.HF == nil || r.HF.Dtype != "bf16" || r.HF.GPU != "test GPU" {
		t.Errorf("hf baseline %+v", r.HF)
	}
	if d := r.Decode[0]; d.HFMsPerToken != 1000 || d.SpeedupVsHF != 1000/d.MsPerToken || d.BatchFloorMs <= r.FloorMsPerToken ||
		math.Abs(d.XFloor*d.FloorFraction-1) > 1e-9 {
		t.Errorf("decode batch 1 vs floors and HF: %+v", d)
	}
	if d := r.Decode[1]; d.HFMsPerToken != 0 || d.SpeedupVsHF != 0 { // HF's batch 2 failed
		t.Errorf("decode batch 2 has HF numbers: %+v", d)
	}
	if p := r.Prefill[0]; p.HFMs != 500 || p.SpeedupVsHF <= 0 || p.FloorMs <= 0 || p.FloorFraction <= 0 {
		t.Errorf("prefill vs floor and HF: %+v", p)
	}
	if tt := r.TTFT; tt == nil || tt.HFMedianMs != 700 || tt.SpeedupVsHF <= 0 || tt.FloorMs <= 0 {
		t.Errorf("ttft vs floor and HF: %+v", tt)
	}
	if len(r.Decode) != 2 || r.Decode[0].Batch != 1 || r.Decode[1].Batch != 2 {
		t.Fatalf("decode results %+v", r.Decode)
	}
	for _, d := range r.Decode {
		if d.MsPerToken <= 0 || d.TokPerSec <= 0 || d.DecodeSeconds <= 0 || d.FloorFraction <= 0 {
			t.Errorf("decode batch %d: non-positive numbers %+v", d.Batch, d)
		}
		if d.Steps != 3 { // 4 tokens: the first from the prefill, 3 decode steps
			t.Errorf("decode batch %d: %d steps, want 3", d.Batch, d.Steps)
		}
	}
	if len(r.Prefill) != 1 || r.Prefill[0].Tokens != 16 || r.Prefill[0].TTFTMs <= 0 || r.Prefill[0].TokPerSec <= 0 ||
		r.Prefill[0].FirstMs <= 0 || len(r.Prefill[0].RunsMs) != 2 || r.Prefill[0].TTFTMs != median(r.Prefill[0].RunsMs) {
		t.Errorf("prefill results %+v (want the first run and the median of 2 timed ones)", r.Prefill)
	}
	if r.TTFT == nil || r.TTFT.PromptTokens != 64 || r.TTFT.MedianMs <= 0 || len(r.TTFT.RunsMs) != 1 {
		t.Errorf("ttft %+v", r.TTFT)
	}
}

func TestBenchFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "exactly one of --model and --preset"},
		{[]string{"--preset", "tiny", "--model", "x"}, "exactly one of --model and --preset"},
		{[]string{"--preset", "nope"}, "unknown preset"},
		{[]string{"--preset", "tiny", "--batch", "1,x"}, "not a positive integer"},
		{[]string{"--preset", "tiny", "--decode-tokens", "1"}, "at least 2"},
		{[]string{"--preset", "tiny", "--device", "tpu"}, "unknown --device"},
		{[]string{"--preset", "tiny", "extra"}, "unexpected arguments"},
		{[]string{"--preset", "tiny", "--peak-tbps", "0"}, "--peak-tbps and --peak-tflops must be positive"},
		{[]string{"--preset", "tiny", "--hf-json", "/nonexistent/hf.json"}, "--hf-json"},
		{[]string{"--preset", "tiny", "--hf-json", writeJSON(t, map[string]any{"results": []any{map[string]any{"dtype": "f32"}}})},
			`has no "bf16" results (it has: f32)`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := dispatch(context.Background(), append([]string{"bench"}, tt.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRoofline: the 4b-shape preset's floors are the numbers in
// shared/docs/reference/performance-anchors.md: 8.41 GB of bf16 weights read
// per batch-1 decode step, 1.96 ms at 4.3 TB/s, 7.14 GFLOP per token of
// non-embedding matmuls, 49.1 MiB of GDN state per request.
func TestRoofline(t *testing.T) {
	p := modelgen.Presets["4b-shape"]
	raw := map[string]any{
		"architectures": []string{"Qwen3_5ForCausalLM"}, "model_type": "qwen3_5_text",
		"vocab_size": p.Vocab, "hidden_size": p.Hidden, "num_hidden_layers": p.Layers, "intermediate_size": p.Intermediate,
		"num_attention_heads": p.Heads, "num_key_value_heads": p.KVHeads, "head_dim": p.HeadDim,
		"linear_num_key_heads": p.LinearKeyHeads, "linear_num_value_heads": p.LinearValueHeads,
		"linear_key_head_dim": p.LinearKeyDim, "linear_value_head_dim": p.LinearValueDim, "linear_conv_kernel_dim": 4,
		"full_attention_interval": 4, "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "attn_output_gate": true,
		"rope_theta": 1e7, "partial_rotary_factor": 0.25, "max_position_embeddings": p.MaxPositions, "eos_token_id": 1,
	}
	data, _ := json.Marshal(raw)
	cfg, err := model.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := model.Lookup(cfg.Architecture)
	if err != nil {
		t.Fatal(err)
	}
	r, err := roofline(arch, cfg, defaultPeakTBps, defaultPeakTFLOPS)
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %g, want %g ± %g", name, got, want, tol)
		}
	}
	near("weight GB read", float64(r.WeightBytesRead)/1e9, 8.41, 0.005)
	near("floor ms", r.decodeFloorMs(), 1.96, 0.005)
	near("matmul GFLOP/token", 2*float64(r.MatmulParams)/1e9, 7.14, 0.005)
	near("state MiB", float64(r.StateBytes)/(1<<20), 50.25, 0.005) // the spec's 49.125 with the conv state in fp32
	near("KV KiB/token", float64(r.KVBytesPerToken)/1024, 32, 0)
	// Batch 256 at 2k context: 52 GB, 12.1 ms in the anchors' table (bf16
	// conv state); 12.23 ms with the conv state in fp32, as stored.
	near("batch-256 floor ms", r.batchFloorMs(256, 2048), 12.23, 0.01)
	// Prefill of 1k tokens is compute-bound: ~7.4 TFLOP at 989 TFLOP/s.
	near("prefill 1k floor ms", r.prefillFloorMs(1024), 7.46, 0.05)
	if f := r.prefillFloorMs(1); f != r.decodeFloorMs() {
		t.Errorf("one-token prefill floor %g, want the bandwidth floor %g", f, r.decodeFloorMs())
	}
}

// TestBenchMixed: --mixed-prefill-tokens measures every setting on an
// engine of its own and reports arrivals and inter-token latencies, idle and
// loaded, in the table and the JSON.
func TestBenchMixed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout bytes.Buffer
	args := []string{"bench", "--preset", "tiny", "--device", "cpu", "--batch", "1", "--prompt-len", "8",
		"--decode-tokens", "4", "--prefill", "16", "--ttft-len", "0", "--json", out,
		"--mixed-prefill-tokens", "16,64", "--mixed-decoders", "3", "--mixed-decode-tokens", "12",
		"--mixed-prompt", "96", "--mixed-period", "1h"} // one arrival, at once: no load the test machine cannot serve
	if err := dispatch(context.Background(), args, &stdout); err != nil {
		t.Fatalf("bench: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "loaded p99 / idle p50") {
		t.Errorf("no mixed-load table:\n%s", stdout.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r benchReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Mixed) != 2 || r.Mixed[0].MaxPrefillTokens != 16 || r.Mixed[1].MaxPrefillTokens != 64 {
		t.Fatalf("mixed results %+v", r.Mixed)
	}
	for _, m := range r.Mixed {
		if m.Arrivals != 1 || m.ArrivalTTFTMs <= 0 || m.IdleP50Ms <= 0 || m.LoadedP99Ms < m.LoadedP50Ms || m.P99OverIdle <= 0 ||
			m.Decoders != 3 || m.DecodeTokens != 12 || m.ArrivalTokens != 96 {
			t.Errorf("setting %d: %+v", m.MaxPrefillTokens, m)
		}
	}
}

func TestITLPercentiles(t *testing.T) {
	at := func(ms ...int) reqTimes {
		var r reqTimes
		for _, m := range ms {
			r.tokens = append(r.tokens, time.Unix(0, 0).Add(time.Duration(m)*time.Millisecond))
		}
		return r
	}
	for _, tc := range []struct {
		name     string
		runs     []reqTimes
		p50, p99 float64
	}{
		{"none", nil, 0, 0},
		{"one token is no gap", []reqTimes{at(5)}, 0, 0},
		{"gaps of every request", []reqTimes{at(0, 1, 3), at(10, 14)}, 2, 4},
		{"the tail", []reqTimes{at(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 50)}, 1, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p50, p99 := itlPercentiles(tc.runs)
			if p50 != tc.p50 || p99 != tc.p99 {
				t.Errorf("p50, p99 = %v, %v; want %v, %v", p50, p99, tc.p50, tc.p99)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1}, 5}, {[]float64{9, 1, 4}, 4}, {[]float64{2, 8, 6, 4}, 6}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
