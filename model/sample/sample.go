// Package sample picks the next token from logits: greedy, temperature,
// top-k, top-p and min-p, plus the logprobs of the chosen token and the top
// alternatives. A draw depends only on the request's seed and its own step
// counter, so a request samples the same tokens whatever batch it runs in and
// whatever the tensor-parallel degree.
package sample

import (
	"fmt"
	"math"
	"slices"
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

	// LogitBias is added to the logits of its tokens (after the penalties,
	// before temperature and truncation), OpenAI's logit_bias: ids
	// ascending and distinct, biases in [-100, 100]. Reported logprobs stay
	// those of the model's distribution.
	LogitBias []TokenBias

	// MinTokens bans StopIDs (the end-of-sequence and stop token ids) from
	// the first MinTokens draws of a request: vLLM's min_tokens.
	MinTokens int
	StopIDs   []int32
}

// TokenBias is one logit_bias entry.
type TokenBias struct {
	ID   int32
	Bias float64
}

// Adjusted reports whether the logits are changed before sampling
// (penalties or a logit bias).
func (p Params) Adjusted() bool { return p.Penalized() || len(p.LogitBias) > 0 }

// Penalized reports whether any penalty is on.
func (p Params) Penalized() bool {
	return p.PresencePenalty != 0 || p.FrequencyPenalty != 0 || (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1)
}

// ParamError is an out-of-range sampling parameter, named as the OpenAI
// API names it (Param), so an HTTP edge can report it as it is.
type ParamError struct {
	Param string
	Msg   string // what is wrong, starting with the parameter's name
}

func (e *ParamError) Error() string { return "sample: " + e.Msg }

