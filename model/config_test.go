package model

import (
	"slices"
	"strings"
	"testing"

	"cohort/kernels"
)

// testArch is an architecture with no fields of its own: it lets the
// shared config parsing be tested without a real architecture (those live
// in packages that import this one).
type testArch struct{}

func (testArch) ParseConfig(text []byte, c *Config) error {
	c.Defaults(1e4, 1, 2048)
	return nil
}

func (testArch) StateSize(c *Config, s Shard, elemBytes int) StateSize {
	return StateSize{TokenBytes: int64(c.NumLayers * 2 * c.KVHeads * c.HeadDim * elemBytes), KVLayers: c.NumLayers}
}

func (testArch) Declare(*Config, Shard) ([]WeightDecl, error) { return nil, nil }

func (testArch) Build(*Config, Shard, map[string]kernels.Tensor) (Model, error) { return nil, nil }

func init() { MustRegister("TestForCausalLM", testArch{}) }

const nestedConfig = `{
  "architectures": ["TestForCausalLM"],
  "model_type": "test",
  "tie_word_embeddings": false,
  "text_config": {
    "model_type": "test_text", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 192,
    "vocab_size": 256, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": true,
    "max_position_embeddings": 4096, "eos_token_id": 255,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
      "mrope_section": [11, 11, 10], "mrope_interleaved": true}
  },
  "vision_config": {"depth": 2}
}`

const flatConfig = `{
  "architectures": ["TestForCausalLM"], "model_type": "test",
  "hidden_size": 64, "num_hidden_layers": 8,
  "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 192, "vocab_size": 256,
  "rope_theta": 500000.0, "partial_rotary_factor": 0.5, "tie_word_embeddings": false,
  "eos_token_id": [2, 1]
}`

func TestParseConfigForms(t *testing.T) {
	tests := []struct {
		name      string
		json      string
		layers    int
		headDim   int
		theta     float64
		rotary    int
		maxPos    int
		eps       float32
		tied      bool
		eos       []int32
		modelType string
	}{
		{"nested", nestedConfig, 4, 64, 1e7, 16, 4096, 1e-5, true, []int32{255}, "test_text"},
		{"flat-legacy-rope", flatConfig, 8, 16, 5e5, 8, 2048, 1e-6, false, []int32{1, 2}, "test"},
		{"defaults", strings.Replace(flatConfig, `"rope_theta": 500000.0, "partial_rotary_factor": 0.5,`, ``, 1),
			8, 16, 1e4, 16, 2048, 1e-6, false, []int32{1, 2}, "test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if c.Architecture != "TestForCausalLM" || c.NumLayers != tt.layers || c.HeadDim != tt.headDim || c.RopeTheta != tt.theta ||
				c.RotaryDim() != tt.rotary || c.MaxPositions != tt.maxPos || c.Eps != tt.eps || c.TieEmbeddings != tt.tied || c.ModelType != tt.modelType {
				t.Errorf("got %+v", c)
			}
			if !slices.Equal(c.EOS, tt.eos) {
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
		{"no architectures", `"architectures": ["TestForCausalLM"],`, ``, "architectures"},
		{"unknown architecture", `"TestForCausalLM"`, `"NoSuchForCausalLM"`, `unknown architecture "NoSuchForCausalLM"`},
		{"missing hidden", `"hidden_size": 64,`, ``, "missing hidden_size"},
		{"gqa", `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, "not a multiple of num_key_value_heads 3"},
		{"zero kv heads", `"num_key_value_heads": 2`, `"num_key_value_heads": 0`, "attention heads"},
		{"rope type", `"rope_theta": 500000.0`, `"rope_scaling": {"rope_type": "yarn"}`, `rope_type "yarn"`},
		{"partial", `"partial_rotary_factor": 0.5`, `"partial_rotary_factor": 1.5`, "partial_rotary_factor"},
		{"odd rotary", `"partial_rotary_factor": 0.5`, `"partial_rotary_factor": 0.0625`, "must be even"},
		{"eos type", `"eos_token_id": [2, 1]`, `"eos_token_id": "x"`, "eos_token_id"},
		{"negative eos", `"eos_token_id": [2, 1]`, `"eos_token_id": -1`, "negative"},
		{"not json", `{`, `[`, "config.json"},
		{"absurd layers", `"num_hidden_layers": 8`, `"num_hidden_layers": 2000000000`, "num_hidden_layers 2000000000"},
		{"absurd vocab", `"vocab_size": 256`, `"vocab_size": 2000000000`, "vocab_size = 2000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(edited(t, base, tt.from, tt.to)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(nestedConfig))
	f.Add([]byte(flatConfig))
	f.Add([]byte(`{"architectures":["x"],"text_config":null}`))
	f.Add([]byte(`{"architectures":["TestForCausalLM"],"text_config":7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config that fails Validate: %v", err)
		}
		if c.NumLayers == 0 || c.Heads%c.KVHeads != 0 || c.RotaryDim()%2 != 0 {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
	})
}

// edited is src with its first from replaced by to; the test fails when
// src has no from.
func edited(t *testing.T, src, from, to string) string {
	t.Helper()
	out := strings.Replace(src, from, to, 1)
	if out == src {
		t.Fatalf("test edit %q did not apply", from)
	}
	return out
}
