// Package modelgen writes deterministic random-weight checkpoints laid out
// like the released ones, with a byte-level tokenizer.json. Qwen3.5
// presets have the nested config.json, the model.language_model. prefix
// and BF16 weights with F32 A_log and gated-norm weights; Qwen3 presets the
// flat Qwen3ForCausalLM config, the model. prefix and BF16 weights. The
// weights are scaled so the logits are peaky (std ≈ 3): near-uniform logits
// would hide numerical bugs.
package modelgen

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"cohort/model"
	_ "cohort/model/all" // the architectures whose weights Write declares
	"cohort/model/safetensors"
	"cohort/model/tokenizer"
)

// Families of generated models.
const (
	Qwen35 = "qwen35" // Qwen3.5: Gated DeltaNet + gated attention (the default)
	Qwen3  = "qwen3"  // dense Qwen3: attention only
)

// Preset is the shape of a generated model.
type Preset struct {
	Name                             string
	Family                           string // Qwen35 ("" too) or Qwen3
	Vocab, Hidden, Layers            int
	Heads, KVHeads, HeadDim          int
	LinearKeyHeads, LinearValueHeads int
	LinearKeyDim, LinearValueDim     int
	Intermediate, MaxPositions       int
	Tied                             bool
}

// Merges is the number of byte-level BPE merges in the preset's tokenizer:
// with the 256 byte tokens and the Specials they make exactly Vocab tokens,
// so every id the model can emit decodes to text.
func (p Preset) Merges() int { return p.Vocab - 256 - len(Specials) }

// Presets are the named shapes `cohort make-model --preset` accepts.
var Presets = map[string]Preset{
	// tiny divides by TP = 1, 2 and 4 (KV heads are replicated at 4).
	"tiny": {Name: "tiny", Vocab: 512, Hidden: 64, Layers: 8, Heads: 4, KVHeads: 2, HeadDim: 64,
		LinearKeyHeads: 4, LinearValueHeads: 8, LinearKeyDim: 16, LinearValueDim: 16,
		Intermediate: 192, MaxPositions: 4096, Tied: true},
	"small": {Name: "small", Vocab: 8192, Hidden: 1024, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 256,
		LinearKeyHeads: 16, LinearValueHeads: 16, LinearKeyDim: 128, LinearValueDim: 128,
		Intermediate: 3584, MaxPositions: 32768, Tied: true},
	// 4b-shape has the dimensions of Qwen3.5-4B (about 8.4 GB in bf16).
	"4b-shape": {Name: "4b-shape", Vocab: 248320, Hidden: 2560, Layers: 32, Heads: 16, KVHeads: 4, HeadDim: 256,
		LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128,
		Intermediate: 9216, MaxPositions: 262144, Tied: true},
	// qwen3-tiny is a dense Qwen3 that divides by TP = 1, 2 and 4, with an
	// untied lm_head; the HF fixture testdata/hf-qwen3/qwen3-tiny holds it.
	"qwen3-tiny": {Name: "qwen3-tiny", Family: Qwen3, Vocab: 512, Hidden: 64, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 32,
		Intermediate: 192, MaxPositions: 4096},
}

// PresetNames lists the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Specials are the special tokens of generated tokenizers, in id order after
// the BPE vocabulary.
var Specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// Write generates the preset into dir: config.json, tokenizer.json,
// tokenizer_config.json and model.safetensors. Same preset, same bytes.
func Write(dir string, p Preset) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("modelgen: %w", err)
	}
	tokJSON, tok, err := presetTokenizer(p)
	if err != nil {
		return err
	}
	eos, _ := tok.TokenID("<|endoftext|>")
	imEnd, _ := tok.TokenID("<|im_end|>")
	cfgJSON, err := configJSON(p, []int32{eos, imEnd})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"config.json":           cfgJSON,
		"tokenizer.json":        tokJSON,
		"tokenizer_config.json": tokenizerConfigJSON(),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("modelgen: %w", err)
		}
	}
	cfg, err := model.ParseConfig(cfgJSON)
	if err != nil {
		return err
	}
	return writeWeights(filepath.Join(dir, "model.safetensors"), cfg, p.Family)
}

