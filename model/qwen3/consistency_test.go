package qwen3_test

import (
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels"
)

func TestPrefillThenDecodeMatchesPrefill(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.PrefillThenDecode(t, be, m, cfg.VocabSize)
}

func TestChunkedPrefillMatchesUnchunked(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.ChunkedPrefill(t, be, m, cfg.VocabSize, 1, 3, 17, 64, 100)
}

func TestBatchedSequencesMatchAlone(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.BatchedSequences(t, be, m, cfg.VocabSize)
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