func paramError(param, format string, args ...any) error {
	return &ParamError{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// Validate reports the first out-of-range parameter as a *ParamError. It is
// the one place a sampling parameter's range is written.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || p.Temperature > 100:
		return paramError("temperature", "temperature %g must be in [0, 100]", p.Temperature)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return paramError("top_p", "top_p %g must be in [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP):
		return paramError("min_p", "min_p %g must be in [0, 1]", p.MinP)
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return paramError("presence_penalty", "presence_penalty %g must be in [-2, 2]", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return paramError("frequency_penalty", "frequency_penalty %g must be in [-2, 2]", p.FrequencyPenalty)
	case p.RepetitionPenalty != 0 && !(p.RepetitionPenalty > 0 && p.RepetitionPenalty <= 10):
		return paramError("repetition_penalty", "repetition_penalty %g must be in (0, 10]", p.RepetitionPenalty)
	}
	if p.MinTokens < 0 {
		return paramError("min_tokens", "min_tokens %d must not be negative", p.MinTokens)
	}
	for i, b := range p.LogitBias {
		switch {
		case b.ID < 0:
			return paramError("logit_bias", "logit_bias token %d is negative", b.ID)
		case i > 0 && b.ID <= p.LogitBias[i-1].ID:
			return paramError("logit_bias", "logit_bias tokens must be ascending and distinct (%d after %d)", b.ID, p.LogitBias[i-1].ID)
		case !(b.Bias >= -100 && b.Bias <= 100):
			return paramError("logit_bias", "logit_bias %g for token %d must be in [-100, 100]", b.Bias, b.ID)
		}
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

// PickWithHistory is Pick with the penalties applied over the request's
// tokens so far (h, nil for none), among the tokens allowed (nil: all).
func PickWithHistory(logits []float32, p Params, step, topN int, h *History, allowed *Mask) Result {
	lse := logSumExp(logits)
	id := Draw(logits, p, step, h, allowed)
	res := Result{Token: TokenLogprob{ID: id, Logprob: float64(logits[id]) - lse}}
	if topN > 0 {
		res.Top = topLogits(logits, topN, lse)
	}
	return res
}

// PlainArgmax reports whether Draw of the request's step-th token is the
// Argmax of the raw logits: greedy, with nothing that changes the logits
// (no penalty, no logit bias, no stop token banned by MinTokens). A backend
// may then pick the token where the logits are.
func (p Params) PlainArgmax(step int) bool {
	return p.Temperature <= 0 && !p.Adjusted() && !p.bansStops(step)
}

// bansStops reports whether the step-th draw must not pick a stop token.
func (p Params) bansStops(step int) bool { return step < p.MinTokens && len(p.StopIDs) > 0 }

// Draw is PickWithHistory without logprobs: the token alone, which spares
// the pass over the vocabulary that normalizing takes (greedy decoding is
// then one scan for the maximum).
//
// allowed, when not nil, is constrained decoding's mask: every other token
// is banned before the draw (the reported logprobs stay the model's).
func Draw(logits []float32, p Params, step int, h *History, allowed *Mask) int32 {
	work := logits
	banStops := p.bansStops(step)
	if p.Adjusted() || banStops || allowed != nil {
		work = Penalize(logits, p, h)
		for _, b := range p.LogitBias {
			if int(b.ID) < len(work) {
				work[b.ID] += float32(b.Bias)
			}
		}
	}
	if banStops {
		for _, id := range p.StopIDs {
			if id >= 0 && int(id) < len(work) {
				work[id] = float32(math.Inf(-1))
			}
		}
	}
	if allowed != nil {
		allowed.Apply(work)
	}
	if p.Temperature > 0 {
		return int32(draw(work, p, p.Uniform(step)))
	}
	return int32(Argmax(work))
}

// DrawFrom is the end of Draw, from logits already adjusted (Adjustments
// applied, and a mask): the argmax when greedy, else the token that
// temperature, top-k, min-p and top-p and the uniform u leave, where u is
// the draw's Params.Uniform. Draw(logits, p, step, h, allowed) is DrawFrom
// of the adjusted logits with p.Uniform(step).
func DrawFrom(work []float32, p Params, u float64) int32 {
	if p.Temperature > 0 {
		return int32(draw(work, p, u))
	}
	return int32(Argmax(work))
}

// Score returns the logprob of a given token (a prompt token) under logits
// and the topN most likely tokens: the prompt side of logprobs.
func Score(logits []float32, target int32, topN int) Result {
	lse := logSumExp(logits)
	res := Result{Token: TokenLogprob{ID: target, Logprob: float64(logits[target]) - lse}}
	if topN > 0 {
		res.Top = topLogits(logits, topN, lse)
	}
	return res
}

// logSumExp returns log Σ exp(logits) in float64.
func logSumExp(logits []float32) float64 {
	mx := float64(logits[Argmax(logits)])
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum)
}

// topLogits is Top over raw logits, converted to logprobs with lse.
func topLogits(logits []float32, n int, lse float64) []TokenLogprob {
	out := make([]TokenLogprob, 0, min(n, len(logits))+1)
	for i, v := range logits {
		out = insertBounded(out, n, TokenLogprob{ID: int32(i), Logprob: float64(v) - lse}, higherLogprob)
	}
	return out
}

// LogSoftmax returns log-probabilities in float64.
func LogSoftmax(logits []float32) []float64 {
	lse := logSumExp(logits)
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - lse
	}
	return out
}

// Top returns the n largest entries, highest first (ties: lower id first).
// It keeps a bounded sorted list, so it costs O(V·n) at worst and about
// O(V) in practice: the vocabulary is never sorted.
func Top(logprobs []float64, n int) []TokenLogprob {
	if n <= 0 {
		return nil
	}
	out := make([]TokenLogprob, 0, min(n, len(logprobs))+1)
	for i, lp := range logprobs {
		out = insertBounded(out, n, TokenLogprob{ID: int32(i), Logprob: lp}, higherLogprob)
	}
	return out
}

func higherLogprob(a, b TokenLogprob) bool { return a.Logprob > b.Logprob }

// insertBounded inserts x into out, kept sorted by better (stable: an equal
// element already there stays first) and cut to at most n elements.
func insertBounded[T any](out []T, n int, x T, better func(a, b T) bool) []T {
	if len(out) == n && !better(x, out[n-1]) {
		return out
	}
	j := len(out)
	for j > 0 && better(x, out[j-1]) {
		j--
	}
	out = slices.Insert(out, j, x)
	if len(out) > n {
		out = out[:n]
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

// cand is a sampling candidate: a token and its unnormalized probability.
type cand struct {
	id int
	p  float64
}

// sortCands orders by probability, highest first, ties by lower id.
func sortCands(cs []cand) {
	sort.Slice(cs, func(a, b int) bool {
		if cs[a].p != cs[b].p {
			return cs[a].p > cs[b].p
		}
		return cs[a].id < cs[b].id
	})
}

// largest returns the k most likely candidates, sorted.
func largest(cs []cand, k int) []cand {
	if k > 64 {
		sortCands(cs)
		return cs[:k]
	}
	out := make([]cand, 0, k+1)
	for _, c := range cs {
		out = insertBounded(out, k, c, func(a, b cand) bool { return a.p > b.p })
	}
	return out
}

// topPCandidates returns, unsorted, a subset of cs that surely contains the
// top-p prefix: whole power-of-two probability bands, largest first, until
// their mass reaches topP·total. It avoids sorting the whole vocabulary.
func topPCandidates(cs []cand, topP, total float64) []cand {
	var mass [65]float64
	band := func(p float64) int { // p ≤ 1 (the largest is exactly 1)
		_, e := math.Frexp(p) // p = f·2^e, f in [0.5, 1)
		return min(max(-e, 0), 64)
	}
	for _, c := range cs {
		mass[band(c.p)] += c.p
	}
	last, acc := 64, 0.0
	for b := range mass {
		if acc += mass[b]; acc >= topP*total {
			last = b
			break
		}
	}
	out := cs[:0:0]
	for _, c := range cs {
		if band(c.p) <= last {
			out = append(out, c)
		}
	}
	return out
}

// tempered returns every token as a candidate with its unnormalized
// probability exp((logit − max) / temperature), in id order, and their sum
// (in that order).
func tempered(logits []float32, temperature float64) ([]cand, float64) {
	mx := float64(logits[Argmax(logits)])
	cands := make([]cand, len(logits))
	total := 0.0
	for i, v := range logits {
		cands[i] = cand{i, math.Exp((float64(v) - mx) / temperature)}
		total += cands[i].p
	}
	return cands, total
}

// draw applies temperature, top-k, min-p and top-p, then samples with the
// uniform u (the generator seeded by (seed, step) draws it). Candidates are ordered by probability
// (ties: lower id), but the whole vocabulary is sorted only when top-k is
// large.
func draw(logits []float32, p Params, u float64) int {
	cands, total := tempered(logits, p.Temperature)
	topP := p.TopP > 0 && p.TopP < 1
	cut := p.TopK > 0 && p.TopK < len(cands) // a top-k of the whole vocabulary cuts nothing
	switch {
	case cut:
		cands = largest(cands, p.TopK)
	case p.MinP > 0:
		// The largest candidate has p = 1, so min-p keeps p ≥ MinP.
		kept := cands[:0:0]
		for _, c := range cands {
			if c.p >= p.MinP {
				kept = append(kept, c)
			}
		}
		cands = kept
		sortCands(cands)
	case topP:
		cands = topPCandidates(cands, p.TopP, total)
		sortCands(cands)
	default:
		sortCands(cands)
	}
	if p.MinP > 0 {
		floor := p.MinP * cands[0].p
		n := 1
		for n < len(cands) && cands[n].p >= floor {
			n++
		}
		cands = cands[:n]
	}
	if cut || p.MinP > 0 {
		total = 0
		for _, c := range cands {
			total += c.p
		}
	}
	if topP {
		acc, n := 0.0, 0
		for n < len(cands) && acc < p.TopP*total {
			acc += cands[n].p
			n++
		}
		cands, total = cands[:n], acc
	}
	u *= total
	for _, c := range cands {
		u -= c.p
		if u < 0 {
			return c.id
		}
	}
	return cands[len(cands)-1].id
}

// Penalize returns a copy of logits with the repetition, presence and
// frequency penalties applied over the request's history h (nil: none).
func Penalize(logits []float32, p Params, h *History) []float32 {
	out := append([]float32(nil), logits...)
	if h == nil {
		return out
	}
	inRange := func(id int32) bool { return id >= 0 && int(id) < len(out) }
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		for id := range h.seen {
			if !inRange(id) {
				continue
			}
			if out[id] > 0 {
				out[id] /= float32(p.RepetitionPenalty)
			} else {
				out[id] *= float32(p.RepetitionPenalty)
			}
		}
	}
	for id, n := range h.generated {
		if inRange(id) {
			out[id] -= float32(p.FrequencyPenalty*float64(n) + p.PresencePenalty)
		}
	}
	return out
}
