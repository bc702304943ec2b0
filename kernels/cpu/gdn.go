package cpu

import (
	"fmt"
	"math"

	"cohort/kernels"
)

// deltaChunk is the chunk size of the chunked gated delta rule (spec §4.2).
const deltaChunk = 64

// StatePool holds the GDN state of one rank: per layer and slot, the conv
// state [K-1, convDim] (raw input rows, oldest first) and the fp32 recurrent
// state [valueHeads, keyDim, valueDim].
type StatePool struct {
	layers, slots int
	cfg           kernels.GDNConfig
	conv          []float32   // [layer][slot][K-1][convDim]
	rec           []float32   // [layer][slot][valueHeads][keyDim][valueDim]
	snaps         [][]float32 // snapshot places (snapshots.go)
}

var _ kernels.StatePool = (*StatePool)(nil)

// NewStatePool allocates zeroed GDN state.
func (b *Backend) NewStatePool(layers, slots int, cfg kernels.GDNConfig) kernels.StatePool {
	check("NewStatePool", kernels.CheckStateConfig(cfg))
	p := &StatePool{layers: layers, slots: slots, cfg: cfg}
	p.conv = make([]float32, layers*slots*p.convSize())
	p.rec = make([]float32, layers*slots*p.recSize())
	return p
}

// Slots returns the number of slots.
func (p *StatePool) Slots() int { return p.slots }

func (p *StatePool) convSize() int { return (p.cfg.ConvKernel - 1) * p.cfg.ConvDim() }
func (p *StatePool) recSize() int {
	return p.cfg.ValueHeads * p.cfg.KeyDim * p.cfg.ValueDim
}

// convState returns the conv state [K-1, convDim] of (layer, slot).
func (p *StatePool) convState(layer, slot int) []float32 {
	p.check(layer, slot)
	n := p.convSize()
	i := (layer*p.slots + slot) * n
	return p.conv[i : i+n]
}

// recState returns the recurrent state [valueHeads, keyDim, valueDim] of
// (layer, slot).
func (p *StatePool) recState(layer, slot int) []float32 {
	p.check(layer, slot)
	n := p.recSize()
	i := (layer*p.slots + slot) * n
	return p.rec[i : i+n]
}

func (p *StatePool) check(layer, slot int) {
	check("StatePool", kernels.CheckSlot(layer, slot, p.layers, p.slots))
}

// Reset zeroes a slot's conv and recurrent state in every layer.
func (p *StatePool) Reset(slot int) {
	for l := range p.layers {
		clear(p.convState(l, slot))
		clear(p.recState(l, slot))
	}
}

// Snapshot returns a copy of all state of a slot: for every layer in order,
// its conv state followed by its recurrent state.
func (p *StatePool) Snapshot(slot int) []float32 {
	out := make([]float32, 0, p.layers*(p.convSize()+p.recSize()))
	for l := range p.layers {
		out = append(out, p.convState(l, slot)...)
		out = append(out, p.recState(l, slot)...)
	}
	return out
}

// SetSlot overwrites a slot's state with the layout Snapshot returns.
func (p *StatePool) SetSlot(slot int, state []float32) {
	if want := p.layers * (p.convSize() + p.recSize()); len(state) != want {
		panic(fmt.Sprintf("cpu: StatePool.SetSlot: %d values, want %d", len(state), want))
	}
	off := 0
	for l := range p.layers {
		p.check(l, slot)
		off += copy(p.convState(l, slot), state[off:])
		off += copy(p.recState(l, slot), state[off:])
	}
}

func asStatePool(op string, s kernels.StatePool) *StatePool {
	p, ok := s.(*StatePool)
	if !ok || p == nil {
		panic(fmt.Sprintf("cpu: %s: state pool %T is not a *cpu.StatePool", op, s))
	}
	return p
}

// CausalConv1d applies the depthwise causal conv (weight [convDim, (1,) K]) and
// SiLU to x [T, convDim]: for row t of a sequence,
// y[t,c] = silu(Σ_j w[c,j]·u[t−(K−1)+j, c]) where u is the sequence's conv
// state (K−1 rows) followed by its new rows. The last K−1 rows of u are then
// saved as the new conv state.
func (b *Backend) CausalConv1d(x, w kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch) kernels.Tensor {
	xt, wt := asTensor("CausalConv1d", x), asTensor("CausalConv1d", w)
	p := asStatePool("CausalConv1d", states)
	T, convDim := xt.dims()
	K := p.cfg.ConvKernel
	// w is [convDim, K] or the checkpoint's [convDim, 1, K]: convDim·K values.
	check("CausalConv1d", kernels.CheckConv1d(xt.shape, wt.shape, p.cfg))
	check("CausalConv1d", kernels.CheckBatch(bt, T, true))
	y := newTensor(T, convDim)
	hist := K - 1

	// input returns row r of sequence s's u, counting new rows from 0 and
	// state rows as −(K−1)..−1.
	input := func(s kernels.Seq, state []float32, r int) []float32 {
		if r < 0 {
			r += hist
			return state[r*convDim : (r+1)*convDim]
		}
		return xt.data[(s.Start+r)*convDim : (s.Start+r+1)*convDim]
	}

	parallelFor(b.threads, T, grainFor(b.threads, T, 4), func(lo, hi int) {
		si := 0
		acc := make([]float32, convDim)
		for row := lo; row < hi; row++ {
			for row >= bt.Seqs[si].End() {
				si++
			}
			s := bt.Seqs[si]
			state := p.convState(layer, s.Slot)
			t := row - s.Start
			clear(acc)
			for j := range K {
				u := input(s, state, t-hist+j)
				for c := range acc {
					acc[c] += wt.data[c*K+j] * u[c]
				}
			}
			out := y.data[row*convDim : (row+1)*convDim]
			for c, a := range acc {
				out[c] = silu(a)
			}
		}
	})

	// Save the last K−1 rows of u (which may still include old state rows).
	tail := make([]float32, hist*convDim)
	for _, s := range bt.Seqs {
		state := p.convState(layer, s.Slot)
		for i := range hist {
			copy(tail[i*convDim:(i+1)*convDim], input(s, state, s.Len-hist+i))
		}
		copy(state, tail)
	}
	return y
}

