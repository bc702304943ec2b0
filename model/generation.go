package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// GenerationConfig is what a checkpoint's generation_config.json says about
// decoding: more end-of-sequence ids and the sampling defaults its authors
// recommend. A nil pointer means the file does not set that value.
type GenerationConfig struct {
	EOS               []int32 // eos_token_id (an int or a list), sorted, each once
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
}

// hfDefaults are transformers' GenerationConfig defaults. vLLM takes a
// value from generation_config.json only where it differs from these
// (GenerationConfig.to_diff_dict), so a file that restates a default does
// not override vLLM's own (top_k 50 in a file leaves top-k off).
var hfDefaults = struct {
	temperature, topP, repetitionPenalty float64
	topK                                 int
}{1, 1, 1, 50}

// ParseGenerationConfig parses a generation_config.json. Fields Cohort does
// not use (do_sample, pad_token_id, max_new_tokens, ...) are ignored; a
// field it uses with the wrong type is an error.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	var raw struct {
		EOSTokenID        json.RawMessage `json:"eos_token_id"`
		Temperature       *float64        `json:"temperature"`
		TopP              *float64        `json:"top_p"`
		TopK              *int            `json:"top_k"`
		MinP              *float64        `json:"min_p"`
		RepetitionPenalty *float64        `json:"repetition_penalty"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("model: generation_config.json: %w", err)
	}
	eos, err := parseEOS(raw.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("model: generation_config.json: %w", err)
	}
	g := &GenerationConfig{EOS: eos, MinP: raw.MinP}
	if v := raw.Temperature; v != nil && *v != hfDefaults.temperature {
		g.Temperature = v
	}
	if v := raw.TopP; v != nil && *v != hfDefaults.topP {
		g.TopP = v
	}
	if v := raw.TopK; v != nil && *v != hfDefaults.topK {
		g.TopK = v
	}
	if v := raw.RepetitionPenalty; v != nil && *v != hfDefaults.repetitionPenalty {
		g.RepetitionPenalty = v
	}
	return g, nil
}

// ReadGenerationConfig reads DIR/generation_config.json. A missing file
// gives an empty GenerationConfig and no error.
func ReadGenerationConfig(dir string) (*GenerationConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &GenerationConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return ParseGenerationConfig(data)
}

// readEOSToken returns the eos_token of DIR/tokenizer_config.json (a string
// or an object with a content field), or "" when there is none.
func readEOSToken(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	var raw struct {
		EOS json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return "", fmt.Errorf("model: tokenizer_config.json: %w", err)
	}
	if len(raw.EOS) == 0 || string(raw.EOS) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw.EOS, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw.EOS, &obj); err != nil {
		return "", fmt.Errorf("model: tokenizer_config.json: eos_token is neither a string nor an object with content")
	}
	return obj.Content, nil
}

// TokenIDs looks token strings up in a vocabulary (*tokenizer.Tokenizer
// does).
type TokenIDs interface {
	TokenID(token string) (int32, bool)
}

// EOS returns every id that ends generation for this checkpoint, sorted and
// each once: config.json's eos_token_id (top level and text_config),
// generation_config.json's, and the tokenizer's eos_token looked up in tok
// (skipped when tok is nil or lacks it).
func (c *Checkpoint) EOS(tok TokenIDs) []int32 {
	ids := c.Config.EOS
	if c.Generation != nil {
		ids = MergeIDs(ids, c.Generation.EOS)
	}
	if c.EOSToken != "" && tok != nil {
		if id, ok := tok.TokenID(c.EOSToken); ok {
			ids = MergeIDs(ids, []int32{id})
		}
	}
	return ids
}
