package qwen3

import (
	"fmt"

	"cohort/kernels"
	"cohort/model"
)

// Model is a Qwen3 model bound to one rank's weights.
type Model struct {
	model.Decoder
	layers []layer
}

type layer struct {
	inputNorm, postNorm kernels.Tensor
	q, k, v, o          kernels.Tensor
	qNorm, kNorm        kernels.Tensor
	gate, up, down      kernels.Tensor
}

var _ model.Model = (*Model)(nil)

// State is one rank's Qwen3 request state: the paged KV cache of every
// layer.
type State struct {
	KV kernels.KVCache
	// ID is unique in the process (model.NewID) and never reused. Backends
	// key recorded steps on it.
	ID uint64
}

// Reset does nothing: a request's KV pages are written before they are
// read, and there is no other state.
func (*State) Reset(int) {}

var _ model.FreeableState = (*State)(nil)

var _ model.PaddedState = (*State)(nil)

// Pad is where the state keeps pad rows (nil: nowhere).
func (s *State) Pad() *model.Pad { return model.PadOf(s.KV, nil) }

// Free gives back the KV pages on be.
func (s *State) Free(be kernels.Backend) { kernels.FreeKVCache(be, s.KV) }

// Build binds the loaded weights of one shard.
func (Arch) Build(c *model.Config, s model.Shard, w map[string]kernels.Tensor) (model.Model, error) {
	if err := CheckShard(c, s); err != nil {
		return nil, err
	}
	m := &Model{}
	var missing []string
	get := func(name string) kernels.Tensor {
		t, ok := w[name]
		if !ok {
			missing = append(missing, name)
		}
		return t
	}
	m.Decoder = model.NewDecoder(c, s, get)
	for i := range c.NumLayers {
		p := fmt.Sprintf("layers.%d.", i)
		a, f := p+"self_attn.", p+"mlp."
		m.layers = append(m.layers, layer{
			inputNorm: get(p + "input_layernorm.weight"), postNorm: get(p + "post_attention_layernorm.weight"),
			q: get(a + "q_proj.weight"), k: get(a + "k_proj.weight"), v: get(a + "v_proj.weight"), o: get(a + "o_proj.weight"),
			qNorm: get(a + "q_norm.weight"), kNorm: get(a + "k_norm.weight"),
			gate: get(f + "gate_proj.weight"), up: get(f + "up_proj.weight"), down: get(f + "down_proj.weight"),
		})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("qwen3: weights declared but not loaded: %v", missing)
	}
	return m, nil
}

// NewState allocates this rank's KV pages. Every request's state is in its
// pages, so slots cost nothing.
func (m *Model) NewState(be kernels.Backend, _, pages, pageSize int) model.State {
	return &State{KV: be.NewKVCache(m.Config.NumLayers, pages, pageSize, m.Attn.KVHeads, m.Attn.HeadDim), ID: model.NewID()}
}

// Forward runs the decoder over the flat batch and returns the logits of
// outputRows, gathered over the vocab shards.
func (m *Model) Forward(be kernels.Backend, state model.State, tokens []int32, b *kernels.Batch, outputRows []int) (kernels.Tensor, error) {
	st, ok := state.(*State)
	if !ok {
		return nil, fmt.Errorf("qwen3: state %T was not made by a Qwen3 model", state)
	}
	in := kernels.StepInputs{Tokens: tokens, Batch: b, Rows: outputRows}
	return model.RunStep(be, "qwen3", m.ID, st.ID, in, st.Pad(), func(in kernels.StepInputs) (kernels.Tensor, error) {
		return m.decoder(be, st, in.Tokens, in.Batch, in.Rows)
	})
}

// decoder is the forward pass proper: pre-norm residual blocks of
// attention and MLP, each block's output summed over the ranks.
func (m *Model) decoder(be kernels.Backend, st *State, tokens []int32, b *kernels.Batch, outputRows []int) (kernels.Tensor, error) {
	eps := m.Config.Eps
	residual, err := m.Vocab.Embedding(be, m.Shard, tokens)
	if err != nil {
		return nil, err
	}
	for i := range m.layers {
		kernels.BeginLayer(be, i) // layer i reads only layer i-1's outputs
		l := &m.layers[i]
		mixed := m.attention(be, l, i, be.PlainRMSNorm(residual, l.inputNorm, eps), st, b)
		if err := model.AllReduce(be, m.Shard, mixed); err != nil {
			return nil, err
		}
		residual = be.Add(residual, mixed)
		mlp := be.Linear(kernels.SwiGLULinear(be, be.PlainRMSNorm(residual, l.postNorm, eps), l.gate, l.up), l.down)
		if err := model.AllReduce(be, m.Shard, mlp); err != nil {
			return nil, err
		}
		residual = be.Add(residual, mlp)
	}
	kernels.EndLayers(be)
	return m.Vocab.Logits(be, m.Shard, be.PlainRMSNorm(be.SelectRows(residual, outputRows), m.Vocab.Norm, eps))
}

// attention is the layer's grouped-query attention: q and k normalized per
// head, rotated by RoPE, attended over the cached positions, no output
// gate. Layer i's KV lives in cache layer i.
func (m *Model) attention(be kernels.Backend, l *layer, i int, h kernels.Tensor, st *State, b *kernels.Batch) kernels.Tensor {
	c := m.Attn
	p := kernels.Linears(be, h, l.q, l.k, l.v)
	q := be.PlainRMSNorm(p[0], l.qNorm, m.Config.Eps)
	k := be.PlainRMSNorm(p[1], l.kNorm, m.Config.Eps)
	be.RoPE(q, b.Positions, c.HeadDim, c.RotaryDim, c.Theta)
	be.RoPE(k, b.Positions, c.HeadDim, c.RotaryDim, c.Theta)
	out := be.UngatedAttention(q, k, p[2], st.KV, i, b, c)
	return be.Linear(out, l.o)
}
