//go:build cuda

package cuda

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"cohort/model/sample"
)

// TestArgmax: the device argmax picks sample.Argmax's token in every row:
// ties (lowest index), -Inf rows, NaN logits (never chosen over a number;
// a NaN first logit gives 0, as the host loop does), and the 248k
// vocabulary of the 4b shape.
func TestArgmax(t *testing.T) {
	g := bf16Backend(t)
	r := newRand(11)
	for _, vocab := range []int{1, 7, 1000, 248320} {
		rows := [][]float32{}
		for range 5 {
			rows = append(rows, randSlice(r, vocab, 3))
		}
		tie := randSlice(r, vocab, 1)
		if vocab > 2 {
			tie[vocab-1], tie[1] = 50, 50 // the lower index wins
		}
		inf := make([]float32, vocab)
		for i := range inf {
			inf[i] = float32(math.Inf(-1))
		}
		nan := randSlice(r, vocab, 1)
		nan[vocab/2] = float32(math.NaN())
		nanFirst := randSlice(r, vocab, 1)
		nanFirst[0] = float32(math.NaN())
		rows = append(rows, tie, inf, nan, nanFirst)
		var flat []float32
		var want []int32
		for _, row := range rows {
			flat = append(flat, row...)
			want = append(want, int32(sample.Argmax(row)))
		}
		got := g.Argmax(g.Upload(flat, len(rows), vocab))
		if !slices.Equal(got, want) {
			t.Errorf("vocab %d: device argmax %v, host %v", vocab, got, want)
		}
		g.ResetScratch()
	}
}

// TestSample: the device sampler picks model/sample's token in every row
// (and reports its logprobs within 1e-6 and its alternatives in order):
// random rows of the 248k vocabulary of Qwen3.5 and of small ones (below,
// at and above the 2048 candidates the kernel sorts in shared memory),
// with ties, masked (-Inf) and very negative logits, all-equal rows and
// peaked ones; temperature alone and with top-k, top-p, min-p and their
// combinations, penalties over a history, logit bias, min_tokens bans,
// greedy with adjustments, logprobs, top logprobs and prompt logprobs
// (sampleBatchOf), in batches of 1 to 64 rows. A second call on the same
// rows gives the same results bit for bit, and so does a batch's first row
// sampled alone.
func TestSample(t *testing.T) {
	g := bf16Backend(t)
	r := newRand(12)
	rows, mismatches := 0, 0
	for _, tc := range []struct {
		vocab int
		sizes []int
	}{
		{7, []int{1, 4, 64}},
		{1000, []int{1, 2, 3, 8, 33, 64, 64, 64}},
		{2048, []int{16, 64}},
		{5000, []int{5, 64}},
		{248320, []int{1, 2, 3, 5, 8, 16, 31, 64}},
	} {
		for _, size := range tc.sizes {
			b := sampleBatchOf(r, tc.vocab, size)
			logits := g.Upload(b.logits, size, tc.vocab)
			start := time.Now()
			got := g.Sample(logits, b.rows)
			took := time.Since(start)
			again := g.Sample(logits, b.rows)
			first := g.Upload(b.logits[:tc.vocab], 1, tc.vocab)
			alone := g.Sample(first, b.rows[:1])
			g.ResetScratch()
			g.Free(logits, first)
			rows += size
			mismatches += checkSampled(t, b, got)
			if !reflect.DeepEqual(got, again) {
				t.Errorf("vocab %d, %d rows: a second call differs", tc.vocab, size)
			}
			if !reflect.DeepEqual(got[:1], alone) {
				t.Errorf("vocab %d, %d rows: the first row alone gives %+v, in the batch %+v", tc.vocab, size, alone[0], got[0])
			}
			t.Logf("vocab %d, %d rows: %v", tc.vocab, size, took)
		}
	}
	t.Logf("%d of %d rows differ from model/sample", mismatches, rows)
}

// TestSampleSeeds: one row of the 248k vocabulary drawn with many seeds
// and steps at each setting (64 draws a call): every draw is the host's.
func TestSampleSeeds(t *testing.T) {
	g := bf16Backend(t)
	r := newRand(13)
	const vocab, draws = 248320, 64
	raw := logitRow(r, vocab, 0)
	h := randomHistory(r, vocab)
	for _, p := range []sample.Params{
		{Temperature: 0.3}, {Temperature: 1.5},
		{Temperature: 1, TopK: 1}, {Temperature: 1, TopK: 5}, {Temperature: 0.7, TopK: 50}, {Temperature: 1.2, TopK: 1000},
		{Temperature: 1, TopP: 0.5}, {Temperature: 0.8, TopP: 0.9}, {Temperature: 1.5, TopP: 0.99},
		{Temperature: 1, MinP: 0.05}, {Temperature: 1.5, MinP: 0.2},
		{Temperature: 0.6, TopK: 20, TopP: 0.95, MinP: 0.01},
		{Temperature: 1, PresencePenalty: 1, FrequencyPenalty: 0.5, RepetitionPenalty: 1.2},
		{Temperature: 1, TopP: 0.9, LogitBias: []sample.TokenBias{{ID: 11, Bias: 8}, {ID: 70000, Bias: -100}}},
		{Temperature: 1, MinTokens: 100, StopIDs: []int32{0, 248319}},
		{LogitBias: []sample.TokenBias{{ID: 5, Bias: 40}}},
	} {
		var raws [][]float32
		var ds []sampleDraw
		for i := range draws {
			d := sampleDraw{p: p, step: i, topN: i % 3}
			d.p.Seed = r.Uint64()
			if p.Penalized() {
				d.history = h
			}
			raws, ds = append(raws, raw), append(ds, d)
		}
		b := hostBatch(vocab, raws, ds)
		logits := g.Upload(b.logits, draws, vocab)
		got := g.Sample(logits, b.rows)
		g.ResetScratch()
		g.Free(logits)
		checkSampled(t, b, got)
	}
}
