package qwen35

import (
	"fmt"

	"cohort/kernels"
	"cohort/model"
)

// Model is a Qwen3.5 model bound to one rank's weights.
type Model struct {
	model.Decoder
	gdn    kernels.GDNConfig
	layers []layer
}

type layer struct {
	kind      LayerKind
	index     int // index among the layers of the same kind (cache / state layer)
	inputNorm kernels.Tensor
	postNorm  kernels.Tensor
	gate, up  kernels.Tensor
	down      kernels.Tensor
	// full attention
	q, k, v, o   kernels.Tensor
	qNorm, kNorm kernels.Tensor
	// gated deltanet
	qkv, z, b, a   kernels.Tensor
	conv           kernels.Tensor // [convDim, K]
	aLog, dtBias   kernels.Tensor
	gnorm, outProj kernels.Tensor
}

var _ model.Model = (*Model)(nil)

// Build binds the loaded weights of one shard.
func (Arch) Build(c *model.Config, s model.Shard, w map[string]kernels.Tensor) (model.Model, error) {
	if err := CheckShard(c, s); err != nil {
		return nil, err
	}
	m := &Model{gdn: gdnConfig(c, s)}
	get := func(name string) kernels.Tensor {
		t, ok := w[name]
		if !ok {
			panic(fmt.Sprintf("qwen35: weight %s was declared but not loaded", name))
		}
		return t
	}
	m.Decoder = model.NewDecoder(c, s, get)
	counts := map[LayerKind]int{}
	for i, kind := range ParamsOf(c).Layers {
		p := fmt.Sprintf("layers.%d.", i)
		l := layer{kind: kind, index: counts[kind],
			inputNorm: get(p + "input_layernorm.weight"), postNorm: get(p + "post_attention_layernorm.weight"),
			gate: get(p + "mlp.gate_proj.weight"), up: get(p + "mlp.up_proj.weight"), down: get(p + "mlp.down_proj.weight")}
		counts[kind]++
		if kind == FullAttention {
			a := p + "self_attn."
			l.q, l.k, l.v, l.o = get(a+"q_proj.weight"), get(a+"k_proj.weight"), get(a+"v_proj.weight"), get(a+"o_proj.weight")
			l.qNorm, l.kNorm = get(a+"q_norm.weight"), get(a+"k_norm.weight")
		} else {
			g := p + "linear_attn."
			l.qkv, l.z, l.b, l.a = get(g+"in_proj_qkv.weight"), get(g+"in_proj_z.weight"), get(g+"in_proj_b.weight"), get(g+"in_proj_a.weight")
			l.conv, l.aLog, l.dtBias = get(g+"conv1d.weight"), get(g+"A_log"), get(g+"dt_bias")
			l.gnorm, l.outProj = get(g+"norm.weight"), get(g+"out_proj.weight")
		}
		m.layers = append(m.layers, l)
	}
	return m, nil
}

func gdnConfig(c *model.Config, s model.Shard) kernels.GDNConfig {
	p := ParamsOf(c)
	return kernels.GDNConfig{KeyHeads: p.LinearKeyHeads / s.Size, ValueHeads: p.LinearValueHeads / s.Size,
		KeyDim: p.LinearKeyDim, ValueDim: p.LinearValueDim, ConvKernel: p.ConvKernel}
}

// State is one rank's Qwen3.5 request state.
type State struct {
	KV  kernels.KVCache   // paged KV cache of the full-attention layers
	GDN kernels.StatePool // conv + recurrent state of the GDN layers
	// ID is unique in the process (model.NewID) and never reused, unlike
	// an address. Backends key recorded steps on it.
	ID uint64
}

// Reset zeroes a slot's GDN state; KV pages are written before they are
// read, so they need no reset.
func (s *State) Reset(slot int) { s.GDN.Reset(slot) }

var _ model.SnapshotState = (*State)(nil)

var _ model.PaddedState = (*State)(nil)

// Pad is where the state keeps pad rows (nil: nowhere).
func (s *State) Pad() *model.Pad { return model.PadOf(s.KV, s.GDN) }

var _ model.FreeableState = (*State)(nil)

// Free gives back the KV pages and the GDN slots (and their snapshot
// places) on be.
func (s *State) Free(be kernels.Backend) {
	kernels.FreeKVCache(be, s.KV)
	kernels.FreeStatePool(be, s.GDN)
}

// AllocSnapshots makes n snapshot places of a slot's GDN state (0 when the
// backend's state pool keeps none).
func (s *State) AllocSnapshots(n int) int64 {
	if sp, ok := s.GDN.(kernels.SnapshotPool); ok {
		return sp.AllocSnapshots(n)
	}
	return 0
}

// Save copies a slot's GDN state into a snapshot place.
func (s *State) Save(slot, place int) { s.GDN.(kernels.SnapshotPool).Save(slot, place) }

// Restore copies a snapshot place into a slot's GDN state.
func (s *State) Restore(place, slot int) { s.GDN.(kernels.SnapshotPool).Restore(place, slot) }

// NewState allocates this rank's KV pages and GDN state slots.
func (m *Model) NewState(be kernels.Backend, slots, pages, pageSize int) model.State {
	p := ParamsOf(m.Config)
	return &State{
		KV:  be.NewKVCache(p.CountLayers(FullAttention), pages, pageSize, m.Attn.KVHeads, m.Attn.HeadDim),
		GDN: be.NewStatePool(p.CountLayers(LinearAttention), slots, m.gdn),
		ID:  model.NewID(),
	}
}

