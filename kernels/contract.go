package kernels

import (
	"fmt"
	"math"
	"slices"
)

// The shape contract of the Backend ops, checked once here for every
// backend. Each check returns nil when the arguments fit the op and otherwise
// an error that shows them; a backend panics with it, prefixed with its name
// and the op's (a shape that does not fit is a bug in the model code, not a
// bad request). Backends add their own limits (a kernel's largest head dim)
// after these.

// Dims returns a shape's rows (the product of every dimension but the last)
// and columns (the last); a scalar is one row of one column, and a shape
// without columns has no rows.
func Dims(shape []int) (rows, cols int) {
	if len(shape) == 0 {
		return 1, 1
	}
	cols = shape[len(shape)-1]
	if cols == 0 {
		return 0, 0
	}
	return numel(shape) / cols, cols
}

// numel returns the number of elements of a shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// CheckSame checks that two element-wise operands have one shape.
func CheckSame(a, b []int) error {
	if !slices.Equal(a, b) {
		return fmt.Errorf("shapes %v and %v differ", a, b)
	}
	return nil
}

// CheckGroups checks that a norm's weight w is not empty and that x's rows
// are made of whole groups of its size.
func CheckGroups(x, w []int) error {
	_, cols := Dims(x)
	g := numel(w)
	if g == 0 || (cols > 0 && cols%g != 0) {
		return fmt.Errorf("x %v is not made of groups of w %v", x, w)
	}
	return nil
}

// CheckLinear checks x [..., in] against a weight w [out, in].
func CheckLinear(x, w []int) error {
	_, in := Dims(x)
	if len(x) == 0 || len(w) != 2 || w[1] != in {
		return fmt.Errorf("x %v and w %v (want w [out, %d])", x, w, in)
	}
	return nil
}

// CheckEmbedding checks that an embedding table is [rows, hidden].
func CheckEmbedding(table []int) error {
	if len(table) != 2 {
		return fmt.Errorf("table %v is not 2-D", table)
	}
	return nil
}

// CheckSplitQueryGate checks that qg's rows hold heads (query, gate) pairs of
// headDim each.
func CheckSplitQueryGate(qg []int, heads, headDim int) error {
	if _, cols := Dims(qg); cols != heads*2*headDim {
		return fmt.Errorf("qg %v for %d heads of %d", qg, heads, headDim)
	}
	return nil
}

// CheckRoPE checks x [T, heads·headDim] against T positions and a rotated
// part of even width within each head.
func CheckRoPE(x []int, positions, headDim, rotaryDim int) error {
	T, cols := Dims(x)
	if positions != T || headDim <= 0 || cols%headDim != 0 || rotaryDim > headDim || rotaryDim%2 != 0 {
		return fmt.Errorf("x %v with %d positions, headDim %d, rotaryDim %d", x, positions, headDim, rotaryDim)
	}
	return nil
}

// CheckRows checks that every row index selects a row of x.
func CheckRows(x []int, rows []int) error {
	n, _ := Dims(x)
	for _, r := range rows {
		if r < 0 || r >= n {
			return fmt.Errorf("row %d out of range for x %v", r, x)
		}
	}
	return nil
}

// CheckBatch checks that the batch's sequences tile rows [0, T) in order,
// that every row has a position and, if distinctSlots, that no two
// sequences share a slot (their states are updated concurrently), pad rows
// excepted, which may share theirs with other pad rows only (nothing reads
// their state).
func CheckBatch(bt *Batch, T int, distinctSlots bool) error {
	next := 0
	owner := make(map[int]bool, len(bt.Seqs)) // slot -> taken by a pad row
	for _, s := range bt.Seqs {
		pad, taken := owner[s.Slot]
		if s.Start != next || s.Len < 0 || (distinctSlots && taken && !(pad && s.Pad)) {
			return fmt.Errorf("sequences %+v do not tile %d rows with distinct slots", bt.Seqs, T)
		}
		owner[s.Slot] = s.Pad
		next = s.End()
	}
	if next != T || len(bt.Positions) != T {
		return fmt.Errorf("sequences cover %d rows, %d positions, tensor has %d rows", next, len(bt.Positions), T)
	}
	return nil
}

// CacheShape is the geometry of a paged KV cache: what the attention checks
// need of a backend's cache.
type CacheShape struct {
	Layers, Pages, PageSize, KVHeads, HeadDim int
}

