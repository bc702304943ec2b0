package kernels

import (
	"strings"
	"testing"
)

func TestDims(t *testing.T) {
	for _, c := range []struct {
		shape      []int
		rows, cols int
	}{
		{nil, 1, 1},
		{[]int{5}, 1, 5},
		{[]int{2, 3, 4}, 6, 4},
		{[]int{3, 0}, 0, 0},
		{[]int{0, 7}, 0, 7},
	} {
		if r, k := Dims(c.shape); r != c.rows || k != c.cols {
			t.Errorf("Dims(%v) = %d, %d; want %d, %d", c.shape, r, k, c.rows, c.cols)
		}
	}
}

// TestContract runs every check on arguments that fit (no error) and on
// arguments that do not (an error that shows them).
func TestContract(t *testing.T) {
	attn := AttnConfig{Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 4}
	cache := CacheShape{Layers: 2, Pages: 4, PageSize: 2, KVHeads: 2, HeadDim: 8}
	gdn := GDNConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 4, ConvKernel: 4} // convDim 16
	batch := func(pages ...int32) *Batch {
		return &Batch{Positions: []int32{0, 1, 2}, Seqs: []Seq{{Slot: 0, Start: 0, Len: 3, Pages: pages}}}
	}
	twoSeqs := &Batch{Positions: []int32{0, 0}, Seqs: []Seq{{Slot: 1, Start: 0, Len: 1}, {Slot: 1, Start: 1, Len: 1}}}
	for _, c := range []struct {
		name string
		err  error
		want string // "" for no error, else a part of the message
	}{
		{"same", CheckSame([]int{2, 3}, []int{2, 3}), ""},
		{"same/differ", CheckSame([]int{2, 3}, []int{3, 2}), "shapes [2 3] and [3 2] differ"},
		{"groups", CheckGroups([]int{2, 8}, []int{4}), ""},
		{"groups/partial", CheckGroups([]int{2, 6}, []int{4}), "x [2 6] is not made of groups of w [4]"},
		{"groups/empty w", CheckGroups([]int{2, 6}, []int{0}), "groups of w [0]"},
		{"linear", CheckLinear([]int{2, 3, 5}, []int{7, 5}), ""},
		{"linear/in", CheckLinear([]int{2, 3}, []int{2, 4}), "x [2 3] and w [2 4] (want w [out, 3])"},
		{"linear/scalar x", CheckLinear(nil, []int{2, 1}), "want w [out, 1]"},
		{"linear/w 3-D", CheckLinear([]int{2, 3}, []int{1, 2, 3}), "w [1 2 3]"},
		{"embedding", CheckEmbedding([]int{10, 4}), ""},
		{"embedding/1-D", CheckEmbedding([]int{10}), "table [10] is not 2-D"},
		{"split", CheckSplitQueryGate([]int{3, 32}, 2, 8), ""},
		{"split/cols", CheckSplitQueryGate([]int{3, 30}, 2, 8), "qg [3 30] for 2 heads of 8"},
		{"rope", CheckRoPE([]int{3, 16}, 3, 8, 4), ""},
		{"rope/positions", CheckRoPE([]int{3, 16}, 2, 8, 4), "with 2 positions"},
		{"rope/odd rotary", CheckRoPE([]int{3, 16}, 3, 8, 3), "rotaryDim 3"},
		{"rope/rotary > head", CheckRoPE([]int{3, 16}, 3, 8, 10), "rotaryDim 10"},
		{"rope/head dim 0", CheckRoPE([]int{3, 16}, 3, 0, 0), "headDim 0"},
		{"rows", CheckRows([]int{3, 2}, []int{0, 2}), ""},
		{"rows/out of range", CheckRows([]int{3, 2}, []int{0, 3}), "row 3 out of range for x [3 2]"},
		{"rows/negative", CheckRows([]int{3, 2}, []int{-1}), "row -1"},
		{"batch", CheckBatch(batch(), 3, true), ""},
		{"batch/rows", CheckBatch(batch(), 4, false), "sequences cover 3 rows, 3 positions, tensor has 4 rows"},
		{"batch/gap", CheckBatch(&Batch{Positions: []int32{0}, Seqs: []Seq{{Start: 1, Len: 1}}}, 1, false), "do not tile 1 rows"},
		{"batch/shared slot", CheckBatch(twoSeqs, 2, true), "with distinct slots"},
		{"batch/shared slot allowed", CheckBatch(twoSeqs, 2, false), ""},
		{"batch/pads share a slot", CheckBatch(padSeqs(false), 3, true), ""},
		{"batch/a pad in a request's slot", CheckBatch(padSeqs(true), 3, true), "with distinct slots"},
		{"attention", CheckAttention([]int{3, 32}, []int{3, 16}, []int{3, 16}, []int{3, 32}, 3, attn, cache, 1), ""},
		{"attention/layer", CheckAttention([]int{3, 32}, []int{3, 16}, []int{3, 16}, []int{3, 32}, 3, attn, cache, 2), "layer 2"},
		{"attention/v", CheckAttention([]int{3, 32}, []int{3, 16}, []int{3, 8}, []int{3, 32}, 3, attn, cache, 0), "v [3 8]"},
		{"attention/gate", CheckAttention([]int{3, 32}, []int{3, 16}, []int{3, 16}, []int{2, 32}, 3, attn, cache, 0), "gate [2 32]"},
		{"attention/cache heads", CheckAttention([]int{3, 32}, []int{3, 16}, []int{3, 16}, []int{3, 32}, 3, attn,
			CacheShape{Layers: 2, KVHeads: 1, HeadDim: 8}, 0), "1 kv heads"},
		{"pages", CheckPages(batch(0, 3), cache), ""},
		{"pages/page", CheckPages(batch(0, 4), cache), "page 4 out of range [0, 4)"},
		{"pages/position", CheckPages(batch(0), cache), "position 2 of row 2 beyond 1 pages"},
		{"state config", CheckStateConfig(gdn), ""},
		{"state config/kernel", CheckStateConfig(GDNConfig{KeyHeads: 1, ValueHeads: 1}), "bad config"},
		{"state config/groups", CheckStateConfig(GDNConfig{KeyHeads: 2, ValueHeads: 3, ConvKernel: 4}), "ValueHeads:3"},
		{"slot", CheckSlot(1, 2, 2, 3), ""},
		{"slot/range", CheckSlot(2, 0, 2, 3), "layer 2 slot 0 out of range [2 layers, 3 slots]"},
		{"conv", CheckConv1d([]int{3, 16}, []int{16, 1, 4}, gdn), ""},
		{"conv/taps", CheckConv1d([]int{3, 16}, []int{16, 3}, gdn), "x [3 16] w [16 3], state pool convDim 16 K 4"},
		{"conv/scalar w", CheckConv1d([]int{3, 16}, nil, gdn), "w []"},
		{"delta", CheckDeltaRule([]int{3, 16}, []int{3, 2}, []int{3, 2}, []int{2}, []int{2}, gdn, gdn), ""},
		{"delta/beta", CheckDeltaRule([]int{3, 16}, []int{3, 1}, []int{3, 2}, []int{2}, []int{2}, gdn, gdn), "beta [3 1]"},
		{"delta/pool", CheckDeltaRule([]int{3, 16}, []int{3, 2}, []int{3, 2}, []int{2}, []int{2}, gdn, GDNConfig{}), "state pool cfg"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: unexpected error %v", c.name, c.err)
		case c.want != "" && c.err == nil:
			t.Errorf("%s: no error, want one with %q", c.name, c.want)
		case c.want != "" && !strings.Contains(c.err.Error(), c.want):
			t.Errorf("%s: error %q does not contain %q", c.name, c.err, c.want)
		}
	}
}

// padSeqs is a decode batch of one request (slot 0) and two pad rows in
// slot 5, or, with inRequestSlot, the pads in the request's slot.
func padSeqs(inRequestSlot bool) *Batch {
	padSlot := 5
	if inRequestSlot {
		padSlot = 0
	}
	return &Batch{Positions: []int32{4, 0, 0}, Seqs: []Seq{
		{Slot: 0, Start: 0, Len: 1}, {Slot: padSlot, Start: 1, Len: 1, Pad: true}, {Slot: padSlot, Start: 2, Len: 1, Pad: true}}}
}
