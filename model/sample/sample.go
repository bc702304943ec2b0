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

	// Penalties over the tokens seen so far (OpenAI and vLLM semantics):
	// presence subtracts once per distinct generated token, frequency per
	// occurrence; repetition divides positive logits (multiplies negative
	// ones) of every token in the prompt or the output. 1 is off.
	PresencePenalty   float64
	FrequencyPenalty  float64
	RepetitionPenalty float64
}

// Penalized reports whether any penalty is on.
func (p Params) Penalized() bool {
	return p.PresencePenalty != 0 || p.FrequencyPenalty != 0 || (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1)
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
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("sample: presence_penalty %g must be in [-2, 2]", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("sample: frequency_penalty %g must be in [-2, 2]", p.FrequencyPenalty)
	case p.RepetitionPenalty != 0 && !(p.RepetitionPenalty > 0 && p.RepetitionPenalty <= 10):
		return fmt.Errorf("sample: repetition_penalty %g must be in (0, 10]", p.RepetitionPenalty)
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
// topN is how many alternatives to report (0 for none). Logprobs are those
// of the model's distribution, before penalties and temperature.
func Pick(logits []float32, p Params, step int, topN int) Result {
	return PickWithHistory(logits, p, step, topN, nil, nil)
}

// PickWithHistory is Pick with the penalties applied over the prompt and the
// tokens generated so far.
func PickWithHistory(logits []float32, p Params, step, topN int, prompt, generated []int32) Result {
	logprobs := LogSoftmax(logits)
	if p.Penalized() {
		logits = Penalize(logits, p, prompt, generated)
	}
	id := Argmax(logits)
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

// Argmax returns the index of the largest logit (the lowest index on ties).
func Argmax(logits []float32) int {
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

// Penalize returns a copy of logits with the repetition, presence and
// frequency penalties applied.
func Penalize(logits []float32, p Params, prompt, generated []int32) []float32 {
	out := append([]float32(nil), logits...)
	inRange := func(id int32) bool { return id >= 0 && int(id) < len(out) }
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		seen := map[int32]bool{}
		for _, ids := range [][]int32{prompt, generated} {
			for _, id := range ids {
				if !inRange(id) || seen[id] {
					continue
				}
				seen[id] = true
				if out[id] > 0 {
					out[id] /= float32(p.RepetitionPenalty)
				} else {
					out[id] *= float32(p.RepetitionPenalty)
				}
			}
		}
	}
	counts := map[int32]int{}
	for _, id := range generated {
		if inRange(id) {
			counts[id]++
		}
	}
	for id, n := range counts {
		out[id] -= float32(p.FrequencyPenalty*float64(n) + p.PresencePenalty)
	}
	return out
}