// CheckAttention checks an attention layer's q and gate [T, heads·headDim],
// k and v [T, kvHeads·headDim] against cfg, the cache and the layer index.
func CheckAttention(q, k, v, gate []int, T int, cfg AttnConfig, c CacheShape, layer int) error {
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	qRows, qCols := Dims(q)
	kRows, kCols := Dims(k)
	if qRows != T || qCols != H*hd || kRows != T || kCols != KV*hd || KV == 0 || H%KV != 0 ||
		!slices.Equal(k, v) || !slices.Equal(q, gate) || c.KVHeads != KV || c.HeadDim != hd ||
		layer < 0 || layer >= c.Layers {
		return fmt.Errorf("q %v k %v v %v gate %v, %d rows, cfg %+v, cache [%d layers, %d kv heads, %d head dim], layer %d",
			q, k, v, gate, T, cfg, c.Layers, c.KVHeads, c.HeadDim, layer)
	}
	return nil
}

// CheckPages checks that every page of the batch's sequences is one of the
// cache's and that every row's position lies within its sequence's pages.
func CheckPages(bt *Batch, c CacheShape) error {
	for _, s := range bt.Seqs {
		for _, p := range s.Pages {
			if p < 0 || int(p) >= c.Pages {
				return fmt.Errorf("page %d out of range [0, %d)", p, c.Pages)
			}
		}
		for r := s.Start; r < s.End(); r++ {
			if p := int(bt.Positions[r]); p < 0 || p >= len(s.Pages)*c.PageSize {
				return fmt.Errorf("position %d of row %d beyond %d pages", p, r, len(s.Pages))
			}
		}
	}
	return nil
}

// CheckStateConfig checks the GDN shape a state pool is made for: a conv
// kernel of at least one tap and value heads in whole groups per key head.
func CheckStateConfig(cfg GDNConfig) error {
	if cfg.ConvKernel < 1 || cfg.KeyHeads <= 0 || cfg.ValueHeads%cfg.KeyHeads != 0 {
		return fmt.Errorf("bad config %+v", cfg)
	}
	return nil
}

// CheckSlot checks a (layer, slot) pair against a state pool's size.
func CheckSlot(layer, slot, layers, slots int) error {
	if layer < 0 || layer >= layers || slot < 0 || slot >= slots {
		return fmt.Errorf("layer %d slot %d out of range [%d layers, %d slots]", layer, slot, layers, slots)
	}
	return nil
}

// CheckConv1d checks x [T, convDim] and the depthwise weight w
// [convDim, K] (or the checkpoint's [convDim, 1, K]) against a state pool's
// GDN shape.
func CheckConv1d(x, w []int, cfg GDNConfig) error {
	_, convDim := Dims(x)
	K := cfg.ConvKernel
	if convDim != cfg.ConvDim() || numel(w) != convDim*K || len(w) == 0 || w[0] != convDim || w[len(w)-1] != K {
		return fmt.Errorf("x %v w %v, state pool convDim %d K %d", x, w, cfg.ConvDim(), K)
	}
	return nil
}

// CheckDeltaRule checks the gated delta rule's mixed [T, convDim], beta and
// a [T, valueHeads], aLog and dtBias [valueHeads] against cfg, which must be
// the state pool's (pool).
func CheckDeltaRule(mixed, beta, a, aLog, dtBias []int, cfg, pool GDNConfig) error {
	nk, nv := cfg.KeyHeads, cfg.ValueHeads
	T, convDim := Dims(mixed)
	bRows, bCols := Dims(beta)
	aRows, aCols := Dims(a)
	if convDim != cfg.ConvDim() || bRows != T || bCols != nv || aRows != T || aCols != nv ||
		numel(aLog) != nv || numel(dtBias) != nv || pool != cfg || nk <= 0 || nv%nk != 0 {
		return fmt.Errorf("mixed %v beta %v a %v aLog %v dtBias %v, cfg %+v, state pool cfg %+v",
			mixed, beta, a, aLog, dtBias, cfg, pool)
	}
	return nil
}

// RoPEInvFreq returns RoPE's inverse frequencies inv_freq[j] =
// 1 / theta^(2j/rotaryDim), computed in float32 as torch does (1.0 /
// (theta ** (arange(0, R, 2).float() / R))), for both backends.
func RoPEInvFreq(rotaryDim int, theta float64) []float32 {
	inv := make([]float32, rotaryDim/2)
	for j := range inv {
		e := float32(2*j) / float32(rotaryDim)
		inv[j] = 1 / float32(math.Pow(theta, float64(e)))
	}
	return inv
}
