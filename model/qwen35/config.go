package qwen35

import (
	"encoding/json"
	"fmt"

	"cohort/model"
)

// LayerKind says which token mixer a decoder layer uses.
type LayerKind uint8

const (
	// LinearAttention is a Gated DeltaNet layer.
	LinearAttention LayerKind = iota
	// FullAttention is a gated, grouped-query softmax attention layer.
	FullAttention
)

func (k LayerKind) String() string {
	if k == FullAttention {
		return "full_attention"
	}
	return "linear_attention"
}

// Params are the Qwen3.5 fields of a config (model.Config.Params).
type Params struct {
	Layers []LayerKind // one per decoder layer

	LinearKeyHeads, LinearValueHeads int
	LinearKeyDim, LinearValueDim     int
	ConvKernel                       int
}

// CountLayers returns how many layers are of kind k.
func (p *Params) CountLayers(k LayerKind) int {
	n := 0
	for _, l := range p.Layers {
		if l == k {
			n++
		}
	}
	return n
}

// ParamsOf returns the Qwen3.5 part of a config that ParseConfig filled.
func ParamsOf(c *model.Config) *Params {
	p, ok := c.Params.(*Params)
	if !ok {
		panic(fmt.Sprintf("qwen35: config of %s has params %T, not *qwen35.Params", c.Architecture, c.Params))
	}
	return p
}

// rawParams mirrors the Qwen3.5 config.json fields. Pointers tell "absent"
// from "zero".
type rawParams struct {
	LayerTypes            []string `json:"layer_types"`
	FullAttentionInterval *int     `json:"full_attention_interval"`
	LinearNumKeyHeads     *int     `json:"linear_num_key_heads"`
	LinearNumValueHeads   *int     `json:"linear_num_value_heads"`
	LinearKeyHeadDim      *int     `json:"linear_key_head_dim"`
	LinearValueHeadDim    *int     `json:"linear_value_head_dim"`
	LinearConvKernelDim   *int     `json:"linear_conv_kernel_dim"`
}

// ParseConfig reads the linear-attention fields and the layer kinds, and
// fills Qwen3.5's defaults (θ = 1e7, partial rotary 0.25, 262,144
// positions).
func (Arch) ParseConfig(text []byte, c *model.Config) error {
	var raw rawParams
	if err := json.Unmarshal(text, &raw); err != nil {
		return err
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (want silu)", c.HiddenAct)
	}
	c.Defaults(1e7, 0.25, 262144)
	p := &Params{}
	var req model.Required
	p.LinearKeyHeads = req.Int("linear_num_key_heads", raw.LinearNumKeyHeads)
	p.LinearValueHeads = req.Int("linear_num_value_heads", raw.LinearNumValueHeads)
	p.LinearKeyDim = req.Int("linear_key_head_dim", raw.LinearKeyHeadDim)
	p.LinearValueDim = req.Int("linear_value_head_dim", raw.LinearValueHeadDim)
	if err := req.Err(); err != nil {
		return err
	}
	p.ConvKernel = 4
	if raw.LinearConvKernelDim != nil {
		p.ConvKernel = *raw.LinearConvKernelDim
	}
	var err error
	if p.Layers, err = layerKinds(&raw, c.NumLayers); err != nil {
		return err
	}
	if err := p.validate(); err != nil {
		return err
	}
	c.Params = p
	return nil
}

func layerKinds(raw *rawParams, n int) ([]LayerKind, error) {
	kinds := make([]LayerKind, n)
	if len(raw.LayerTypes) > 0 {
		if len(raw.LayerTypes) != n {
			return nil, fmt.Errorf("layer_types has %d entries, num_hidden_layers is %d", len(raw.LayerTypes), n)
		}
		for i, t := range raw.LayerTypes {
			switch t {
			case "linear_attention":
				kinds[i] = LinearAttention
			case "full_attention":
				kinds[i] = FullAttention
			default:
				return nil, fmt.Errorf("layer_types[%d] = %q (want linear_attention or full_attention)", i, t)
			}
		}
		return kinds, nil
	}
	interval := 4
	if raw.FullAttentionInterval != nil {
		interval = *raw.FullAttentionInterval
	}
	if interval <= 0 {
		return nil, fmt.Errorf("full_attention_interval %d must be positive", interval)
	}
	for i := range kinds {
		if (i+1)%interval == 0 {
			kinds[i] = FullAttention
		}
	}
	return kinds, nil
}

func (p *Params) validate() error {
	for _, d := range []struct {
		name string
		v    int
	}{
		{"linear_num_key_heads", p.LinearKeyHeads}, {"linear_num_value_heads", p.LinearValueHeads},
		{"linear_key_head_dim", p.LinearKeyDim}, {"linear_value_head_dim", p.LinearValueDim},
		{"linear_conv_kernel_dim", p.ConvKernel},
	} {
		if d.v > model.MaxDim {
			return fmt.Errorf("%s = %d is larger than %d", d.name, d.v, model.MaxDim)
		}
	}
	switch {
	case p.LinearKeyHeads <= 0 || p.LinearValueHeads <= 0 || p.LinearKeyDim <= 0 || p.LinearValueDim <= 0:
		return fmt.Errorf("linear attention heads and dims must be positive")
	case p.LinearValueHeads%p.LinearKeyHeads != 0:
		return fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", p.LinearValueHeads, p.LinearKeyHeads)
	case p.ConvKernel < 1:
		return fmt.Errorf("linear_conv_kernel_dim must be at least 1")
	}
	return nil
}

// StateSize is, per request on one rank, for every GDN layer the conv state
// [(K-1), convDim/tp] and the recurrent state [nv/tp, dk, dv], both float32
// on every backend (the CUDA backend's bf16 recurrent state option is
// counted at 4 bytes too: it over-reserves); per token, K and V of every
// full-attention layer at elemBytes an element (KV heads are replicated
// when there are fewer than ranks).
func (Arch) StateSize(c *model.Config, s model.Shard, elemBytes int) model.StateSize {
	p := ParamsOf(c)
	nv := int64(p.LinearValueHeads / s.Size)
	conv := int64(2*p.LinearKeyHeads*p.LinearKeyDim+p.LinearValueHeads*p.LinearValueDim) / int64(s.Size)
	per := nv*int64(p.LinearKeyDim*p.LinearValueDim)*4 + int64(p.ConvKernel-1)*conv*4
	kv := max(c.KVHeads/s.Size, 1)
	full := p.CountLayers(FullAttention)
	return model.StateSize{
		SlotBytes:  per * int64(p.CountLayers(LinearAttention)),
		TokenBytes: int64(full) * 2 * int64(kv*c.HeadDim*elemBytes),
		KVLayers:   full,
	}
}