// presetTokenizer builds p's tokenizer.json and parses it. It has exactly
// p.Vocab tokens: the 256 bytes, p.Merges() merges, then Specials.
func presetTokenizer(p Preset) ([]byte, *tokenizer.Tokenizer, error) {
	if p.Merges() < 0 {
		return nil, nil, fmt.Errorf("modelgen: preset %s: vocabulary %d is smaller than the %d byte and special tokens", p.Name, p.Vocab, 256+len(Specials))
	}
	data, err := tokenizer.Synthetic(p.Merges(), Specials)
	if err != nil {
		return nil, nil, fmt.Errorf("modelgen: %w", err)
	}
	tok, err := tokenizer.Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("modelgen: %w", err)
	}
	if tok.VocabSize() != p.Vocab {
		return nil, nil, fmt.Errorf("modelgen: preset %s: the tokenizer has %d tokens, the model %d", p.Name, tok.VocabSize(), p.Vocab)
	}
	return data, tok, nil
}

// configJSON renders p's config.json.
func configJSON(p Preset, eos []int32) ([]byte, error) {
	switch p.Family {
	case "", Qwen35:
		return qwen35Config(p, eos)
	case Qwen3:
		return qwen3Config(p, eos)
	}
	return nil, fmt.Errorf("modelgen: preset %s: unknown family %q", p.Name, p.Family)
}

// qwen3Config renders the flat Qwen3ForCausalLM config.json (RoPE in
// transformers v5's rope_parameters, θ = 1e6 as the released models).
func qwen3Config(p Preset, eos []int32) ([]byte, error) {
	layerTypes := make([]string, p.Layers)
	for i := range layerTypes {
		layerTypes[i] = "full_attention"
	}
	c := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3",
		"hidden_size": p.Hidden, "num_hidden_layers": p.Layers, "layer_types": layerTypes,
		"num_attention_heads": p.Heads, "num_key_value_heads": p.KVHeads, "head_dim": p.HeadDim,
		"intermediate_size": p.Intermediate, "vocab_size": p.Vocab, "rms_norm_eps": 1e-6, "hidden_act": "silu",
		"attention_bias": false, "attention_dropout": 0.0, "use_sliding_window": false,
		"max_position_embeddings": p.MaxPositions, "tie_word_embeddings": p.Tied,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6},
		"eos_token_id":    eos, "dtype": "bfloat16", "initializer_range": 0.02, "cohort_preset": p.Name,
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("modelgen: %w", err)
	}
	return append(b, '\n'), nil
}

// qwen35Config renders the nested (multimodal container) form of config.json.
func qwen35Config(p Preset, eos []int32) ([]byte, error) {
	layerTypes := make([]string, p.Layers)
	for i := range layerTypes {
		layerTypes[i] = "linear_attention"
		if (i+1)%4 == 0 {
			layerTypes[i] = "full_attention"
		}
	}
	text := map[string]any{
		"model_type": "qwen3_5_text", "hidden_size": p.Hidden, "num_hidden_layers": p.Layers,
		"layer_types": layerTypes, "full_attention_interval": 4,
		"num_attention_heads": p.Heads, "num_key_value_heads": p.KVHeads, "head_dim": p.HeadDim,
		"linear_num_key_heads": p.LinearKeyHeads, "linear_num_value_heads": p.LinearValueHeads,
		"linear_key_head_dim": p.LinearKeyDim, "linear_value_head_dim": p.LinearValueDim,
		"linear_conv_kernel_dim": 4, "intermediate_size": p.Intermediate, "vocab_size": p.Vocab,
		"rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": false, "attn_output_gate": true,
		"max_position_embeddings": p.MaxPositions, "tie_word_embeddings": p.Tied,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7,
			"partial_rotary_factor": 0.25, "mrope_section": []int{11, 11, 10}, "mrope_interleaved": true},
		"eos_token_id": eos[0], "dtype": "bfloat16", "mamba_ssm_dtype": "float32",
	}
	top := map[string]any{
		"architectures": []string{"Qwen3_5ForConditionalGeneration"}, "model_type": "qwen3_5",
		"text_config": text, "tie_word_embeddings": p.Tied, "eos_token_id": eos,
		"cohort_preset": p.Name,
	}
	b, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("modelgen: %w", err)
	}
	return append(b, '\n'), nil
}

// tokenizerConfigJSON is a minimal tokenizer_config.json with ChatTemplate.
func tokenizerConfigJSON() []byte {
	b, _ := json.MarshalIndent(map[string]any{
		"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": ChatTemplate,
	}, "", "  ")
	return append(b, '\n')
}

// tensorPlan is one tensor of the generated file.
type tensorPlan struct {
	name  string
	shape []int
	dtype safetensors.DType
	init  func(r *rand.Rand, i int) float32
}

