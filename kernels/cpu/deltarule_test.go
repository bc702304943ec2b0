package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"cohort/kernels"
)

// deltaInputs are random per-head inputs: normalized q (scaled) and k,
// decays g ≤ 0 (some strongly negative) and β in (0, 1).
type deltaInputs struct {
	q, k, v, g, beta, S0 []float32
}

func randDeltaInputs(r *rand.Rand, T, dk, dv int) deltaInputs {
	in := deltaInputs{
		q: randSlice(r, T*dk, 1), k: randSlice(r, T*dk, 1), v: randSlice(r, T*dv, 1),
		g: make([]float32, T), beta: make([]float32, T), S0: randSlice(r, dk*dv, 1),
	}
	scale := 1 / float32(math.Sqrt(float64(dk)))
	for t := range T {
		l2normalize(in.q[t*dk:(t+1)*dk], in.q[t*dk:(t+1)*dk], scale)
		l2normalize(in.k[t*dk:(t+1)*dk], in.k[t*dk:(t+1)*dk], 1)
		in.g[t] = -1.5 * r.Float32()
		if r.IntN(10) == 0 {
			in.g[t] = -30 * r.Float32()
		}
		in.beta[t] = r.Float32()
	}
	return in
}

func TestDeltaRuleChunkedMatchesRecurrent(t *testing.T) {
	const dk, dv = 32, 24
	for _, chunk := range []int{64, 16} {
		for _, T := range []int{1, 5, 63, 64, 65, 130, 200} {
			t.Run(fmt.Sprintf("chunk%d/T%d", chunk, T), func(t *testing.T) {
				in := randDeltaInputs(newRand(uint64(T*100+chunk)), T, dk, dv)
				sRec, sChk := slices.Clone(in.S0), slices.Clone(in.S0)
				oRec, oChk := make([]float32, T*dv), make([]float32, T*dv)
				DeltaRuleRecurrent(in.q, in.k, in.v, in.g, in.beta, T, dk, dv, sRec, oRec)
				DeltaRuleChunked(in.q, in.k, in.v, in.g, in.beta, T, dk, dv, chunk, sChk, oChk)
				checkClose(t, "output", oChk, oRec, 1e-5)
				checkClose(t, "state", sChk, sRec, 1e-5)
			})
		}
	}
}

// TestDeltaRuleRecurrentMatchesFloat64 checks the recurrent form against the
// matrix form S_t = (I − β k kᵀ) e^g S + β k vᵀ in float64.
func TestDeltaRuleRecurrentMatchesFloat64(t *testing.T) {
	const T, dk, dv = 20, 8, 6
	in := randDeltaInputs(newRand(7), T, dk, dv)
	S := make([]float64, dk*dv)
	for i, v := range in.S0 {
		S[i] = float64(v)
	}
	want := make([]float64, T*dv)
	for t := range T {
		k, q, v := in.k[t*dk:], in.q[t*dk:], in.v[t*dv:]
		e, b := math.Exp(float64(in.g[t])), float64(in.beta[t])
		next := make([]float64, dk*dv)
		for i := range dk {
			for j := range dv {
				var pred float64 // ((I − β k kᵀ) e^g S)[i][j]
				for m := range dk {
					id := 0.0
					if m == i {
						id = 1
					}
					pred += (id - b*float64(k[i])*float64(k[m])) * e * S[m*dv+j]
				}
				next[i*dv+j] = pred + b*float64(k[i])*float64(v[j])
			}
		}
		S = next
		for j := range dv {
			for i := range dk {
				want[t*dv+j] += S[i*dv+j] * float64(q[i])
			}
		}
	}
	st, out := slices.Clone(in.S0), make([]float32, T*dv)
	DeltaRuleRecurrent(in.q, in.k, in.v, in.g, in.beta, T, dk, dv, st, out)
	if d := relDiff64(out, want); d > 1e-5 {
		t.Errorf("output: relative difference %.3g", d)
	}
	if d := relDiff64(st, S); d > 1e-5 {
		t.Errorf("state: relative difference %.3g", d)
	}
}

// gdnRef is a plain float64 reference of the backend GatedDeltaRule op for
// one sequence: it updates S [nv][dk][dv] and returns out [L, nv·dv].
func gdnRef(mixed, beta, a, aLog, dtBias []float32, rows []int, cfg kernels.GDNConfig, S []float64) []float64 {
	nk, nv, dk, dv := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim
	convDim := cfg.ConvDim()
	out := make([]float64, len(rows)*nv*dv)
	l2 := func(x []float32, scale float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(v) / math.Sqrt(ss+1e-6) * scale
		}
		return y
	}
	for ti, r := range rows {
		row := mixed[r*convDim : (r+1)*convDim]
		for h := range nv {
			kh := h / (nv / nk)
			q := l2(row[kh*dk:(kh+1)*dk], 1/math.Sqrt(float64(dk)))
			k := l2(row[nk*dk+kh*dk:nk*dk+(kh+1)*dk], 1)
			v := row[2*nk*dk+h*dv : 2*nk*dk+(h+1)*dv]
			x := float64(a[r*nv+h] + dtBias[h])
			sp := math.Log1p(math.Exp(x))
			g := -math.Exp(float64(aLog[h])) * sp
			b := sigmoid64(float64(beta[r*nv+h]))
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			for i := range Sh {
				Sh[i] *= math.Exp(g)
			}
			for j := range dv {
				var u float64
				for i := range dk {
					u += Sh[i*dv+j] * k[i]
				}
				d := b * (float64(v[j]) - u)
				for i := range dk {
					Sh[i*dv+j] += k[i] * d
				}
				var o float64
				for i := range dk {
					o += Sh[i*dv+j] * q[i]
				}
				out[ti*nv*dv+h*dv+j] = o
			}
		}
	}
	return out
}

