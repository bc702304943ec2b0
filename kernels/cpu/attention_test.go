package cpu

import (
	"fmt"
	"math"
	"testing"

	"cohort/kernels"
)

// seqHistory is a test-side record of every key and value row of a sequence,
// indexed by position.
type seqHistory struct{ k, v [][]float32 }

// naiveAttention computes one row's gated attention output densely in
// float64 over positions [0, p] of hist.
func naiveAttention(q, gate []float32, hist *seqHistory, p int, cfg kernels.AttnConfig) []float32 {
	hd := cfg.HeadDim
	out := make([]float32, cfg.Heads*hd)
	for h := range cfg.Heads {
		kvh := h / (cfg.Heads / cfg.KVHeads)
		scores := make([]float64, p+1)
		maxS := math.Inf(-1)
		for j := 0; j <= p; j++ {
			var s float64
			for d := range hd {
				s += float64(q[h*hd+d]) * float64(hist.k[j][kvh*hd+d])
			}
			scores[j] = s / math.Sqrt(float64(hd))
			maxS = max(maxS, scores[j])
		}
		var sum float64
		for j := range scores {
			scores[j] = math.Exp(scores[j] - maxS)
			sum += scores[j]
		}
		for d := range hd {
			var o float64
			for j := range scores {
				o += scores[j] / sum * float64(hist.v[j][kvh*hd+d])
			}
			out[h*hd+d] = float32(o * sigmoid64(float64(gate[h*hd+d])))
		}
	}
	return out
}

var attnCfg = kernels.AttnConfig{Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 4, Theta: 1e4}

// attnStep runs one Attention call for sequences (identified by index into
// hists/pages) with the given new lengths, checking every output row against
// the naive implementation.
func attnStep(t *testing.T, be *Backend, cache kernels.KVCache, layer int, hists []*seqHistory, pages [][]int32, seqs, lens []int, seed uint64) []float32 {
	t.Helper()
	cfg := attnCfg
	r := newRand(seed)
	var cached, slots []int
	var pg [][]int32
	T := 0
	for i, s := range seqs {
		cached = append(cached, len(hists[s].k))
		slots = append(slots, s)
		pg = append(pg, pages[s])
		T += lens[i]
	}
	b := batchOf(lens, cached, slots, pg)
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	q, g := randSlice(r, T*qw, 1), randSlice(r, T*qw, 2)
	k, v := randSlice(r, T*kw, 1), randSlice(r, T*kw, 1)
	out := data(be.Attention(be.Upload(q, T, qw), be.Upload(k, T, kw), be.Upload(v, T, kw), be.Upload(g, T, qw), cache, layer, b, cfg))
	for i, s := range seqs {
		seq := b.Seqs[i]
		for row := seq.Start; row < seq.End(); row++ {
			hists[s].k = append(hists[s].k, k[row*kw:(row+1)*kw])
			hists[s].v = append(hists[s].v, v[row*kw:(row+1)*kw])
		}
		for row := seq.Start; row < seq.End(); row++ {
			want := naiveAttention(q[row*qw:(row+1)*qw], g[row*qw:(row+1)*qw], hists[s], int(b.Positions[row]), cfg)
			checkClose(t, fmt.Sprintf("seq %d row %d", s, row), out[row*qw:(row+1)*qw], want, 1e-5)
		}
	}
	return out
}

func TestAttentionMixedBatches(t *testing.T) {
	for _, threads := range []int{1, 4} {
		t.Run(fmt.Sprintf("threads%d", threads), func(t *testing.T) {
			be := New(Options{Threads: threads})
			cache := be.NewKVCache(2, 24, 4, attnCfg.KVHeads, attnCfg.HeadDim)
			// Non-contiguous, interleaved page ids per sequence.
			pages := [][]int32{
				{7, 2, 9, 0, 13, 21},
				{1, 15, 3, 22, 4, 5},
				{20, 6, 11, 8, 10, 12},
			}
			hists := []*seqHistory{{}, {}, {}}
			const layer = 1
			attnStep(t, be, cache, layer, hists, pages, []int{0, 1, 2}, []int{6, 1, 10}, 1) // prefills
			attnStep(t, be, cache, layer, hists, pages, []int{0, 1, 2}, []int{1, 5, 1}, 2)  // decode, chunk, decode
			attnStep(t, be, cache, layer, hists, pages, []int{2, 0}, []int{7, 1}, 3)        // reordered seqs
			attnStep(t, be, cache, layer, hists, pages, []int{1}, []int{1}, 4)
			// Layer 0 of the cache is untouched.
			c := cache.(*KVCache)
			n := len(c.k) / c.layers
			for i, x := range c.k[:n] {
				if x != 0 || c.v[i] != 0 {
					t.Fatalf("layer 0 of the cache was written")
				}
			}
		})
	}
}

func TestAttentionPrefillThenDecodeEqualsPrefill(t *testing.T) {
	be := New(Options{})
	cfg := attnCfg
	const T = 9
	r := newRand(5)
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	q, g := randSlice(r, (T+1)*qw, 1), randSlice(r, (T+1)*qw, 1)
	k, v := randSlice(r, (T+1)*kw, 1), randSlice(r, (T+1)*kw, 1)
	pages := [][]int32{{3, 0, 2}}
	run := func(cache kernels.KVCache, lo, hi int) []float32 {
		n := hi - lo
		b := batchOf([]int{n}, []int{lo}, []int{0}, pages)
		return data(be.Attention(be.Upload(q[lo*qw:hi*qw], n, qw), be.Upload(k[lo*kw:hi*kw], n, kw),
			be.Upload(v[lo*kw:hi*kw], n, kw), be.Upload(g[lo*qw:hi*qw], n, qw), cache, 0, b, cfg))
	}
	one := run(be.NewKVCache(1, 4, 4, cfg.KVHeads, cfg.HeadDim), 0, T+1)
	split := be.NewKVCache(1, 4, 4, cfg.KVHeads, cfg.HeadDim)
	first := run(split, 0, T)
	last := run(split, T, T+1)
	checkClose(t, "prefill rows", first, one[:T*qw], 1e-6)
	checkClose(t, "decoded row", last, one[T*qw:], 1e-6)
}
