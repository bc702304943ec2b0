package qwen35_test

import (
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels/cpu"
	"cohort/model"
)

// tinyModel writes the tiny preset and loads it on a CPU rank.
func tinyModel(t testing.TB) (*cpu.Backend, model.Model, *model.Config) {
	t.Helper()
	ck := archtest.Open(t, "tiny")
	be, m := archtest.Load(t, ck)
	return be, m, ck.Config
}

func TestPrefillThenDecodeMatchesPrefill(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.PrefillThenDecode(t, be, m, cfg.VocabSize)
}

// TestChunkedPrefillMatchesUnchunked also cuts around the delta rule's
// 64-row chunks.
func TestChunkedPrefillMatchesUnchunked(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.ChunkedPrefill(t, be, m, cfg.VocabSize, 1, 3, 17, 63, 64, 65, 100)
}

func TestBatchedSequencesMatchAlone(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.BatchedSequences(t, be, m, cfg.VocabSize)
}

func TestPaddedDecodeMatchesPlain(t *testing.T) {
	be, m, cfg := tinyModel(t)
	archtest.PaddedDecode(t, be, m, cfg.VocabSize)
}
