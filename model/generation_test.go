package model

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestParseGenerationConfig(t *testing.T) {
	tests := []struct {
		name, json string
		want       GenerationConfig
		err        string
	}{
		{"qwen3.5", `{"do_sample": true, "eos_token_id": [248046, 248044], "pad_token_id": 248044,
			"temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "5.0"}`,
			GenerationConfig{EOS: []int32{248044, 248046}, Temperature: ptr(0.6), TopK: ptr(20), TopP: ptr(0.95)}, ""},
		{"one eos", `{"eos_token_id": 7}`, GenerationConfig{EOS: []int32{7}}, ""},
		{"empty", `{}`, GenerationConfig{}, ""},
		// vLLM keeps only values that differ from transformers' defaults.
		{"hf defaults dropped", `{"temperature": 1.0, "top_p": 1.0, "top_k": 50, "repetition_penalty": 1.0, "min_p": 0}`,
			GenerationConfig{MinP: ptr(0.0)}, ""},
		{"penalties", `{"repetition_penalty": 1.05, "min_p": 0.1}`,
			GenerationConfig{RepetitionPenalty: ptr(1.05), MinP: ptr(0.1)}, ""},
		{"bad eos", `{"eos_token_id": "x"}`, GenerationConfig{}, "eos_token_id"},
		{"negative eos", `{"eos_token_id": [-1]}`, GenerationConfig{}, "negative"},
		{"bad temperature", `{"temperature": "hot"}`, GenerationConfig{}, "generation_config.json"},
		{"not json", `[`, GenerationConfig{}, "generation_config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := ParseGenerationConfig([]byte(tt.json))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*g, tt.want) {
				t.Errorf("got %+v, want %+v", *g, tt.want)
			}
		})
	}
}

// TestConfigEOSBothLevels: the top-level eos_token_id counts too, not only
// text_config's (the multimodal Qwen3.5 layout lists <|im_end|> only at the
// top).
func TestConfigEOSBothLevels(t *testing.T) {
	tests := []struct {
		name, from, to string
		want           []int32
	}{
		{"text only", `"vision_config"`, `"x"`, []int32{255}},
		{"top list", `"vision_config"`, `"eos_token_id": [3, 255, 2], "vision_config"`, []int32{2, 3, 255}},
		{"top int", `"vision_config"`, `"eos_token_id": 9, "vision_config"`, []int32{9, 255}},
		{"text list", `"eos_token_id": 255`, `"eos_token_id": [255, 4, 4]`, []int32{4, 255}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(edited(t, nestedConfig, tt.from, tt.to)))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.EOS, tt.want) {
				t.Errorf("EOS %v, want %v", c.EOS, tt.want)
			}
		})
	}
}

type vocab map[string]int32

func (v vocab) TokenID(s string) (int32, bool) { id, ok := v[s]; return id, ok }

// TestCheckpointEOS: Checkpoint.EOS is the union of config.json,
// generation_config.json and the tokenizer's eos_token.
func TestCheckpointEOS(t *testing.T) {
	tok := vocab{"<|im_end|>": 7, "<|endoftext|>": 5}
	tests := []struct {
		name     string
		config   []int32
		gen      []int32
		eosToken string
		tok      TokenIDs
		want     []int32
	}{
		{"config only", []int32{5}, nil, "", tok, []int32{5}},
		{"generation config", []int32{5}, []int32{7, 5}, "", tok, []int32{5, 7}},
		{"tokenizer eos_token", []int32{5}, nil, "<|im_end|>", tok, []int32{5, 7}},
		{"eos_token unknown to the tokenizer", []int32{5}, nil, "<eos>", tok, []int32{5}},
		{"no tokenizer", []int32{5}, nil, "<|im_end|>", nil, []int32{5}},
		{"all", []int32{9}, []int32{8}, "<|im_end|>", tok, []int32{7, 8, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ck := &Checkpoint{Config: &Config{EOS: tt.config}, Generation: &GenerationConfig{EOS: tt.gen}, EOSToken: tt.eosToken}
			if got := ck.EOS(tt.tok); !slices.Equal(got, tt.want) {
				t.Errorf("EOS %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadGenerationFiles(t *testing.T) {
	dir := t.TempDir()
	if g, err := ReadGenerationConfig(dir); err != nil || g.EOS != nil || g.Temperature != nil {
		t.Fatalf("missing file: %+v, %v", g, err)
	}
	if s, err := readEOSToken(dir); err != nil || s != "" {
		t.Fatalf("missing tokenizer_config.json: %q, %v", s, err)
	}
	for _, tt := range []struct{ json, want, err string }{
		{`{"eos_token": "<|im_end|>"}`, "<|im_end|>", ""},
		{`{"eos_token": {"content": "</s>", "special": true}}`, "</s>", ""},
		{`{"eos_token": null}`, "", ""},
		{`{"eos_token": 5}`, "", "eos_token"},
	} {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(tt.json), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := readEOSToken(dir)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.json, err, tt.err)
			}
			continue
		}
		if err != nil || s != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.json, s, err, tt.want)
		}
	}
}

// FuzzParseGenerationConfig: any input parses or fails cleanly, and what
// parses has sorted, non-negative EOS ids without repeats.
func FuzzParseGenerationConfig(f *testing.F) {
	f.Add(`{"eos_token_id": [248046, 248044], "temperature": 0.6, "top_k": 20, "top_p": 0.95}`)
	f.Add(`{"eos_token_id": 3}`)
	f.Add(`{"eos_token_id": null, "top_k": 50}`)
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGenerationConfig([]byte(s))
		if err != nil {
			return
		}
		for i, id := range g.EOS {
			if id < 0 || (i > 0 && id <= g.EOS[i-1]) {
				t.Fatalf("EOS %v", g.EOS)
			}
		}
	})
}
