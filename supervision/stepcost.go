package supervision

import (
	"math"
	"time"
)

// StepCost estimates how long an engine step takes from the number of tokens
// (rows) it computes, fitted online to the steps measured so far:
//
//	duration ≈ Fixed + PerToken × tokens
//
// by least squares over exponentially weighted observations, so it follows a
// machine that gets slower (longer contexts, a busier host). It is a pure
// value: durations come in, nothing reads a clock. The zero value knows
// nothing; Known reports whether it has seen a step.
//
// The engine uses it twice: to size a step's prefill budget so the step is
// predicted to take at most a target time (StepCost.Tokens), and to arm a
// step's deadline after the work it was given (StepCost.Deadline), so that a
// long prompt is not taken for a hung rank.
type StepCost struct {
	w, sx, sy, sxx, sxy float64 // weighted sums over observations
	maxTokens           int     // the largest step observed
}

// costDecay is the weight an observation keeps per later observation.
const costDecay = 0.8

// Observe records that a step of tokens rows took d. A step that failed its
// deadline after d may be observed too: its true cost is at least d, so the
// estimate only grows.
func (c *StepCost) Observe(tokens int, d time.Duration) {
	if tokens < 1 || d < 0 {
		return
	}
	x, y := float64(tokens), d.Seconds()
	c.w = c.w*costDecay + 1
	c.sx = c.sx*costDecay + x
	c.sy = c.sy*costDecay + y
	c.sxx = c.sxx*costDecay + x*x
	c.sxy = c.sxy*costDecay + x*y
	c.maxTokens = max(c.maxTokens, tokens)
}

// Known reports whether a step has been observed.
func (c *StepCost) Known() bool { return c.w > 0 }

// MaxObserved returns the largest step observed, in tokens (0 if none).
func (c *StepCost) MaxObserved() int { return c.maxTokens }

// fit returns the fixed cost and the per-token cost, in seconds. When the
// observed sizes are too close to separate the two (a spread below a third
// of their mean), or the fit has a negative part, all of the cost is put on
// the tokens (a line through the origin): for a cost that is a fixed part
// plus a part per token, that overestimates every larger step, so a budget
// grown from it converges to the target from below.
func (c *StepCost) fit() (fixed, perToken float64) {
	if c.w == 0 {
		return 0, 0
	}
	mx, my := c.sx/c.w, c.sy/c.w
	if vx := c.sxx/c.w - mx*mx; vx > 0.1*mx*mx {
		b := (c.sxy/c.w - mx*my) / vx
		if a := my - b*mx; a >= 0 && b >= 0 {
			return a, b
		}
	}
	return 0, c.sxy / c.sxx
}

// Predict returns the estimated duration of a step of tokens rows (0 while
// nothing is known). Beyond the largest step observed, the prediction there
// is scaled in proportion to the tokens: the fit is not trusted outside what
// was measured.
func (c *StepCost) Predict(tokens int) time.Duration {
	return seconds(c.predict(float64(max(tokens, 0))))
}

func (c *StepCost) predict(x float64) float64 {
	a, b := c.fit()
	if top := float64(c.maxTokens); x > top && top > 0 {
		return (a + b*top) * x / top
	}
	return a + b*x
}

// Tokens returns the most rows a step may have to be predicted to take at
// most target: at least 1, and math.MaxInt when the measured cost does not
// grow with tokens (the caller caps it).
func (c *StepCost) Tokens(target time.Duration) int {
	a, b := c.fit()
	t := target.Seconds()
	var n float64
	switch top := float64(c.maxTokens); {
	case c.w == 0 || c.predict(top) <= 0:
		return math.MaxInt
	case t > c.predict(top):
		n = top * t / c.predict(top)
	case b > 0:
		n = (t - a) / b
	default:
		n = top
	}
	if n >= 1e12 {
		return math.MaxInt
	}
	return max(int(n), 1)
}

// DeadlineFactor is how many times its predicted duration a step may run
// before it is taken for hung.
const DeadlineFactor = 4

// Deadline returns the deadline of a step of tokens rows: floor, or
// DeadlineFactor times the predicted duration when that is longer. The
// deadline so follows the work a step was given, and a hung rank is still
// detected within a bounded multiple of what the step should have taken.
func (c *StepCost) Deadline(tokens int, floor time.Duration) time.Duration {
	return max(floor, DeadlineFactor*c.Predict(tokens))
}

func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	if s > float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}
