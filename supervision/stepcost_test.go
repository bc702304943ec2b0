package supervision

import (
	"math"
	"testing"
	"time"
)

func TestStepCost(t *testing.T) {
	ms := time.Millisecond
	type obs struct {
		tokens int
		d      time.Duration
	}
	cases := []struct {
		name     string
		obs      []obs
		predict  int           // tokens to predict for
		want     time.Duration // predicted duration (within 1%)
		target   time.Duration
		tokens   int // Tokens(target)
		deadline time.Duration
	}{
		{name: "nothing known", predict: 1000, want: 0, target: time.Second, tokens: math.MaxInt, deadline: 2 * time.Second},
		{name: "one size: all cost on tokens", obs: []obs{{100, 1000 * ms}, {100, 1000 * ms}},
			predict: 1000, want: 10 * time.Second, target: 500 * ms, tokens: 50, deadline: 40 * time.Second},
		{name: "close sizes: all cost on tokens", obs: []obs{{16, 190 * ms}, {20, 230 * ms}, {19, 210 * ms}},
			predict: 19, want: 216 * ms, target: 250 * ms, tokens: 21, deadline: 2 * time.Second},
		{name: "fixed plus per token", obs: []obs{{1, 30 * ms}, {101, 1030 * ms}, {51, 530 * ms}},
			predict: 81, want: 830 * ms, target: 530 * ms, tokens: 51, deadline: 3320 * ms},
		{name: "beyond the largest step: in proportion", obs: []obs{{1, 30 * ms}, {101, 1030 * ms}, {51, 530 * ms}},
			predict: 202, want: 2060 * ms, target: 2060 * ms, tokens: 202, deadline: 8240 * ms},
		{name: "cost fixed whatever the size", obs: []obs{{1, 50 * ms}, {64, 50 * ms}, {8, 50 * ms}},
			predict: 64, want: 50 * ms, target: 500 * ms, tokens: 640, deadline: 2 * time.Second},
		{name: "a deadline failure raises the estimate", obs: []obs{{16, 160 * ms}, {2048, 2000 * ms}},
			predict: 2048, want: 2000 * ms, target: 500 * ms, tokens: 391, deadline: 8 * time.Second},
		{name: "ignores empty steps", obs: []obs{{0, time.Hour}, {10, 100 * ms}},
			predict: 20, want: 200 * ms, target: 100 * ms, tokens: 10, deadline: 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sc StepCost
			for _, o := range c.obs {
				sc.Observe(o.tokens, o.d)
			}
			if got := sc.Predict(c.predict); math.Abs(float64(got-c.want)) > 0.01*float64(c.want)+float64(time.Microsecond) {
				t.Errorf("Predict(%d) = %v, want %v", c.predict, got, c.want)
			}
			if got := sc.Tokens(c.target); got != c.tokens && math.Abs(float64(got-c.tokens)) > 0.01*float64(c.tokens) {
				t.Errorf("Tokens(%v) = %d, want %d", c.target, got, c.tokens)
			}
			if got := sc.Deadline(c.predict, 2*time.Second); math.Abs(float64(got-c.deadline)) > 0.01*float64(c.deadline) {
				t.Errorf("Deadline(%d) = %v, want %v", c.predict, got, c.deadline)
			}
		})
	}
}
