// Package qwen35 is the Qwen3.5 dense text model: Gated DeltaNet layers
// interleaved with gated full-attention layers (3:1 in the released sizes).
// It declares every weight with its tensor-parallel placement and runs the
// forward pass as calls on a kernels.Backend; it never slices weights and
// never calls a communicator itself.
package qwen35

import (
	"fmt"

	"cohort/model"
)

func init() {
	model.MustRegister("Qwen3_5ForCausalLM", Arch{})
	model.MustRegister("Qwen3_5ForConditionalGeneration", Arch{})
}

// Arch is the Qwen3.5 architecture.
type Arch struct{}

var _ model.Architecture = Arch{}

// CheckShard reports whether the tensor-parallel degree fits the model.
func CheckShard(c *model.Config, s model.Shard) error {
	p := ParamsOf(c)
	return model.CheckShard("qwen35", c, s,
		model.ShardDim{Name: "linear_num_key_heads", N: p.LinearKeyHeads},
		model.ShardDim{Name: "linear_num_value_heads", N: p.LinearValueHeads})
}

// Declare lists the checkpoint's tensors with their placements.
func (Arch) Declare(c *model.Config, s model.Shard) ([]model.WeightDecl, error) {
	if err := CheckShard(c, s); err != nil {
		return nil, err
	}
	H, V := c.HiddenSize, c.VocabSize
	decls := []model.WeightDecl{
		{Name: "embed_tokens.weight", Shape: []int{V, H}, Place: model.Split(0, V, 1)},
		{Name: "norm.weight", Shape: []int{H}},
	}
	if !c.TieEmbeddings {
		decls = append(decls, model.WeightDecl{Name: "lm_head.weight", Shape: []int{V, H}, Place: model.Split(0, V, 1)})
	}
	for i, kind := range ParamsOf(c).Layers {
		p := fmt.Sprintf("layers.%d.", i)
		decls = append(decls, mlpDecls(c, p)...)
		if kind == FullAttention {
			decls = append(decls, attentionDecls(c, p+"self_attn.")...)
		} else {
			decls = append(decls, gdnDecls(c, p+"linear_attn.")...)
		}
	}
	return decls, nil
}

func mlpDecls(c *model.Config, p string) []model.WeightDecl {
	H, I := c.HiddenSize, c.Intermediate
	return []model.WeightDecl{
		{Name: p + "input_layernorm.weight", Shape: []int{H}},
		{Name: p + "post_attention_layernorm.weight", Shape: []int{H}},
		{Name: p + "mlp.gate_proj.weight", Shape: []int{I, H}, Place: model.Split(0, I, 1)},
		{Name: p + "mlp.up_proj.weight", Shape: []int{I, H}, Place: model.Split(0, I, 1)},
		{Name: p + "mlp.down_proj.weight", Shape: []int{H, I}, Place: model.Split(1, I, 1)},
	}
}

// attentionDecls: q_proj rows are per-head [query | gate] pairs, so a split
// in whole 2·hd units keeps each pair together. KV heads are replicated when
// there are fewer of them than ranks.
func attentionDecls(c *model.Config, p string) []model.WeightDecl {
	H, hd := c.HiddenSize, c.HeadDim
	q, kv := c.Heads*hd, c.KVHeads*hd
	kvPlace := model.Placement{Split: true, Segments: []model.Segment{{Len: kv, Unit: hd, ReplicateIfFewer: true}}}
	return []model.WeightDecl{
		{Name: p + "q_proj.weight", Shape: []int{2 * q, H}, Place: model.Split(0, 2*q, 2*hd)},
		{Name: p + "k_proj.weight", Shape: []int{kv, H}, Place: kvPlace},
		{Name: p + "v_proj.weight", Shape: []int{kv, H}, Place: kvPlace},
		{Name: p + "o_proj.weight", Shape: []int{H, q}, Place: model.Split(1, q, hd)},
		{Name: p + "q_norm.weight", Shape: []int{hd}},
		{Name: p + "k_norm.weight", Shape: []int{hd}},
	}
}

// gdnDecls: the q, k and v segments of in_proj_qkv and conv1d are split
// separately by head; z, b, a, A_log and dt_bias by value head.
func gdnDecls(c *model.Config, p string) []model.WeightDecl {
	g := ParamsOf(c)
	H, dk, dv := c.HiddenSize, g.LinearKeyDim, g.LinearValueDim
	kd, vd, nv := g.LinearKeyHeads*dk, g.LinearValueHeads*dv, g.LinearValueHeads
	conv := kd + kd + vd
	qkv := model.Placement{Split: true, Segments: []model.Segment{{Len: kd, Unit: dk}, {Len: kd, Unit: dk}, {Len: vd, Unit: dv}}}
	return []model.WeightDecl{
		{Name: p + "in_proj_qkv.weight", Shape: []int{conv, H}, Place: qkv},
		{Name: p + "in_proj_z.weight", Shape: []int{vd, H}, Place: model.Split(0, vd, dv)},
		{Name: p + "in_proj_b.weight", Shape: []int{nv, H}, Place: model.Split(0, nv, 1)},
		{Name: p + "in_proj_a.weight", Shape: []int{nv, H}, Place: model.Split(0, nv, 1)},
		{Name: p + "conv1d.weight", Shape: []int{conv, 1, g.ConvKernel}, Place: qkv},
		{Name: p + "A_log", Shape: []int{nv}, Place: model.Split(0, nv, 1)},
		{Name: p + "dt_bias", Shape: []int{nv}, Place: model.Split(0, nv, 1)},
		{Name: p + "norm.weight", Shape: []int{dv}},
		{Name: p + "out_proj.weight", Shape: []int{H, vd}, Place: model.Split(1, vd, dv)},
	}
}
