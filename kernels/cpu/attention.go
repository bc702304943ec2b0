package cpu

import (
	"fmt"
	"math"

	"cohort/kernels"
)

// KVCache is a paged float32 key/value cache laid out
// [layer][page][pageSize][kvHeads][headDim] for k and for v.
type KVCache struct {
	layers, pages, pageSize, kvHeads, headDim int
	k, v                                      []float32
}

var _ kernels.KVCache = (*KVCache)(nil)

// PageSize returns the number of positions per page.
func (c *KVCache) PageSize() int { return c.pageSize }

// Pages returns the number of pages per layer.
func (c *KVCache) Pages() int { return c.pages }

// shape returns the cache's geometry for the kernels contract's checks.
func (c *KVCache) shape() kernels.CacheShape {
	return kernels.CacheShape{Layers: c.layers, Pages: c.pages, PageSize: c.pageSize, KVHeads: c.kvHeads, HeadDim: c.headDim}
}

// NewKVCache allocates a zeroed paged KV cache.
func (b *Backend) NewKVCache(layers, pages, pageSize, kvHeads, headDim int) kernels.KVCache {
	n := numel([]int{layers, pages, pageSize, kvHeads, headDim})
	return &KVCache{
		layers: layers, pages: pages, pageSize: pageSize, kvHeads: kvHeads, headDim: headDim,
		k: make([]float32, n), v: make([]float32, n),
	}
}

// slot returns the offset of (layer, position pos of a sequence with pages)
// in k and v; the kvHeads·headDim values there are contiguous. Attention
// has checked the pages (kernels.CheckPages).
func (c *KVCache) slot(layer int, pages []int32, pos int) int {
	page := int(pages[pos/c.pageSize])
	return ((layer*c.pages+page)*c.pageSize + pos%c.pageSize) * c.kvHeads * c.headDim
}

// RoPE rotates the first rotaryDim dims of every head of x [T, heads·headDim]
// in place, NeoX rotate-half style: for i < half = rotaryDim/2,
// out[i] = x[i]·c − x[i+half]·s and out[i+half] = x[i+half]·c + x[i]·s, with
// angle float32(pos)·inv_freq[i] in float32.
func (b *Backend) RoPE(x kernels.Tensor, positions []int32, headDim, rotaryDim int, theta float64) {
	xt := asTensor("RoPE", x)
	check("RoPE", kernels.CheckRoPE(xt.shape, len(positions), headDim, rotaryDim))
	T, cols := xt.dims()
	half := rotaryDim / 2
	inv := kernels.RoPEInvFreq(rotaryDim, theta)
	parallelFor(b.threads, T, grainFor(b.threads, T, 8), func(lo, hi int) {
		cos, sin := make([]float32, half), make([]float32, half)
		for r := lo; r < hi; r++ {
			p := float32(positions[r])
			for j := range half {
				ang := p * inv[j]
				cos[j] = float32(math.Cos(float64(ang)))
				sin[j] = float32(math.Sin(float64(ang)))
			}
			row := xt.data[r*cols : (r+1)*cols]
			for h := 0; h < cols; h += headDim {
				v := row[h : h+rotaryDim]
				for i := range half {
					x0, x1 := v[i], v[i+half]
					v[i] = x0*cos[i] - x1*sin[i]
					v[i+half] = x1*cos[i] + x0*sin[i]
				}
			}
		}
	})
}

// Attention stores k and v of every row in the cache at its position, then
// computes causal GQA attention of each row's query over positions [0, p] of
// its sequence, scaled by 1/sqrt(headDim), softmax in float32, and multiplies
// by sigmoid(gate). Output [T, Heads·HeadDim].
func (b *Backend) Attention(q, k, v, gate kernels.Tensor, cache kernels.KVCache, layer int, bt *kernels.Batch, cfg kernels.AttnConfig) kernels.Tensor {
	qt, kt, vt, gt := asTensor("Attention", q), asTensor("Attention", k), asTensor("Attention", v), asTensor("Attention", gate)
	c, ok := cache.(*KVCache)
	if !ok {
		panic(fmt.Sprintf("cpu: Attention: cache %T is not a *cpu.KVCache", cache))
	}
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	T := bt.Rows()
	check("Attention", kernels.CheckAttention(qt.shape, kt.shape, vt.shape, gt.shape, T, cfg, c.shape(), layer))
	check("Attention", kernels.CheckBatch(bt, T, false))
	check("Attention", kernels.CheckPages(bt, c.shape()))

	// 1. Write the new keys and values into their page slots.
	rowSeq := make([]int, T)
	for si, s := range bt.Seqs {
		for r := s.Start; r < s.End(); r++ {
			rowSeq[r] = si
			off := c.slot(layer, s.Pages, int(bt.Positions[r]))
			copy(c.k[off:off+KV*hd], kt.data[r*KV*hd:(r+1)*KV*hd])
			copy(c.v[off:off+KV*hd], vt.data[r*KV*hd:(r+1)*KV*hd])
		}
	}

	// 2. Attend, one (row, head) pair at a time.
	out := newTensor(T, H*hd)
	scale := 1 / float32(math.Sqrt(float64(hd)))
	group := H / KV
	n := T * H
	parallelFor(b.threads, n, grainFor(b.threads, n, 1), func(lo, hi int) {
		var scores []float32
		for task := lo; task < hi; task++ {
			r, h := task/H, task%H
			s := bt.Seqs[rowSeq[r]]
			p := int(bt.Positions[r])
			kvOff := (h / group) * hd
			qh := qt.data[r*H*hd+h*hd : r*H*hd+(h+1)*hd]

			scores = scores[:0]
			maxScore := float32(math.Inf(-1))
			for pos := 0; pos <= p; pos++ {
				off := c.slot(layer, s.Pages, pos) + kvOff
				sc := dot(qh, c.k[off:off+hd]) * scale
				scores = append(scores, sc)
				maxScore = max(maxScore, sc)
			}
			var sum float32
			for j, sc := range scores {
				e := float32(math.Exp(float64(sc - maxScore)))
				scores[j] = e
				sum += e
			}
			o := out.data[r*H*hd+h*hd : r*H*hd+(h+1)*hd]
			for pos, e := range scores {
				off := c.slot(layer, s.Pages, pos) + kvOff
				axpy(e/sum, c.v[off:off+hd], o)
			}
			g := gt.data[r*H*hd+h*hd : r*H*hd+(h+1)*hd]
			for i := range o {
				o[i] *= sigmoid(g[i])
			}
		}
	})
	return out
}