type gdnCase struct {
	cfg                        kernels.GDNConfig
	mixed, beta, a, aLog, dtBi *Tensor
}

func newGDNCase(be *Backend, r *rand.Rand, T int, cfg kernels.GDNConfig) gdnCase {
	nv := cfg.ValueHeads
	return gdnCase{
		cfg:   cfg,
		mixed: be.Upload(randSlice(r, T*cfg.ConvDim(), 1), T, cfg.ConvDim()).(*Tensor),
		beta:  be.Upload(randSlice(r, T*nv, 3), T, nv).(*Tensor),
		a:     be.Upload(randSlice(r, T*nv, 3), T, nv).(*Tensor),
		aLog:  be.Upload(randSlice(r, nv, 1), nv).(*Tensor),
		dtBi:  be.Upload(randSlice(r, nv, 1), nv).(*Tensor),
	}
}

// rows returns a case restricted to the given rows (for splitting a batch).
func (c gdnCase) rows(be *Backend, rows []int) gdnCase {
	sel := func(x *Tensor) *Tensor { return be.SelectRows(x, rows).(*Tensor) }
	return gdnCase{cfg: c.cfg, mixed: sel(c.mixed), beta: sel(c.beta), a: sel(c.a), aLog: c.aLog, dtBi: c.dtBi}
}

func (c gdnCase) run(be *Backend, pool kernels.StatePool, layer int, b *kernels.Batch) []float32 {
	return data(be.GatedDeltaRule(c.mixed, c.beta, c.a, c.aLog, c.dtBi, pool, layer, b, c.cfg))
}

// gva is a GVA 2:1 config (valueHeads = 2·keyHeads) with dk ≠ dv.
var gva = kernels.GDNConfig{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8, ConvKernel: 4}

func TestGatedDeltaRuleOpMatchesReference(t *testing.T) {
	for _, threads := range []int{1, 3} {
		t.Run(fmt.Sprintf("threads%d", threads), func(t *testing.T) {
			be := New(Options{Threads: threads})
			r := newRand(11)
			lens := []int{1, 7, 70, 1}
			slots := []int{3, 0, 2, 1}
			T := 0
			for _, n := range lens {
				T += n
			}
			c := newGDNCase(be, r, T, gva)
			pool := be.NewStatePool(2, 4, gva).(*StatePool)
			const layer = 1
			// Nonzero initial states.
			refS := make([][]float64, 4)
			for slot := range 4 {
				s := pool.recState(layer, slot)
				copy(s, randSlice(r, len(s), 0.5))
				refS[slot] = make([]float64, len(s))
				for i, v := range s {
					refS[slot][i] = float64(v)
				}
			}
			b := batchOf(lens, []int{5, 0, 9, 30}, slots, nil)
			got := c.run(be, pool, layer, b)
			nvdv := gva.ValueHeads * gva.ValueDim
			for _, s := range b.Seqs {
				rows := make([]int, s.Len)
				for i := range rows {
					rows[i] = s.Start + i
				}
				want := gdnRef(c.mixed.data, c.beta.data, c.a.data, c.aLog.data, c.dtBi.data, rows, gva, refS[s.Slot])
				if d := relDiff64(got[s.Start*nvdv:s.End()*nvdv], want); d > 1e-5 {
					t.Errorf("seq slot %d len %d: output relative difference %.3g", s.Slot, s.Len, d)
				}
				if d := relDiff64(pool.recState(layer, s.Slot), refS[s.Slot]); d > 1e-5 {
					t.Errorf("seq slot %d len %d: state relative difference %.3g", s.Slot, s.Len, d)
				}
			}
			if d := pool.recState(0, 0); slices.ContainsFunc(d, func(v float32) bool { return v != 0 }) {
				t.Errorf("layer 0 state was modified")
			}
		})
	}
}

// Prefill T then decode 1 token must equal prefill T+1: same last output and
// same final state, for several T around the chunk size.
func TestGatedDeltaRulePrefillThenDecode(t *testing.T) {
	be := New(Options{})
	for _, T := range []int{1, 4, 63, 64, 100} {
		t.Run(fmt.Sprintf("T%d", T), func(t *testing.T) {
			c := newGDNCase(be, newRand(uint64(T)), T+1, gva)
			all := make([]int, T+1)
			for i := range all {
				all[i] = i
			}
			poolA := be.NewStatePool(1, 1, gva).(*StatePool)
			poolB := be.NewStatePool(1, 1, gva).(*StatePool)

			full := c.run(be, poolA, 0, batchOf([]int{T + 1}, []int{0}, []int{0}, nil))
			c.rows(be, all[:T]).run(be, poolB, 0, batchOf([]int{T}, []int{0}, []int{0}, nil))
			last := c.rows(be, all[T:]).run(be, poolB, 0, batchOf([]int{1}, []int{T}, []int{0}, nil))

			nvdv := gva.ValueHeads * gva.ValueDim
			checkClose(t, "last output", last, full[T*nvdv:], 1e-5)
			checkClose(t, "state", poolB.Snapshot(0), poolA.Snapshot(0), 1e-5)
		})
	}
}
