package qwen3_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/model"
	"cohort/model/qwen3"
)

// tinyConfig returns the qwen3-tiny preset's config.json.
func tinyConfig(t *testing.T) string {
	t.Helper()
	dir := archtest.WritePreset(t, "qwen3-tiny")
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestParseConfig(t *testing.T) {
	base := tinyConfig(t)
	cut := func(olds ...string) func(string) string {
		return func(s string) string {
			for _, o := range olds {
				s = strings.Replace(s, o, "", 1)
			}
			return s
		}
	}
	tests := []struct {
		name    string
		edit    func(string) string
		headDim int
		theta   float64
		rotary  int
		maxPos  int
	}{
		{"preset", cut(), 32, 1e6, 32, 4096},
		{"legacy rope_theta", func(s string) string {
			return strings.Replace(s, `"rope_parameters": {`, `"rope_theta": 500000, "unused": {`, 1)
		}, 32, 5e5, 32, 4096},
		// transformers' Qwen3Config defaults.
		{"defaults", func(s string) string {
			return strings.Replace(cut(`"head_dim": 32,`, `"max_position_embeddings": 4096,`)(s), `"rope_parameters"`, `"unused"`, 1)
		}, 128, 1e4, 128, 32768},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.edit(base)
			if tt.name != "preset" && src == base {
				t.Fatal("the edit did not apply")
			}
			c, err := model.ParseConfig([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if c.Architecture != "Qwen3ForCausalLM" || c.HeadDim != tt.headDim || c.RopeTheta != tt.theta ||
				c.RotaryDim() != tt.rotary || c.MaxPositions != tt.maxPos || c.TieEmbeddings || c.NumLayers != 4 {
				t.Errorf("got %+v", c)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := tinyConfig(t)
	archtest.ConfigErrors(t, base, [][4]string{
		{"attention bias", `"attention_bias": false`, `"attention_bias": true`, "attention_bias"},
		{"sliding window", `"use_sliding_window": false`, `"use_sliding_window": true`, "use_sliding_window"},
		{"sliding layer", `"full_attention"`, `"sliding_attention"`, `layer_types[0] = "sliding_attention"`},
		{"layer_types length", `"full_attention",`, ``, "layer_types has 3 entries"},
		{"activation", `"hidden_act": "silu"`, `"hidden_act": "gelu"`, "hidden_act"},
		{"rope scaling", `"rope_type": "default"`, `"rope_type": "yarn"`, `rope_type "yarn"`},
	})
}

// TestStateSize: all of a request's state is KV, 2 · layers · KV heads ·
// head_dim elements per token; KV heads are replicated past their count.
func TestStateSize(t *testing.T) {
	c := &model.Config{NumLayers: 28, Heads: 16, KVHeads: 8, HeadDim: 128} // Qwen3-0.6B's attention
	tests := []struct {
		tp   int
		want int64
	}{{1, 28 * 2 * 8 * 128 * 2}, {2, 28 * 2 * 4 * 128 * 2}, {8, 28 * 2 * 1 * 128 * 2}, {16, 28 * 2 * 1 * 128 * 2}}
	for _, tt := range tests {
		got := (qwen3.Arch{}).StateSize(c, model.Shard{Rank: 0, Size: tt.tp}, 2)
		if got != (model.StateSize{TokenBytes: tt.want, KVLayers: 28}) {
			t.Errorf("TP=%d: %+v, want %d B per token and no slot state", tt.tp, got, tt.want)
		}
	}
}
