package qwen35_test

import (
	"fmt"
	"math"
	"testing"

	"cohort/internal/testmodels/modelgen"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
)

// tinyModel writes the tiny preset and loads it on a CPU rank.
func tinyModel(t testing.TB) (kernels.Backend, model.Model, *model.Config) {
	t.Helper()
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	return be, m, ck.Config
}

func prompt(n, vocab int, seed int) []int32 {
	ids := make([]int32, n)
	x := uint32(seed*7919 + 1)
	for i := range ids {
		x = x*1664525 + 1013904223
		ids[i] = int32(x>>8) % int32(vocab)
	}
	return ids
}

// maxRelDiff returns max|a-b| / max|b|.
func maxRelDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, scale float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
		scale = math.Max(scale, math.Abs(float64(b[i])))
	}
	return d / scale
}

// TestPrefillThenDecodeMatchesPrefill: prefill(n-k) then k single-token
// decode steps give the same logits as one prefill of all n tokens.
func TestPrefillThenDecodeMatchesPrefill(t *testing.T) {
	be, m, cfg := tinyModel(t)
	const n, k = 70, 6
	ids := prompt(n, cfg.VocabSize, 1)
	full, err := model.NewSession(be, m, n).Step(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
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
	for _, chunk := range []int{1, 3, 17, 63, 64, 65, 100} {
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
// one flat batch give each the logits it gets alone.
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
		ids := prompt(n, cfg.VocabSize, 10+i)
		seq := kernels.Seq{Slot: len(lens) - 1 - i, Start: len(tokens), Len: n}
		for p := 0; p < (n+pageSize-1)/pageSize; p++ {
			seq.Pages = append(seq.Pages, nextPage)
			nextPage--
		}
		for j := 0; j < n; j++ {
			b.Positions = append(b.Positions, int32(j))
		}
		tokens = append(tokens, ids...)
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
