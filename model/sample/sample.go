// Package sample picks the next token from logits: greedy, temperature,
// top-k, top-p and min-p, plus the logprobs of the chosen token and the top
// alternatives. A draw depends only on the request's seed and its own step
// counter, so a request samples the same tokens whatever batch it runs in and
// whatever the tensor-parallel degree.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Params are one request's sampling controls. The zero value is greedy.
type Params struct {
	Temperature float64 // 0 means greedy
	TopK        int     // 0 or negative: off
	TopP        float64 // 0 or 1: off
	MinP        float64 // 0: off
	Seed        uint64
}

// Validate reports the first out-of-range parameter by its OpenAI name.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || p.Temperature > 100:
		return fmt.Errorf("sample: temperature %g must be in [0, 100]", p.Temperature)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("sample: top_p %g must be in [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP):
		return fmt.Errorf("sample: min_p %g must be in [0, 1]", p.MinP)
	}
	return nil
}

// TokenLogprob is a token with its log-probability under the model's
// (untempered) distribution.
type TokenLogprob struct {
	ID      int32
	Logprob float64
}

// Result is one sampling step's outcome.
type Result struct {
	Token TokenLogprob
	Top   []TokenLogprob // the n most likely tokens, most likely first
}

// Pick samples a token from logits for the request's step-th token.
// topN is how many alternatives to report (0 for none).
func Pick(logits []float32, p Params, step int, topN int) Result {
	logprobs := LogSoftmax(logits)
	id := greedy(logits)
	if p.Temperature > 0 {
		id = draw(logits, p, step)
	}
	return Result{Token: TokenLogprob{ID: int32(id), Logprob: logprobs[id]}, Top: Top(logprobs, topN)}
}

// LogSoftmax returns log-probabilities in float64.
func LogSoftmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - lse
	}
	return out
}

// Top returns the n largest entries, highest first (ties: lower id first).
func Top(logprobs []float64, n int) []TokenLogprob {
	if n <= 0 {
		return nil
	}
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

func greedy(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// draw applies temperature, top-k, min-p and top-p, then samples with a
// generator seeded by (seed, step).
func draw(logits []float32, p Params, step int) int {
	type cand struct {
		id int
		p  float64
	}
	mx := float64(logits[greedy(logits)])
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
