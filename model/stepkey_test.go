package model

import (
	"testing"

	"cohort/kernels"
)

func TestDecodeStepKey(t *testing.T) {
	decode := func(n int) *kernels.Batch {
		b := &kernels.Batch{Positions: make([]int32, n)}
		for i := range n {
			b.Seqs = append(b.Seqs, kernels.Seq{Slot: i, Start: i, Len: 1, Cached: 5 + i})
		}
		return b
	}
	rows := func(r ...int) []int { return r }
	mixed := &kernels.Batch{Positions: make([]int32, 3), Seqs: []kernels.Seq{{Start: 0, Len: 2}, {Start: 2, Len: 1}}}
	for _, tc := range []struct {
		name         string
		b            *kernels.Batch
		out          []int
		model, state uint64
		want         string
	}{
		{"decode of one", decode(1), rows(0), 3, 4, "arch/decode/1/model-3/state-4"},
		{"decode of three", decode(3), rows(0, 1, 2), 3, 4, "arch/decode/3/model-3/state-4"},
		{"prefill chunk in the batch", mixed, rows(1, 2), 3, 4, ""},
		{"not every row sampled", decode(3), rows(0, 2), 3, 4, ""},
		{"rows out of order", decode(2), rows(1, 0), 3, 4, ""},
		{"no rows", decode(0), rows(), 3, 4, ""},
		{"state without identity", decode(1), rows(0), 3, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecodeStepKey("arch", tc.b, tc.out, tc.model, tc.state); got != tc.want {
				t.Errorf("DecodeStepKey = %q, want %q", got, tc.want)
			}
		})
	}
}
