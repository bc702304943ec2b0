package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Config holds the hyperparameters every decoder-only architecture shares,
// read from config.json in either the nested (multimodal container) or the
// flat form. What only one architecture has (Qwen3.5's linear-attention
// layers, say) its ParseConfig reads into Params.
//
// ParseConfig leaves at zero the fields whose defaults differ between
// architectures (RopeTheta, PartialRotary, MaxPositions) when config.json
// does not give them; the architecture's ParseConfig fills them.
type Config struct {
	Architecture string // architectures[0]
	ModelType    string // the text model_type

	HiddenSize   int
	NumLayers    int // num_hidden_layers
	Intermediate int
	VocabSize    int
	Eps          float32
	MaxPositions int
	HiddenAct    string // "" when absent

	Heads, KVHeads, HeadDim int
	RopeTheta               float64
	PartialRotary           float64 // fraction of each head's dims that RoPE rotates

	// TieEmbeddings is the declared tying; the loader overrides it from
	// whether lm_head.weight exists (see ResolveTying).
	TieEmbeddings bool
	// EOS lists the end-of-sequence ids config.json declares, at the top
	// level and in text_config (sorted, each once). Checkpoint.EOS adds
	// generation_config.json's and the tokenizer's.
	EOS []int32

	// Params is the architecture's own part of the config, set by its
	// ParseConfig (for example *qwen35.Params); nil for none.
	Params any
}

// RotaryDim returns the number of leading head dims that RoPE rotates.
func (c *Config) RotaryDim() int { return int(math.Round(float64(c.HeadDim) * c.PartialRotary)) }

// rawConfig mirrors the shared config.json fields. Pointers tell "absent"
// from "zero".
type rawConfig struct {
	Architectures []string        `json:"architectures"`
	ModelType     string          `json:"model_type"`
	TextConfig    json.RawMessage `json:"text_config"`

	HiddenSize            *int            `json:"hidden_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	IntermediateSize      *int            `json:"intermediate_size"`
	VocabSize             *int            `json:"vocab_size"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RopeTheta             *float64        `json:"rope_theta"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	RopeParameters        *ropeParameters `json:"rope_parameters"`
	RopeScaling           *ropeParameters `json:"rope_scaling"`
	HiddenAct             string          `json:"hidden_act"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
}

