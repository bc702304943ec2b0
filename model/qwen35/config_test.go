package qwen35_test

import (
	"strings"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/model"
	"cohort/model/qwen35"
)

const nestedConfig = `{
  "architectures": ["Qwen3_5ForConditionalGeneration"],
  "model_type": "qwen3_5",
  "tie_word_embeddings": false,
  "text_config": {
    "model_type": "qwen3_5_text", "hidden_size": 64, "num_hidden_layers": 4,
    "layer_types": ["linear_attention","linear_attention","full_attention","full_attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "intermediate_size": 192,
    "vocab_size": 256, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": true,
    "max_position_embeddings": 4096, "eos_token_id": 255,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
      "mrope_section": [11, 11, 10], "mrope_interleaved": true}
  },
  "vision_config": {"depth": 2}
}`

const flatConfig = `{
  "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
  "hidden_size": 64, "num_hidden_layers": 8, "full_attention_interval": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
  "linear_num_key_heads": 4, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
  "linear_value_head_dim": 32, "intermediate_size": 192, "vocab_size": 256,
  "rope_theta": 500000.0, "partial_rotary_factor": 0.5, "tie_word_embeddings": false,
  "eos_token_id": [1, 2]
}`

func TestParseConfigForms(t *testing.T) {
	tests := []struct {
		name      string
		json      string
		arch      string
		layers    string // F for full, L for linear
		theta     float64
		rotary    int
		maxPos    int
		tied      bool
		eos       []int32
		valueHead int
	}{
		{"nested", nestedConfig, "Qwen3_5ForConditionalGeneration", "LLFF", 1e7, 16, 4096, true, []int32{255}, 4},
		{"flat-legacy-rope", flatConfig, "Qwen3_5ForCausalLM", "LLLFLLLF", 5e5, 32, 262144, false, []int32{1, 2}, 4},
		{"defaults", strings.Replace(flatConfig, `"rope_theta": 500000.0, "partial_rotary_factor": 0.5,`, ``, 1),
			"Qwen3_5ForCausalLM", "LLLFLLLF", 1e7, 16, 262144, false, []int32{1, 2}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := model.ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			p := qwen35.ParamsOf(c)
			var layers strings.Builder
			for _, k := range p.Layers {
				layers.WriteByte("LF"[k])
			}
			if c.Architecture != tt.arch || layers.String() != tt.layers || c.RopeTheta != tt.theta || c.RotaryDim() != tt.rotary ||
				c.MaxPositions != tt.maxPos || c.TieEmbeddings != tt.tied || p.LinearValueHeads != tt.valueHead || p.ConvKernel != 4 {
				t.Errorf("got arch=%s layers=%s theta=%g rotary=%d maxPos=%d tied=%v params=%+v", c.Architecture, layers.String(),
					c.RopeTheta, c.RotaryDim(), c.MaxPositions, c.TieEmbeddings, p)
			}
			if len(c.EOS) != len(tt.eos) || c.EOS[0] != tt.eos[0] {
				t.Errorf("eos = %v, want %v", c.EOS, tt.eos)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := flatConfig
	archtest.ConfigErrors(t, base, [][4]string{
		{"missing linear heads", `"linear_num_key_heads": 4,`, ``, "missing linear_num_key_heads"},
		{"bad layer type", `"full_attention_interval": 4`, `"layer_types": ["x","x","x","x","x","x","x","x"]`, `layer_types[0] = "x"`},
		{"layer_types length", `"full_attention_interval": 4`, `"layer_types": ["full_attention"]`, "layer_types has 1 entries"},
		{"gva", `"linear_num_value_heads": 4`, `"linear_num_value_heads": 6`, "linear_num_value_heads 6"},
		{"zero key heads", `"linear_num_key_heads": 4`, `"linear_num_key_heads": 0`, "linear attention heads"},
		{"activation", `"vocab_size": 256`, `"vocab_size": 256, "hidden_act": "gelu"`, "hidden_act"},
		{"interval", `"full_attention_interval": 4`, `"full_attention_interval": 0`, "full_attention_interval"},
		{"conv kernel", `"vocab_size": 256`, `"vocab_size": 256, "linear_conv_kernel_dim": 0`, "linear_conv_kernel_dim"},
		{"absurd dim", `"linear_key_head_dim": 32`, `"linear_key_head_dim": 2000000000`, "linear_key_head_dim = 2000000000"},
	})
}

func TestLayerKindsDerivedFromInterval(t *testing.T) {
	c, err := model.ParseConfig([]byte(flatConfig))
	if err != nil {
		t.Fatal(err)
	}
	p := qwen35.ParamsOf(c)
	if got := p.CountLayers(qwen35.FullAttention); got != 2 {
		t.Fatalf("full layers = %d, want 2 (layers 3 and 7)", got)
	}
	if p.Layers[3] != qwen35.FullAttention || p.Layers[7] != qwen35.FullAttention || p.Layers[0] != qwen35.LinearAttention {
		t.Fatalf("layers = %v", p.Layers)
	}
}

// qwen4B is the Qwen3.5-4B text config (reference qwen35-model.md §1.3).
func qwen4B() *model.Config {
	p := &qwen35.Params{LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128,
		ConvKernel: 4, Layers: make([]qwen35.LayerKind, 32)}
	for i := range p.Layers {
		if (i+1)%4 == 0 {
			p.Layers[i] = qwen35.FullAttention
		}
	}
	return &model.Config{HiddenSize: 2560, NumLayers: 32, Heads: 16, KVHeads: 4, HeadDim: 256, Params: p}
}

func TestStateSizeMatchesSpec(t *testing.T) {
	c := qwen4B()
	tests := []struct {
		name  string
		shard model.Shard
		want  model.StateSize
	}{
		// Spec: 51,511,296 B (49.125 MiB) per request at TP=1 with bf16 conv
		// state; the backends keep the conv state in float32, 24 layers · 3 ·
		// 8192 · 2 B = 1,179,648 B more. 32 KiB of KV per token at 2 B an
		// element (8 full layers · 2 · 4 heads · 256 · 2 B).
		{"tp1", model.Single, model.StateSize{SlotBytes: 51511296 + 1179648, TokenBytes: 32768, KVLayers: 8}},
		{"tp2", model.Shard{Rank: 0, Size: 2}, model.StateSize{SlotBytes: (51511296 + 1179648) / 2, TokenBytes: 32768 / 2, KVLayers: 8}},
		// TP=8 replicates the 4 KV heads: one per rank.
		{"tp8", model.Shard{Rank: 0, Size: 8}, model.StateSize{SlotBytes: (51511296 + 1179648) / 8, TokenBytes: 32768 / 4, KVLayers: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (qwen35.Arch{}).StateSize(c, tt.shard, 2); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