// Forward runs the decoder over the flat batch and returns the logits of
// outputRows, gathered over the vocab shards.
func (m *Model) Forward(be kernels.Backend, state model.State, tokens []int32, b *kernels.Batch, outputRows []int) (kernels.Tensor, error) {
	st, ok := state.(*State)
	if !ok {
		return nil, fmt.Errorf("qwen35: state %T was not made by a Qwen3.5 model", state)
	}
	in := kernels.StepInputs{Tokens: tokens, Batch: b, Rows: outputRows}
	return model.RunStep(be, "qwen35", m.ID, st.ID, in, st.Pad(), func(in kernels.StepInputs) (kernels.Tensor, error) {
		return m.decoder(be, st, in.Tokens, in.Batch, in.Rows)
	})
}

// decoder is the forward pass proper: the layers' residual blocks (gated
// attention or Gated DeltaNet, then the MLP), each block's output summed
// over the ranks.
func (m *Model) decoder(be kernels.Backend, st *State, tokens []int32, b *kernels.Batch, outputRows []int) (kernels.Tensor, error) {
	x, err := m.Vocab.Embedding(be, m.Shard, tokens)
	if err != nil {
		return nil, err
	}
	residual := x
	h := be.RMSNorm(x, m.layers[0].inputNorm, m.Config.Eps)
	for i := range m.layers {
		kernels.BeginLayer(be, i) // layer i reads only layer i-1's outputs
		l := &m.layers[i]
		var act, proj kernels.Tensor
		if l.kind == FullAttention {
			act, proj = m.attention(be, l, h, st, b), l.o
		} else {
			act, proj = m.deltaNet(be, l, h, st, b), l.outProj
		}
		if residual, h, err = m.addProjected(be, residual, act, proj, l.postNorm, []kernels.Tensor{l.gate, l.up}); err != nil {
			return nil, err
		}
		// The last layer's normed stream is the logits' input (read by
		// more than Linears); every other one only the next layer's
		// projections'.
		next, readers := m.Vocab.Norm, []kernels.Tensor(nil)
		if i+1 < len(m.layers) {
			next, readers = m.layers[i+1].inputNorm, m.layers[i+1].inputs()
		}
		act = kernels.SwiGLULinearFor(be, []kernels.Tensor{l.down}, h, l.gate, l.up)
		if residual, h, err = m.addProjected(be, residual, act, l.down, next, readers); err != nil {
			return nil, err
		}
	}
	kernels.EndLayers(be)
	return m.Vocab.Logits(be, m.Shard, be.SelectRows(h, outputRows))
}

// addProjected ends a residual block: it projects the block's activations
// act with w (the ranks' partial sums all-reduced), adds them to the
// residual stream and returns the new stream and its RMSNorm with norm
// (readers: the weights of the Linears that alone read it, or nil;
// kernels.LinearFeeder).
func (m *Model) addProjected(be kernels.Backend, residual, act, w, norm kernels.Tensor, readers []kernels.Tensor) (sum, normed kernels.Tensor, err error) {
	if m.Shard.Size == 1 { // nothing to all-reduce: one pass where the backend has one
		sum, normed = kernels.LinearAddRMSNormFor(be, readers, act, w, residual, norm, m.Config.Eps)
		return sum, normed, nil
	}
	out := be.Linear(act, w)
	if err := model.AllReduce(be, m.Shard, out); err != nil {
		return nil, nil, err
	}
	sum, normed = kernels.AddRMSNormFor(be, readers, residual, out, norm, m.Config.Eps)
	return sum, normed, nil
}

// inputs returns the weights of the projections that read the layer's
// normed input: its mixer's in-projections.
func (l *layer) inputs() []kernels.Tensor {
	if l.kind == FullAttention {
		return []kernels.Tensor{l.q, l.k, l.v}
	}
	return []kernels.Tensor{l.qkv, l.z, l.b, l.a}
}

// attention is the gated full-attention mixer (spec §2.3), up to its output
// projection (l.o, applied by addProjected).
func (m *Model) attention(be kernels.Backend, l *layer, h kernels.Tensor, st *State, b *kernels.Batch) kernels.Tensor {
	c := m.Attn
	p := kernels.Linears(be, h, l.q, l.k, l.v)
	q, gate, k := kernels.PrepareQK(be, p[0], p[1], l.qNorm, l.kNorm, b.Positions, c, m.Config.Eps)
	v := p[2]
	return be.Attention(q, k, v, gate, st.KV, l.index, b, c)
}

// deltaNet is the Gated DeltaNet mixer (spec §2.4), up to its output
// projection (l.outProj, applied by addProjected).
func (m *Model) deltaNet(be kernels.Backend, l *layer, h kernels.Tensor, st *State, b *kernels.Batch) kernels.Tensor {
	p := kernels.ConvLinears(be, h, l.conv, st.GDN, l.index, b, l.qkv, l.z, l.b, l.a)
	mixed := p[0]
	n := kernels.GatedNorm{Z: p[1], W: l.gnorm, Eps: m.Config.Eps, Readers: []kernels.Tensor{l.outProj}}
	return kernels.GatedDeltaRuleNorm(be, n, mixed, p[2], p[3], l.aLog, l.dtBias, st.GDN, l.index, b, m.gdn)
}