type ropeParameters struct {
	RopeType            string   `json:"rope_type"`
	Type                string   `json:"type"`
	RopeTheta           *float64 `json:"rope_theta"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	MropeSection        []int    `json:"mrope_section"`
}

// ReadConfig reads DIR/config.json.
func ReadConfig(dir string) (*Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig parses a Hugging Face config.json. The nested form keeps the
// language-model fields in text_config; the flat form has them at the top.
// It reads the shared fields, then hands the language-model object to the
// registered architecture of architectures[0], which reads its own fields
// and fills its defaults; the result is validated.
func ParseConfig(data []byte) (*Config, error) {
	var top rawConfig
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("model: config.json: %w", err)
	}
	if len(top.Architectures) == 0 || top.Architectures[0] == "" {
		return nil, errors.New("model: config.json: architectures is missing or empty")
	}
	text, textJSON := top, json.RawMessage(data)
	if len(top.TextConfig) > 0 && !bytes.Equal(bytes.TrimSpace(top.TextConfig), []byte("null")) {
		text, textJSON = rawConfig{}, top.TextConfig
		if err := json.Unmarshal(top.TextConfig, &text); err != nil {
			return nil, fmt.Errorf("model: config.json: text_config: %w", err)
		}
	}
	c := &Config{Architecture: top.Architectures[0], ModelType: text.ModelType}
	if err := c.fill(&text, &top); err != nil {
		return nil, fmt.Errorf("model: config.json: %w", err)
	}
	arch, err := Lookup(c.Architecture)
	if err != nil {
		return nil, err
	}
	if err := arch.ParseConfig(textJSON, c); err != nil {
		return nil, fmt.Errorf("model: config.json: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Required reads the integer fields config.json must have: Int returns a
// field's value, or 0 when it is absent, and Err then names the first
// absent one. Architectures use it for their own fields.
type Required struct{ err error }

// Int returns *p, or 0 when p is nil (an absent field named name).
func (r *Required) Int(name string, p *int) int {
	if p == nil {
		if r.err == nil {
			r.err = fmt.Errorf("missing %s", name)
		}
		return 0
	}
	return *p
}

// Err is the first absent field, or nil.
func (r *Required) Err() error { return r.err }

func (c *Config) fill(text, top *rawConfig) error {
	var req Required
	c.HiddenSize = req.Int("hidden_size", text.HiddenSize)
	c.NumLayers = req.Int("num_hidden_layers", text.NumHiddenLayers)
	c.Intermediate = req.Int("intermediate_size", text.IntermediateSize)
	c.VocabSize = req.Int("vocab_size", text.VocabSize)
	c.Heads = req.Int("num_attention_heads", text.NumAttentionHeads)
	c.KVHeads = req.Int("num_key_value_heads", text.NumKeyValueHeads)
	if err := req.Err(); err != nil {
		return err
	}
	if c.NumLayers < 1 || c.NumLayers > maxLayers {
		return fmt.Errorf("num_hidden_layers %d must be in [1, %d]", c.NumLayers, maxLayers)
	}
	c.HeadDim = orInt(text.HeadDim, 0)
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.HiddenSize / c.Heads
	}
	c.MaxPositions = orInt(text.MaxPositionEmbeddings, 0)
	c.Eps = float32(orFloat(text.RMSNormEps, 1e-6))
	c.HiddenAct = text.HiddenAct
	if err := c.fillRope(text); err != nil {
		return err
	}
	switch {
	case text.TieWordEmbeddings != nil:
		c.TieEmbeddings = *text.TieWordEmbeddings
	case top.TieWordEmbeddings != nil:
		c.TieEmbeddings = *top.TieWordEmbeddings
	}
	// Both levels count: multimodal checkpoints often list the chat end
	// token only at the top (text_config has <|endoftext|> alone).
	inner, err := parseEOS(text.EOSTokenID)
	if err != nil {
		return err
	}
	outer, err := parseEOS(top.EOSTokenID) // the same field again for a flat config
	if err != nil {
		return err
	}
	c.EOS = MergeIDs(inner, outer)
	return nil
}

// fillRope reads rope_parameters (transformers v5) or the legacy
// rope_theta / partial_rotary_factor / rope_scaling fields. Only plain RoPE
// (rope_type default, or mrope, which is plain RoPE for text) is supported.
func (c *Config) fillRope(text *rawConfig) error {
	theta := text.RopeTheta
	partial := text.PartialRotaryFactor
	for _, p := range []*ropeParameters{text.RopeParameters, text.RopeScaling} {
		if p == nil {
			continue
		}
		kind := p.RopeType
		if kind == "" {
			kind = p.Type
		}
		if kind != "" && kind != "default" && kind != "mrope" {
			return fmt.Errorf("rope_type %q is not supported", kind)
		}
		if p.RopeTheta != nil {
			theta = p.RopeTheta
		}
		if p.PartialRotaryFactor != nil {
			partial = p.PartialRotaryFactor
		}
	}
	c.RopeTheta = orFloat(theta, 0)
	c.PartialRotary = orFloat(partial, 0)
	return nil
}

// Defaults fills the fields config.json left at zero with an
// architecture's defaults; an architecture's ParseConfig calls it.
func (c *Config) Defaults(ropeTheta, partialRotary float64, maxPositions int) {
	if c.RopeTheta == 0 {
		c.RopeTheta = ropeTheta
	}
	if c.PartialRotary == 0 {
		c.PartialRotary = partialRotary
	}
	if c.MaxPositions == 0 {
		c.MaxPositions = maxPositions
	}
}

// MergeIDs returns the sorted union of id lists, each id once.
func MergeIDs(lists ...[]int32) []int32 {
	var out []int32
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// parseEOS reads an eos_token_id: absent, null, an int or a list of ints.
func parseEOS(raw json.RawMessage) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(raw, &one); err == nil {
		if one < 0 {
			return nil, fmt.Errorf("eos_token_id: %d is negative", one)
		}
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("eos_token_id: want an int or a list of ints: %w", err)
	}
	for _, id := range many {
		if id < 0 {
			return nil, fmt.Errorf("eos_token_id: %d is negative", id)
		}
	}
	return MergeIDs(many), nil
}

// Bounds far above any real checkpoint; they keep a hostile config.json
// from asking for absurd allocations. MaxDim is exported for the
// architectures' own fields.
const (
	maxLayers = 4096
	MaxDim    = 1 << 24
)

// Validate checks the shared shape constraints the forward passes rely on.
func (c *Config) Validate() error {
	for _, d := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.Intermediate}, {"vocab_size", c.VocabSize},
		{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim},
		{"max_position_embeddings", c.MaxPositions},
	} {
		if d.v > MaxDim {
			return fmt.Errorf("model: config: %s = %d is larger than %d", d.name, d.v, MaxDim)
		}
	}
	checks := []struct {
		ok   bool
		what string
	}{
		{c.HiddenSize > 0, "hidden_size must be positive"},
		{c.NumLayers > 0, "num_hidden_layers must be positive"},
		{c.Intermediate > 0, "intermediate_size must be positive"},
		{c.VocabSize > 0, "vocab_size must be positive"},
		{c.Heads > 0 && c.KVHeads > 0 && c.HeadDim > 0, "attention heads and head_dim must be positive"},
		{c.KVHeads > 0 && c.KVHeads <= c.Heads && c.Heads%c.KVHeads == 0, fmt.Sprintf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)},
		{c.PartialRotary > 0 && c.PartialRotary <= 1, fmt.Sprintf("partial_rotary_factor %g must be in (0, 1]", c.PartialRotary)},
		{c.RotaryDim()%2 == 0, fmt.Sprintf("rotary dim %d (head_dim × partial_rotary_factor) must be even", c.RotaryDim())},
		{c.RopeTheta > 0, "rope_theta must be positive"},
		{c.Eps > 0, "rms_norm_eps must be positive"},
		{c.MaxPositions > 0, "max_position_embeddings must be positive"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return fmt.Errorf("model: config: %s", ch.what)
		}
	}
	return nil
}

func orInt(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func orFloat(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}
