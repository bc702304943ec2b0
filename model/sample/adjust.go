package sample

import (
	"math"
	"math/rand/v2"
	"slices"
)

// AdjustOps are the changes Draw makes to one token's logit before it
// samples, as bits; Adjustment.Apply carries them out in Draw's order.
type AdjustOps uint8

const (
	// AdjustRepeat is the repetition penalty: a positive logit is divided by
	// Scale, any other multiplied by it (float32).
	AdjustRepeat AdjustOps = 1 << iota
	// AdjustPenalize subtracts Subtract, the frequency and presence penalties
	// already combined as Penalize combines them (float32).
	AdjustPenalize
	// AdjustBias adds Bias, the request's logit_bias (float32).
	AdjustBias
	// AdjustBan sets the logit to -Inf: a stop token before MinTokens.
	AdjustBan
)

// Adjustment is what Draw does to one token's logit: the operations of Ops
// in the order Repeat, Penalize, Bias, Ban, each rounded to float32 as
// Draw rounds it. A device that samples where the logits are applies the
// adjustments of a row to its copy of the logits and gets the logits Draw
// samples from.
type Adjustment struct {
	ID       int32
	Ops      AdjustOps
	Scale    float32 // Repeat's float32(RepetitionPenalty)
	Subtract float32 // Penalize's float32(FrequencyPenalty·n + PresencePenalty)
	Bias     float32 // Bias's float32(bias)
}

// Apply returns the logit v after the adjustment. Each operation is
// rounded on its own (the conversions keep a compiler from fusing a
// multiplication and a subtraction), as Draw rounds each when it stores it.
func (a Adjustment) Apply(v float32) float32 {
	if a.Ops&AdjustRepeat != 0 {
		if v > 0 {
			v = float32(v / a.Scale)
		} else {
			v = float32(v * a.Scale)
		}
	}
	if a.Ops&AdjustPenalize != 0 {
		v = float32(v - a.Subtract)
	}
	if a.Ops&AdjustBias != 0 {
		v = float32(v + a.Bias)
	}
	if a.Ops&AdjustBan != 0 {
		v = float32(math.Inf(-1))
	}
	return v
}

// Adjustments returns, ids ascending and distinct, what Draw does to the
// logits (vocab of them) of the request's step-th draw before it samples:
// the penalties over its history h (nil: none), its logit bias and, before
// MinTokens, the ban of its stop ids. Ids outside the vocabulary are left
// out, as Draw leaves them. A constrained request's mask is not among them.
func Adjustments(p Params, step int, h *History, vocab int) []Adjustment {
	byID := map[int32]*Adjustment{}
	at := func(id int32) *Adjustment {
		a := byID[id]
		if a == nil {
			a = &Adjustment{ID: id}
			byID[id] = a
		}
		return a
	}
	inRange := func(id int32) bool { return id >= 0 && int(id) < vocab }
	if h != nil {
		if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
			for id := range h.seen {
				if inRange(id) {
					a := at(id)
					a.Ops |= AdjustRepeat
					a.Scale = float32(p.RepetitionPenalty)
				}
			}
		}
		for id, n := range h.generated {
			if inRange(id) {
				a := at(id)
				a.Ops |= AdjustPenalize
				a.Subtract = float32(p.FrequencyPenalty*float64(n) + p.PresencePenalty)
			}
		}
	}
	for _, b := range p.LogitBias {
		if inRange(b.ID) {
			a := at(b.ID)
			a.Ops |= AdjustBias
			a.Bias = float32(b.Bias)
		}
	}
	if p.bansStops(step) {
		for _, id := range p.StopIDs {
			if inRange(id) {
				at(id).Ops |= AdjustBan
			}
		}
	}
	out := make([]Adjustment, 0, len(byID))
	for _, a := range byID {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Adjustment) int { return int(a.ID) - int(b.ID) })
	return out
}

// Uniform returns the uniform number in [0, 1) of the request's step-th
// draw: the generator seeded by (Seed, step) that draw uses, so a device
// that samples elsewhere draws the same token with it.
func (p Params) Uniform(step int) float64 {
	return rand.New(rand.NewPCG(p.Seed, uint64(step))).Float64()
}
