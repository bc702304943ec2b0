package model

import (
	"strings"
	"testing"
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
		tied      bool
		eos       []int32
		valueHead int
	}{
		{"nested", nestedConfig, "Qwen3_5ForConditionalGeneration", "LLFF", 1e7, 16, true, []int32{255}, 4},
		{"flat-legacy-rope", flatConfig, "Qwen3_5ForCausalLM", "LLLFLLLF", 5e5, 32, false, []int32{1, 2}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			var layers strings.Builder
			for _, k := range c.Layers {
				layers.WriteByte("LF"[k])
			}
			if c.Architecture != tt.arch || layers.String() != tt.layers || c.RopeTheta != tt.theta ||
				c.RotaryDim() != tt.rotary || c.TieEmbeddings != tt.tied || c.LinearValueHeads != tt.valueHead {
				t.Errorf("got arch=%s layers=%s theta=%g rotary=%d tied=%v nv=%d", c.Architecture, layers.String(),
					c.RopeTheta, c.RotaryDim(), c.TieEmbeddings, c.LinearValueHeads)
			}
			if len(c.EOS) != len(tt.eos) || c.EOS[0] != tt.eos[0] {
				t.Errorf("eos = %v, want %v", c.EOS, tt.eos)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := flatConfig
	tests := []struct {
		name, from, to, want string
	}{
		{"no architectures", `"architectures": ["Qwen3_5ForCausalLM"],`, ``, "architectures"},
		{"missing hidden", `"hidden_size": 64,`, ``, "missing hidden_size"},
		{"bad layer type", `"full_attention_interval": 4`, `"layer_types": ["x","x","x","x","x","x","x","x"]`, `layer_types[0] = "x"`},
		{"layer_types length", `"full_attention_interval": 4`, `"layer_types": ["full_attention"]`, "layer_types has 1 entries"},
		{"gqa", `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, "not a multiple of num_key_value_heads 3"},
		{"zero kv heads", `"num_key_value_heads": 2`, `"num_key_value_heads": 0`, "attention heads"},
		{"gva", `"linear_num_value_heads": 4`, `"linear_num_value_heads": 6`, "linear_num_value_heads 6"},
		{"zero key heads", `"linear_num_key_heads": 4`, `"linear_num_key_heads": 0`, "linear attention heads"},
		{"rope type", `"rope_theta": 500000.0`, `"rope_scaling": {"rope_type": "yarn"}`, `rope_type "yarn"`},
		{"partial", `"partial_rotary_factor": 0.5`, `"partial_rotary_factor": 1.5`, "partial_rotary_factor"},
		{"odd rotary", `"partial_rotary_factor": 0.5`, `"partial_rotary_factor": 0.015625`, "must be even"},
		{"activation", `"vocab_size": 256`, `"vocab_size": 256, "hidden_act": "gelu"`, "hidden_act"},
		{"eos type", `"eos_token_id": [1, 2]`, `"eos_token_id": "x"`, "eos_token_id"},
		{"not json", `{`, `[`, "config.json"},
		{"interval", `"full_attention_interval": 4`, `"full_attention_interval": 0`, "full_attention_interval"},
		{"absurd layers", `"num_hidden_layers": 8`, `"num_hidden_layers": 2000000000`, "num_hidden_layers 2000000000"},
		{"absurd vocab", `"vocab_size": 256`, `"vocab_size": 2000000000`, "vocab_size = 2000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(base, tt.from, tt.to, 1)
			if src == base {
				t.Fatalf("test edit %q did not apply", tt.from)
			}
			_, err := ParseConfig([]byte(src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestLayerKindsDerivedFromInterval(t *testing.T) {
	c, err := ParseConfig([]byte(flatConfig))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CountLayers(FullAttention); got != 2 {
		t.Fatalf("full layers = %d, want 2 (layers 3 and 7)", got)
	}
	if c.Layers[3] != FullAttention || c.Layers[7] != FullAttention || c.Layers[0] != LinearAttention {
		t.Fatalf("layers = %v", c.Layers)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(nestedConfig))
	f.Add([]byte(flatConfig))
	f.Add([]byte(`{"architectures":["x"],"text_config":null}`))
	f.Add([]byte(`{"architectures":["x"],"text_config":7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config that fails Validate: %v", err)
		}
		if len(c.Layers) == 0 || c.Heads%c.KVHeads != 0 || c.RotaryDim()%2 != 0 {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
	})
}
