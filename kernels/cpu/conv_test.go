package cpu

import (
	"fmt"
	"slices"
	"testing"

	"cohort/kernels"
)

var convCfg = kernels.GDNConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 3, ValueDim: 2, ConvKernel: 4} // convDim 10

// naiveConv convolves a whole sequence from a zero state in float64.
func naiveConv(x, w []float32, T, C, K int) []float32 {
	y := make([]float32, T*C)
	for t := range T {
		for c := range C {
			var acc float64
			for j := range K {
				if src := t - (K - 1) + j; src >= 0 {
					acc += float64(w[c*K+j]) * float64(x[src*C+c])
				}
			}
			y[t*C+c] = float32(acc * sigmoid64(acc))
		}
	}
	return y
}

// TestCausalConv1dChunked feeds two sequences in pieces (both in each
// batch, different slots) and checks outputs and states against one
// whole-sequence naive convolution.
func TestCausalConv1dChunked(t *testing.T) {
	C, K := convCfg.ConvDim(), convCfg.ConvKernel
	for _, threads := range []int{1, 3} {
		t.Run(fmt.Sprintf("threads%d", threads), func(t *testing.T) {
			be := New(Options{Threads: threads})
			r := newRand(9)
			pieces := [][]int{{1, 2, 5, 3, 9}, {3, 1, 1, 0, 15}}
			slots := []int{2, 0}
			xs := make([][]float32, 2)
			for s := range xs {
				n := 0
				for _, p := range pieces[s] {
					n += p
				}
				xs[s] = randSlice(r, n*C, 1)
			}
			w := randSlice(r, C*K, 1)
			wt := be.Upload(w, C, K)
			pool := be.NewStatePool(2, 3, convCfg).(*StatePool)
			const layer = 1
			got := [][]float32{nil, nil}
			done := []int{0, 0}
			for step := range pieces[0] {
				lens := []int{pieces[0][step], pieces[1][step]}
				var x []float32
				for s := range 2 {
					x = append(x, xs[s][done[s]*C:(done[s]+lens[s])*C]...)
				}
				b := batchOf(lens, done, slots, nil)
				y := data(be.CausalConv1d(be.Upload(x, lens[0]+lens[1], C), wt, pool, layer, b))
				for s := range 2 {
					seq := b.Seqs[s]
					got[s] = append(got[s], y[seq.Start*C:seq.End()*C]...)
					done[s] += lens[s]
					// State = last K−1 raw inputs, zero-padded in front.
					want := make([]float32, (K-1)*C)
					for i := range K - 1 {
						if src := done[s] - (K - 1) + i; src >= 0 {
							copy(want[i*C:(i+1)*C], xs[s][src*C:(src+1)*C])
						}
					}
					if st := pool.convState(layer, slots[s]); !slices.Equal(st, want) {
						t.Errorf("step %d seq %d: state %v, want %v", step, s, st, want)
					}
				}
			}
			for s := range 2 {
				checkClose(t, fmt.Sprintf("seq %d outputs", s), got[s], naiveConv(xs[s], w, done[s], C, K), 1e-5)
				// One call over the whole sequence gives the same outputs.
				one := be.NewStatePool(1, 1, convCfg)
				y := data(be.CausalConv1d(be.Upload(xs[s], done[s], C), wt, one, 0, batchOf([]int{done[s]}, []int{0}, []int{0}, nil)))
				checkClose(t, fmt.Sprintf("seq %d one call", s), y, got[s], 1e-6)
			}
		})
	}
}