// GatedDeltaRule runs the gated delta rule on mixed [T, convDim] = [q | k | v]
// with beta and a [T, valueHeads] (raw), continuing each sequence from its
// recurrent state and storing the final state. Sequences of one token use the
// recurrent form, longer ones the chunked form. Output [T, valueHeads·dv].
func (b *Backend) GatedDeltaRule(mixed, beta, a, aLog, dtBias kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch, cfg kernels.GDNConfig) kernels.Tensor {
	const op = "GatedDeltaRule"
	mt, bt2, at := asTensor(op, mixed), asTensor(op, beta), asTensor(op, a)
	alt, dtt := asTensor(op, aLog), asTensor(op, dtBias)
	p := asStatePool(op, states)
	nk, nv, dk, dv := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim
	check(op, kernels.CheckDeltaRule(mt.shape, bt2.shape, at.shape, alt.shape, dtt.shape, cfg, p.cfg))
	T, convDim := mt.dims()
	check(op, kernels.CheckBatch(bt, T, true))

	// Per row: l2-normalized q̂ (scaled by dk^-0.5) and k̂ [T, nk·dk], and the
	// per-v-head decay g and write strength β [T, nv].
	qk := nk * dk
	qh, kh := make([]float32, T*qk), make([]float32, T*qk)
	g, bs := make([]float32, T*nv), make([]float32, T*nv)
	scale := 1 / float32(math.Sqrt(float64(dk)))
	parallelFor(b.threads, T, grainFor(b.threads, T, 4), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := mt.data[r*convDim : (r+1)*convDim]
			for h := range nk {
				l2normalize(qh[r*qk+h*dk:r*qk+(h+1)*dk], row[h*dk:(h+1)*dk], scale)
				l2normalize(kh[r*qk+h*dk:r*qk+(h+1)*dk], row[qk+h*dk:qk+(h+1)*dk], 1)
			}
			for h := range nv {
				bs[r*nv+h] = sigmoid(bt2.data[r*nv+h])
				g[r*nv+h] = -float32(math.Exp(float64(alt.data[h]))) * softplus(at.data[r*nv+h]+dtt.data[h])
			}
		}
	})

	out := newTensor(T, nv*dv)
	vOff := 2 * qk
	ratio := nv / nk
	n := len(bt.Seqs) * nv
	parallelFor(b.threads, n, 1, func(lo, hi int) {
		for task := lo; task < hi; task++ {
			s, h := bt.Seqs[task/nv], task%nv
			if s.Len == 0 {
				continue
			}
			L, kHead := s.Len, h/ratio
			// Gather this head's rows into contiguous [L, ·] buffers.
			q, k := make([]float32, L*dk), make([]float32, L*dk)
			v, o := make([]float32, L*dv), make([]float32, L*dv)
			gh, bh := make([]float32, L), make([]float32, L)
			for t := range L {
				r := s.Start + t
				copy(q[t*dk:(t+1)*dk], qh[r*qk+kHead*dk:r*qk+(kHead+1)*dk])
				copy(k[t*dk:(t+1)*dk], kh[r*qk+kHead*dk:r*qk+(kHead+1)*dk])
				copy(v[t*dv:(t+1)*dv], mt.data[r*convDim+vOff+h*dv:r*convDim+vOff+(h+1)*dv])
				gh[t], bh[t] = g[r*nv+h], bs[r*nv+h]
			}
			S := p.recState(layer, s.Slot)[h*dk*dv : (h+1)*dk*dv]
			if L == 1 {
				DeltaRuleRecurrent(q, k, v, gh, bh, L, dk, dv, S, o)
			} else {
				DeltaRuleChunked(q, k, v, gh, bh, L, dk, dv, deltaChunk, S, o)
			}
			for t := range L {
				r := s.Start + t
				copy(out.data[r*nv*dv+h*dv:r*nv*dv+(h+1)*dv], o[t*dv:(t+1)*dv])
			}
		}
	})
	return out
}

// l2normalize writes x / sqrt(Σx² + 1e-6) · scale to dst.
func l2normalize(dst, x []float32, scale float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / float32(math.Sqrt(float64(float32(ss)+1e-6)))
	for i, v := range x {
		dst[i] = v * inv * scale
	}
}
