package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// drawSorted is the straightforward definition that draw optimizes: sort the
// whole vocabulary, then apply top-k, min-p and top-p.
func drawSorted(logits []float32, p Params, step int) int {
	mx := float64(logits[Argmax(logits)])
	cands := make([]cand, len(logits))
	for i, v := range logits {
		cands[i] = cand{i, math.Exp((float64(v) - mx) / p.Temperature)}
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].p > cands[b].p })
	if p.TopK > 0 && p.TopK < len(cands) {
		cands = cands[:p.TopK]
	}
	if p.MinP > 0 {
		floor := p.MinP * cands[0].p
		n := 1
		for n < len(cands) && cands[n].p >= floor {
			n++
		}
		cands = cands[:n]
	}
	total := 0.0
	for _, c := range cands {
		total += c.p
	}
	if p.TopP > 0 && p.TopP < 1 {
		acc, n := 0.0, 0
		for n < len(cands) && acc < p.TopP*total {
			acc += cands[n].p
			n++
		}
		cands, total = cands[:n], acc
	}
	r := rand.New(rand.NewPCG(p.Seed, uint64(step)))
	u := r.Float64() * total
	for _, c := range cands {
		u -= c.p
		if u < 0 {
			return c.id
		}
	}
	return cands[len(cands)-1].id
}

func topSorted(logprobs []float64, n int) []TokenLogprob {
	idx := make([]int, len(logprobs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return logprobs[idx[a]] > logprobs[idx[b]] })
	n = min(n, len(idx))
	out := make([]TokenLogprob, n)
	for i := range out {
		out[i] = TokenLogprob{ID: int32(idx[i]), Logprob: logprobs[idx[i]]}
	}
	return out
}

// TestDrawMatchesSortedDefinition: the selection shortcuts pick exactly the
// token the sort-everything definition picks, ties included.
func TestDrawMatchesSortedDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	params := []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 5},
		{Temperature: 1.3, TopK: 100},
		{Temperature: 1, MinP: 0.05},
		{Temperature: 0.9, TopP: 0.9},
		{Temperature: 0.5, TopP: 0.3},
		{Temperature: 1, TopK: 40, TopP: 0.95, MinP: 0.01},
		{Temperature: 2, TopP: 0.99, MinP: 0.001},
		{Temperature: 1.5, TopK: 3000, TopP: 0.5}, // a top-k of the whole vocabulary cuts nothing
	}
	for trial := 0; trial < 200; trial++ {
		vocab := 1 + rng.IntN(3000)
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
			if rng.IntN(10) == 0 { // ties
				logits[i] = float32(int(logits[i]))
			}
		}
		for _, p := range params {
			p.Seed = uint64(trial)
			if a, b := draw(logits, p, p.Uniform(trial)), drawSorted(logits, p, trial); a != b {
				t.Fatalf("trial %d %+v: draw %d, sorted definition %d", trial, p, a, b)
			}
		}
		lp := LogSoftmax(logits)
		for _, n := range []int{1, 5, 20} {
			got, want := Top(lp, n), topSorted(lp, n)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("trial %d Top(%d) = %v, want %v", trial, n, got, want)
				}
			}
		}
	}
}

func BenchmarkPick(b *testing.B) {
	const vocab = 248320
	logits := normalLogits(vocab, 3, 3, 4)
	for _, tc := range []struct {
		name string
		p    Params
		topN int
	}{
		{"greedy", Params{}, 0},
		{"greedy+top5", Params{}, 5},
		{"top-p", Params{Temperature: 0.8, TopP: 0.9}, 0},
		{"top-k", Params{Temperature: 0.8, TopK: 50}, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Pick(logits, tc.p, i, tc.topN)
			}
		})
		b.Run(tc.name+"/draw-only", func(b *testing.B) { // no logprobs asked: no normalization
			for i := 0; i < b.N; i++ {
				Draw(logits, tc.p, i, nil, nil)
			}
		})
		b.Run(tc.name+"/sorted-definition", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				LogSoftmax(logits)
				if tc.p.Temperature > 0 {
					drawSorted(logits, tc.p, i)
				}
				if tc.topN > 0 {
					topSorted(LogSoftmax(logits), tc.topN)
				}
			}
		})
	}
}
