package qwen35

import (
	"testing"

	"cohort/kernels"
)

func TestGraphKey(t *testing.T) {
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
		name string
		b    *kernels.Batch
		out  []int
		want string
	}{
		{"decode of one", decode(1), rows(0), "qwen35/decode/1"},
		{"decode of three", decode(3), rows(0, 1, 2), "qwen35/decode/3"},
		{"prefill chunk in the batch", mixed, rows(1, 2), ""},
		{"not every row sampled", decode(3), rows(0, 2), ""},
		{"rows out of order", decode(2), rows(1, 0), ""},
		{"no rows", decode(0), rows(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := graphKey(tc.b, tc.out); got != tc.want {
				t.Errorf("graphKey = %q, want %q", got, tc.want)
			}
		})
	}
}
