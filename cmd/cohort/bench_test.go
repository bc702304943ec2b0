package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout bytes.Buffer
	args := []string{"bench", "--preset", "tiny", "--device", "cpu", "--batch", "1,2", "--prompt-len", "8",
		"--decode-tokens", "4", "--prefill", "16", "--ttft-len", "64", "--ttft-runs", "1", "--json", out}
	if err := dispatch(context.Background(), args, &stdout); err != nil {
		t.Fatalf("bench: %v\n%s", err, stdout.String())
	}
	text := stdout.String()
	for _, want := range []string{"through the engine", "floor/measured", "ms/token", "TTFT ms", "TTFT, 64-token prompt"} {
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
	if len(r.Prefill) != 1 || r.Prefill[0].Tokens != 16 || r.Prefill[0].TTFTMs <= 0 || r.Prefill[0].TokPerSec <= 0 {
		t.Errorf("prefill results %+v", r.Prefill)
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
