package archtest

import (
	"fmt"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/kernels/kernelstest"
	"cohort/model"
)

// PrefillThenDecode checks that prefill(n-k) then k single-token decode
// steps give the logits of one prefill of all n tokens.
func PrefillThenDecode(t *testing.T, be *cpu.Backend, m model.Model, vocab int) {
	t.Helper()
	const n, k = 70, 6
	ids := Prompt(n, vocab, 1)
	full := prefill(t, be, m, ids)
	s := model.NewSession(be, m, n)
	if _, err := s.Step(ids[:n-k], false); err != nil {
		t.Fatal(err)
	}
	for i := n - k; i < n; i++ {
		got, err := s.Step(ids[i:i+1], false)
		if err != nil {
			t.Fatal(err)
		}
		if d := kernelstest.RelDiff(got, full[i*vocab:(i+1)*vocab]); d > 1e-4 {
			t.Fatalf("position %d: decode differs from prefill by %.2g (relative)", i, d)
		}
	}
}

// prefill returns the logits of every position of ids in one step.
func prefill(t *testing.T, be *cpu.Backend, m model.Model, ids []int32) []float32 {
	t.Helper()
	full, err := model.NewSession(be, m, len(ids)).Step(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	return full
}

// ChunkedPrefill checks that each chunking of a 150-token prompt gives the
// logits of one prefill (token by token only outside -short).
func ChunkedPrefill(t *testing.T, be *cpu.Backend, m model.Model, vocab int, chunks ...int) {
	const n = 150
	ids := Prompt(n, vocab, 2)
	full := prefill(t, be, m, ids)
	for _, chunk := range chunks {
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
			if d := kernelstest.RelDiff(got, full); d > 1e-4 {
				t.Fatalf("chunk %d: logits differ by %.2g (relative)", chunk, d)
			}
		})
	}
}

// BatchedSequences checks that sequences of different lengths in one flat
// batch, on non-contiguous pages and slots in reverse, give each the
// logits it gets alone.
func BatchedSequences(t *testing.T, be *cpu.Backend, m model.Model, vocab int) {
	t.Helper()
	lens := []int{5, 1, 33, 70}
	const pageSize = 16
	st := m.NewState(be, len(lens), 32, pageSize)
	b := &kernels.Batch{}
	var tokens []int32
	var rows []int
	nextPage := int32(31) // hand out pages from the top to make them non-contiguous
	for i, n := range lens {
		seq := kernels.Seq{Slot: len(lens) - 1 - i, Start: len(tokens), Len: n}
		for range (n + pageSize - 1) / pageSize {
			seq.Pages = append(seq.Pages, nextPage)
			nextPage--
		}
		for j := range n {
			b.Positions = append(b.Positions, int32(j))
		}
		tokens = append(tokens, Prompt(n, vocab, 10+i)...)
		rows = append(rows, seq.End()-1)
		b.Seqs = append(b.Seqs, seq)
	}
	logits, err := m.Forward(be, st, tokens, b, rows)
	if err != nil {
		t.Fatal(err)
	}
	got := be.Download(logits)
	for i, n := range lens {
		alone, err := model.NewSession(be, m, n).Step(Prompt(n, vocab, 10+i), false)
		if err != nil {
			t.Fatal(err)
		}
		if d := kernelstest.RelDiff(got[i*vocab:(i+1)*vocab], alone); d > 1e-4 {
			t.Errorf("sequence %d (len %d): batched logits differ by %.2g", i, n, d)
		}
	}
}

// PaddedDecode checks that a pad row (model.PadDecode) leaves a decode
// step's own rows alone: three sequences decoded after their prefills give
// the same logits, and so does the next step, with the step padded to four
// rows as without (the pad row in a slot and a page of its own). One pad
// row: the CPU backend runs sequences in parallel, so pad rows sharing
// their slot would race there (on the GPU nothing reads their state).
func PaddedDecode(t *testing.T, be *cpu.Backend, m model.Model, vocab int) {
	t.Helper()
	const seqs, pageSize, pages = 3, 16, 8
	pad := model.Pad{Slot: seqs, Page: pages}
	plain, padded := m.NewState(be, seqs+1, pages+1, pageSize), m.NewState(be, seqs+1, pages+1, pageSize)
	lens := []int{5, 17, 2}
	for _, st := range []model.State{plain, padded} {
		b, tokens, rows := &kernels.Batch{}, []int32(nil), []int(nil)
		for i, n := range lens {
			b.Seqs = append(b.Seqs, kernels.Seq{Slot: i, Start: len(tokens), Len: n, Pages: []int32{int32(2 * i), int32(2*i + 1)}})
			for j := range n {
				b.Positions = append(b.Positions, int32(j))
			}
			tokens = append(tokens, Prompt(n, vocab, 20+i)...)
			rows = append(rows, len(tokens)-1)
		}
		if _, err := m.Forward(be, st, tokens, b, rows); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 2 {
		in := kernels.StepInputs{Batch: &kernels.Batch{}}
		for i, n := range lens {
			p := n + step
			in.Batch.Seqs = append(in.Batch.Seqs, kernels.Seq{Slot: i, Start: i, Len: 1, Cached: p, Pages: []int32{int32(2 * i), int32(2*i + 1)}})
			in.Batch.Positions = append(in.Batch.Positions, int32(p))
			in.Tokens = append(in.Tokens, int32(7*i+step+1))
			in.Rows = append(in.Rows, i)
		}
		want, err := m.Forward(be, plain, in.Tokens, in.Batch, in.Rows)
		if err != nil {
			t.Fatal(err)
		}
		pin := model.PadDecode(in, 4, pad)
		got, err := m.Forward(be, padded, pin.Tokens, pin.Batch, pin.Rows)
		if err != nil {
			t.Fatal(err)
		}
		// The CPU's GEMMs block rows by the batch's size, so the last real
		// rows may differ in their last bits; a pad row that touched a real
		// row's state or pages would move its logits far more.
		w, g := be.Download(want), be.Download(got)
		if d := kernelstest.RelDiff(g[:len(w)], w); d > 1e-4 {
			t.Errorf("step %d: the padded step's own rows differ by %.3g (relative)", step, d)
		}
	}
}
