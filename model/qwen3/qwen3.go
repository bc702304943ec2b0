// Package qwen3 is the dense Qwen3 text model (Hugging Face
// Qwen3ForCausalLM): every layer is grouped-query softmax attention with
// per-head q/k RMSNorm before RoPE and no output gate, followed by a SwiGLU
// MLP; the RMSNorms apply their weight as it is. It declares every weight
// with its tensor-parallel placement and runs the forward pass as calls on
// a kernels.Backend; it never slices weights and never calls a
// communicator itself. Its per-request state is the KV cache alone.
package qwen3

import (
	"encoding/json"
	"fmt"

	"cohort/model"
)

func init() { model.MustRegister("Qwen3ForCausalLM", Arch{}) }

// Arch is the Qwen3 architecture.
type Arch struct{}

var _ model.Architecture = Arch{}

// rawConfig mirrors the Qwen3 config.json fields that only this
// architecture reads (or refuses).
type rawConfig struct {
	HeadDim          *int     `json:"head_dim"`
	AttentionBias    bool     `json:"attention_bias"`
	UseSlidingWindow bool     `json:"use_sliding_window"`
	LayerTypes       []string `json:"layer_types"`
}

// ParseConfig checks what this implementation supports (no attention
// biases, no sliding window, SiLU) and fills transformers' Qwen3Config
// defaults: head_dim 128, rope_theta 10,000, full rotary, 32,768 positions.
func (Arch) ParseConfig(text []byte, c *model.Config) error {
	var raw rawConfig
	if err := json.Unmarshal(text, &raw); err != nil {
		return err
	}
	switch {
	case c.HiddenAct != "" && c.HiddenAct != "silu":
		return fmt.Errorf("hidden_act %q is not supported (want silu)", c.HiddenAct)
	case raw.AttentionBias:
		return fmt.Errorf("attention_bias true is not supported")
	case raw.UseSlidingWindow:
		return fmt.Errorf("use_sliding_window true is not supported")
	}
	if len(raw.LayerTypes) > 0 && len(raw.LayerTypes) != c.NumLayers {
		return fmt.Errorf("layer_types has %d entries, num_hidden_layers is %d", len(raw.LayerTypes), c.NumLayers)
	}
	for i, t := range raw.LayerTypes {
		if t != "full_attention" {
			return fmt.Errorf("layer_types[%d] = %q (only full_attention is supported)", i, t)
		}
	}
	if raw.HeadDim == nil {
		c.HeadDim = 128
	}
	c.Defaults(10000, 1, 32768)
	c.Params = nil
	return nil
}

// StateSize is K and V of every layer per token (KV heads are replicated
// when there are fewer than ranks); there is no per-request slot state.
func (Arch) StateSize(c *model.Config, s model.Shard, elemBytes int) model.StateSize {
	kv := max(c.KVHeads/s.Size, 1)
	return model.StateSize{TokenBytes: int64(c.NumLayers) * 2 * int64(kv*c.HeadDim*elemBytes), KVLayers: c.NumLayers}
}

// CheckShard reports whether the tensor-parallel degree fits the model.
func CheckShard(c *model.Config, s model.Shard) error {
	return model.CheckShard("qwen3", c, s)
}

// Declare lists the checkpoint's tensors with their placements: q_proj and
// o_proj by query head, k_proj and v_proj by KV head (replicated when there
// are fewer than ranks), the MLP by intermediate column, the embedding and
// lm_head by vocab row; norms are replicated.
func (Arch) Declare(c *model.Config, s model.Shard) ([]model.WeightDecl, error) {
	if err := CheckShard(c, s); err != nil {
		return nil, err
	}
	H, V, I, hd := c.HiddenSize, c.VocabSize, c.Intermediate, c.HeadDim
	q, kv := c.Heads*hd, c.KVHeads*hd
	kvPlace := model.Placement{Split: true, Segments: []model.Segment{{Len: kv, Unit: hd, ReplicateIfFewer: true}}}
	decls := []model.WeightDecl{
		{Name: "embed_tokens.weight", Shape: []int{V, H}, Place: model.Split(0, V, 1)},
		{Name: "norm.weight", Shape: []int{H}},
	}
	if !c.TieEmbeddings {
		decls = append(decls, model.WeightDecl{Name: "lm_head.weight", Shape: []int{V, H}, Place: model.Split(0, V, 1)})
	}
	for i := range c.NumLayers {
		p := fmt.Sprintf("layers.%d.", i)
		decls = append(decls,
			model.WeightDecl{Name: p + "input_layernorm.weight", Shape: []int{H}},
			model.WeightDecl{Name: p + "post_attention_layernorm.weight", Shape: []int{H}},
			model.WeightDecl{Name: p + "self_attn.q_proj.weight", Shape: []int{q, H}, Place: model.Split(0, q, hd)},
			model.WeightDecl{Name: p + "self_attn.k_proj.weight", Shape: []int{kv, H}, Place: kvPlace},
			model.WeightDecl{Name: p + "self_attn.v_proj.weight", Shape: []int{kv, H}, Place: kvPlace},
			model.WeightDecl{Name: p + "self_attn.o_proj.weight", Shape: []int{H, q}, Place: model.Split(1, q, hd)},
			model.WeightDecl{Name: p + "self_attn.q_norm.weight", Shape: []int{hd}},
			model.WeightDecl{Name: p + "self_attn.k_norm.weight", Shape: []int{hd}},
			model.WeightDecl{Name: p + "mlp.gate_proj.weight", Shape: []int{I, H}, Place: model.Split(0, I, 1)},
			model.WeightDecl{Name: p + "mlp.up_proj.weight", Shape: []int{I, H}, Place: model.Split(0, I, 1)},
			model.WeightDecl{Name: p + "mlp.down_proj.weight", Shape: []int{H, I}, Place: model.Split(1, I, 1)},
		)
	}
	return decls, nil
}