// writeWeights writes every weight cfg's architecture declares, laid out
// as family's released checkpoints are.
func writeWeights(path string, cfg *model.Config, family string) error {
	arch, err := model.Lookup(cfg.Architecture)
	if err != nil {
		return err
	}
	decls, err := arch.Declare(cfg, model.Single)
	if err != nil {
		return err
	}
	plans := make([]tensorPlan, len(decls))
	for i, d := range decls {
		plans[i] = planTensor(cfg, d, family)
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].name < plans[j].name })
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("modelgen: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<22)
	if err := writeHeader(w, plans); err != nil {
		f.Close()
		return err
	}
	if err := writeData(w, plans); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("modelgen: %w", err)
	}
	return f.Close()
}

// planTensor picks the checkpoint name, dtype and initializer of a weight.
// Qwen3 checkpoints are flat (model.*, not model.language_model.*) and
// their norms are plain (weights near 1, not near 0).
func planTensor(cfg *model.Config, d model.WeightDecl, family string) tensorPlan {
	qwen3 := family == Qwen3
	name := "model.language_model." + d.Name
	if qwen3 {
		name = "model." + d.Name
	}
	if d.Name == "lm_head.weight" {
		name = d.Name
	}
	p := tensorPlan{name: name, shape: d.Shape, dtype: safetensors.BF16}
	normal := func(std float64) func(*rand.Rand, int) float32 {
		return func(r *rand.Rand, _ int) float32 { return float32(r.NormFloat64() * std) }
	}
	fanIn := float64(d.Shape[len(d.Shape)-1])
	switch {
	case strings.HasSuffix(d.Name, "A_log"):
		p.dtype = safetensors.F32
		p.init = func(r *rand.Rand, _ int) float32 { return float32(math.Log(1 + 15*r.Float64())) }
	case strings.HasSuffix(d.Name, "linear_attn.norm.weight"):
		p.dtype = safetensors.F32
		p.init = func(r *rand.Rand, _ int) float32 { return float32(1 + 0.1*r.NormFloat64()) }
	case strings.HasSuffix(d.Name, "dt_bias"):
		p.init = normal(0.5)
	case strings.HasSuffix(d.Name, "conv1d.weight"):
		p.init = normal(0.5)
	case (strings.HasSuffix(d.Name, "norm.weight") || strings.HasSuffix(d.Name, "layernorm.weight")) && qwen3:
		p.init = func(r *rand.Rand, _ int) float32 { return float32(1 + 0.1*r.NormFloat64()) } // plain norms
	case strings.HasSuffix(d.Name, "norm.weight") || strings.HasSuffix(d.Name, "layernorm.weight"):
		p.init = normal(0.1) // zero-centered norms: weight near 0 means scale 1
	case d.Name == "embed_tokens.weight" && cfg.TieEmbeddings, d.Name == "lm_head.weight":
		p.init = normal(3 / math.Sqrt(float64(cfg.HiddenSize))) // logit std ≈ 3
	case d.Name == "embed_tokens.weight":
		p.init = normal(1)
	case strings.HasSuffix(d.Name, "o_proj.weight"), strings.HasSuffix(d.Name, "out_proj.weight"),
		strings.HasSuffix(d.Name, "down_proj.weight"):
		p.init = normal(0.5 / math.Sqrt(fanIn))
	default:
		p.init = normal(1 / math.Sqrt(fanIn))
	}
	return p
}

func writeHeader(w *bufio.Writer, plans []tensorPlan) error {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	off := 0
	for _, p := range plans {
		size := numel(p.shape) * p.dtype.Size()
		header[p.name] = map[string]any{"dtype": p.dtype, "shape": p.shape, "data_offsets": []int{off, off + size}}
		off += size
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("modelgen: %w", err)
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hb)))
	w.Write(n[:])
	_, err = w.Write(hb)
	return err
}

// writeData generates the tensors in parallel (each from its own seed, so the
// result does not depend on scheduling) and writes them in order.
func writeData(w *bufio.Writer, plans []tensorPlan) error {
	workers := runtime.GOMAXPROCS(0)
	results := make([]chan []byte, len(plans))
	for i := range results {
		results[i] = make(chan []byte, 1)
	}
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	go func() {
		for i := range plans {
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i] <- generate(plans[i])
			}(i)
		}
	}()
	for i := range plans {
		data := <-results[i]
		<-sem
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("modelgen: %w", err)
		}
	}
	wg.Wait()
	return nil
}

func generate(p tensorPlan) []byte {
	h := fnv.New64a()
	h.Write([]byte(p.name))
	r := rand.New(rand.NewPCG(h.Sum64(), 0x51f15e))
	n := numel(p.shape)
	out := make([]byte, n*p.dtype.Size())
	for i := 0; i < n; i++ {
		v := p.init(r, i)
		if p.dtype == safetensors.F32 {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		} else {
			binary.LittleEndian.PutUint16(out[2*i:], safetensors.F32ToBF16(v))
		}
	}
	return out
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
