package qwen3_test

import (
	"fmt"
	"testing"

	"cohort/kernels"
	"cohort/model"
)

// TestPrefillThenDecodeMatchesPrefill: prefill(n-k) then k single-token
// decode steps give the same logits as one prefill of all n tokens.
func TestPrefillThenDecodeMatchesPrefill(t *testing.T) {
	be, m, cfg := tinyModel(t)
	const n, k = 70, 6
	V := cfg.VocabSize
	ids := prompt(n, V, 1)
	full, err := model.NewSession(be, m, n).Step(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	s := model.NewSession(be, m, n)
	if _, err := s.Step(ids[:n-k], false); err != nil {
		t.Fatal(err)
	}
	for i := n - k; i < n; i++ {
		got, err := s.Step(ids[i:i+1], false)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxRelDiff(got, full[i*V:(i+1)*V]); d > 1e-4 {
			t.Fatalf("position %d: decode differs from prefill by %.2g (relative)", i, d)
		}
	}
}

// TestChunkedPrefillMatchesUnchunked: any chunking of the prompt gives the
// logits of one prefill.
func TestChunkedPrefillMatchesUnchunked(t *testing.T) {
	be, m, cfg := tinyModel(t)
	const n = 150
	ids := prompt(n, cfg.VocabSize, 2)
	full, err := model.NewSession(be, m, n).Step(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{1, 3, 17, 64, 100} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			if testing.Short() && chunk == 1 {
				t.Skip("token-by-token prefill is slow in -short")
			}
			s := model.NewSession(be, m, n)
			var got []float32
			for start := 0; start < n; start += chunk {
				out, err := s.Step(ids[start:min(start+chunk, n)], true)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, out...)
			}
			if d := maxRelDiff(got, full); d > 1e-4 {
				t.Fatalf("chunk %d: logits differ by %.2g (relative)", chunk, d)
			}
		})
	}
}

// TestBatchedSequencesMatchAlone: several sequences of different lengths in
// one flat batch, on non-contiguous pages, give each the logits it gets
// alone.
func TestBatchedSequencesMatchAlone(t *testing.T) {
	be, m, cfg := tinyModel(t)
	lens := []int{5, 1, 33, 70}
	const pageSize = 16
	st := m.NewState(be, len(lens), 32, pageSize)
	b := &kernels.Batch{}
	var tokens []int32
	var rows []int
	nextPage := int32(31) // hand out pages from the top to make them non-contiguous
	for i, n := range lens {
		seq := kernels.Seq{Slot: len(lens) - 1 - i, Start: len(tokens), Len: n}
		for p := 0; p < (n+pageSize-1)/pageSize; p++ {
			seq.Pages = append(seq.Pages, nextPage)
			nextPage--
		}
		for j := range n {
			b.Positions = append(b.Positions, int32(j))
		}
		tokens = append(tokens, prompt(n, cfg.VocabSize, 10+i)...)
		rows = append(rows, seq.End()-1)
		b.Seqs = append(b.Seqs, seq)
	}
	logits, err := m.Forward(be, st, tokens, b, rows)
	if err != nil {
		t.Fatal(err)
	}
	got := be.Download(logits)
	V := cfg.VocabSize
	for i, n := range lens {
		alone, err := model.NewSession(be, m, n).Step(prompt(n, V, 10+i), false)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxRelDiff(got[i*V:(i+1)*V], alone); d > 1e-4 {
			t.Errorf("sequence %d (len %d): batched logits differ by %.2g", i, n, d)
		}
	}
}

// TestForeignStateRefused: a state another architecture made is an error,
// not a panic.
func TestForeignStateRefused(t *testing.T) {
	be, m, _ := tinyModel(t)
	b := &kernels.Batch{Positions: []int32{0}, Seqs: []kernels.Seq{{Len: 1, Pages: []int32{0}}}}
	if _, err := m.Forward(be, foreignState{}, []int32{1}, b, []int{0}); err == nil {
		t.Fatal("a foreign state was accepted")
	}
}

type foreignState struct{}

func (foreignState) Reset(int) {}
