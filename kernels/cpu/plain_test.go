package cpu

import (
	"fmt"
	"math"
	"testing"
)

func TestPlainRMSNorm(t *testing.T) {
	be := New(Options{Threads: 2})
	const T, cols, eps = 3, 64, 1e-6
	for _, g := range []int{16, cols} { // per head, whole row
		t.Run(fmt.Sprint(g), func(t *testing.T) {
			r := newRand(uint64(g))
			x, w := randSlice(r, T*cols, 2), randSlice(r, g, 1)
			want := make([]float32, len(x))
			for grp := range len(x) / g {
				var ss float64
				for _, e := range x[grp*g : (grp+1)*g] {
					ss += float64(e) * float64(e)
				}
				inv := 1 / math.Sqrt(ss/float64(g)+eps)
				for j := range g {
					want[grp*g+j] = float32(float64(x[grp*g+j]) * inv * float64(w[j]))
				}
			}
			got := data(be.PlainRMSNorm(be.Upload(x, T, cols), be.Upload(w, g), eps))
			checkClose(t, "PlainRMSNorm", got, want, 1e-6)
		})
	}
}

// TestUngatedAttention: the output is the attention result itself, across
// a prefill and a decode step of two sequences.
func TestUngatedAttention(t *testing.T) {
	be := New(Options{Threads: 2})
	cfg := attnCfg
	cache := be.NewKVCache(1, 4, 4, cfg.KVHeads, cfg.HeadDim)
	hists := []*seqHistory{{}, {}}
	pages := [][]int32{{0, 1}, {3, 2}}
	inf := float32(math.Inf(1))
	for step, lens := range [][]int{{5, 3}, {1, 1}} {
		r := newRand(uint64(40 + step))
		var cached []int
		T := 0
		for i, n := range lens {
			cached = append(cached, len(hists[i].k))
			T += n
		}
		b := batchOf(lens, cached, []int{0, 1}, pages)
		qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
		q, k, v := randSlice(r, T*qw, 1), randSlice(r, T*kw, 1), randSlice(r, T*kw, 1)
		out := data(be.UngatedAttention(be.Upload(q, T, qw), be.Upload(k, T, kw), be.Upload(v, T, kw), cache, 0, b, cfg))
		gate := make([]float32, qw)
		for i := range gate {
			gate[i] = inf
		}
		for i, seq := range b.Seqs {
			for row := seq.Start; row < seq.End(); row++ {
				hists[i].k = append(hists[i].k, k[row*kw:(row+1)*kw])
				hists[i].v = append(hists[i].v, v[row*kw:(row+1)*kw])
			}
			for row := seq.Start; row < seq.End(); row++ {
				want := naiveAttention(q[row*qw:(row+1)*qw], gate, hists[i], int(b.Positions[row]), cfg)
				checkClose(t, fmt.Sprintf("step %d seq %d row %d", step, i, row), out[row*qw:(row+1)*qw], want, 1e-5)
			}
		}
	}
}
