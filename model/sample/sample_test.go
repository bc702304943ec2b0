package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func peaky() []float32 { return []float32{1, 4, 2, 3.9, -1, 0} }

// normalLogits returns n logits drawn from a normal distribution of the
// given scale by a generator seeded with (s1, s2).
func normalLogits(n int, scale float64, s1, s2 uint64) []float32 {
	r := rand.New(rand.NewPCG(s1, s2))
	logits := make([]float32, n)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * scale)
	}
	return logits
}

func TestGreedyAndLogprobs(t *testing.T) {
	r := Pick(peaky(), Params{}, 0, 3)
	if r.Token.ID != 1 {
		t.Fatalf("greedy picked %d, want 1", r.Token.ID)
	}
	sum := 0.0
	for _, lp := range LogSoftmax(peaky()) {
		sum += math.Exp(lp)
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	if len(r.Top) != 3 || r.Top[0].ID != 1 || r.Top[1].ID != 3 || r.Top[2].ID != 2 || r.Top[0].Logprob != r.Token.Logprob {
		t.Fatalf("top = %+v", r.Top)
	}
}

// TestSeededDraws: a draw depends only on (seed, step).
func TestSeededDraws(t *testing.T) {
	p := Params{Temperature: 1, Seed: 7}
	for step := 0; step < 50; step++ {
		if a, b := Pick(peaky(), p, step, 0), Pick(peaky(), p, step, 0); a.Token != b.Token {
			t.Fatalf("step %d: %v then %v", step, a.Token, b.Token)
		}
	}
	seen := map[int32]bool{}
	for step := 0; step < 200; step++ {
		seen[Pick(peaky(), p, step, 0).Token.ID] = true
	}
	if len(seen) < 3 {
		t.Fatalf("temperature 1 over 200 steps drew only %v", seen)
	}
}

func TestFilters(t *testing.T) {
	tests := []struct {
		name    string
		p       Params
		allowed map[int32]bool
	}{
		{"top-k 2", Params{Temperature: 5, TopK: 2}, map[int32]bool{1: true, 3: true}},
		{"top-p", Params{Temperature: 1, TopP: 0.5}, map[int32]bool{1: true, 3: true}},
		{"min-p", Params{Temperature: 1, MinP: 0.5}, map[int32]bool{1: true, 3: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for step := 0; step < 300; step++ {
				tt.p.Seed = uint64(step)
				if id := Pick(peaky(), tt.p, step, 0).Token.ID; !tt.allowed[id] {
					t.Fatalf("step %d drew %d", step, id)
				}
			}
		})
	}
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, -2, 1, 0}
	got := Penalize(logits, Params{RepetitionPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25}, NewHistory([]int32{1}, []int32{0, 0, 2}))
	want := []float32{2/2 - 0.5 - 0.5, -2 * 2, 1/2.0 - 0.5 - 0.25, 0}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("penalized = %v, want %v", got, want)
		}
	}
	if logits[0] != 2 {
		t.Fatal("Penalize modified its input")
	}
	// A strong presence penalty moves greedy off the repeated token.
	if id := PickWithHistory(peaky(), Params{PresencePenalty: 2}, 0, 0, NewHistory(nil, []int32{1}), nil).Token.ID; id != 3 {
		t.Fatalf("greedy with penalty picked %d, want 3", id)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		p    Params
		want string
	}{
		{Params{Temperature: -1}, "temperature"},
		{Params{Temperature: math.NaN()}, "temperature"},
		{Params{TopP: 1.5}, "top_p"},
		{Params{MinP: -0.1}, "min_p"},
		{Params{PresencePenalty: 3}, "presence_penalty"},
		{Params{FrequencyPenalty: math.NaN()}, "frequency_penalty"},
		{Params{RepetitionPenalty: -1}, "repetition_penalty"},
		{Params{LogitBias: []TokenBias{{ID: -1, Bias: 1}}}, "negative"},
		{Params{LogitBias: []TokenBias{{ID: 3, Bias: 1}, {ID: 3, Bias: 2}}}, "ascending and distinct"},
		{Params{LogitBias: []TokenBias{{ID: 4, Bias: 1}, {ID: 2, Bias: 2}}}, "ascending and distinct"},
		{Params{LogitBias: []TokenBias{{ID: 2, Bias: 101}}}, "logit_bias 101"},
		{Params{LogitBias: []TokenBias{{ID: 2, Bias: math.NaN()}}}, "logit_bias NaN"},
	}
	for _, tt := range tests {
		if err := tt.p.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want %q", tt.p, err, tt.want)
		}
	}
	if err := (Params{Temperature: 0.7, TopK: 5, TopP: 0.9, RepetitionPenalty: 1.1}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestLogitBias: a bias moves the choice (greedy and sampled) but not the
// reported logprobs, which stay the model's.
func TestLogitBias(t *testing.T) {
	logits := []float32{2, 1, 0.5, -1}
	raw := Pick(logits, Params{}, 0, 0).Token.Logprob // token 0, unbiased
	for _, tc := range []struct {
		name string
		p    Params
		want int32
	}{
		{"none", Params{}, 0},
		{"ban the best", Params{LogitBias: []TokenBias{{ID: 0, Bias: -100}}}, 1},
		{"force the worst", Params{LogitBias: []TokenBias{{ID: 3, Bias: 100}}}, 3},
		{"small nudge", Params{LogitBias: []TokenBias{{ID: 1, Bias: 1.5}}}, 1},
		{"id beyond the vocabulary ignored", Params{LogitBias: []TokenBias{{ID: 9, Bias: 100}}}, 0},
		{"forced under sampling", Params{Temperature: 1, Seed: 7, LogitBias: []TokenBias{{ID: 2, Bias: 100}}}, 2},
		{"with a penalty", Params{PresencePenalty: 2, LogitBias: []TokenBias{{ID: 1, Bias: 0.5}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for step := range 5 {
				res := PickWithHistory(logits, tc.p, step, 2, NewHistory(nil, []int32{0}), nil)
				if res.Token.ID != tc.want {
					t.Fatalf("step %d: picked %d, want %d", step, res.Token.ID, tc.want)
				}
				if res.Top[0].ID != 0 || res.Top[0].Logprob != raw {
					t.Fatalf("top alternative %+v: want token 0 with the unbiased logprob %g", res.Top[0], raw)
				}
			}
		})
	}
}

// TestMinTokens: the stop ids cannot be drawn in the first MinTokens steps,
// greedy or sampled, and can from then on; logprobs stay the model's.
func TestMinTokens(t *testing.T) {
	logits := []float32{5, 1, 0.5, -1} // token 0 (say EOS) is by far the best
	for _, temp := range []float64{0, 1} {
		p := Params{Temperature: temp, Seed: 3, MinTokens: 3, StopIDs: []int32{0, 2}}
		for step := range 6 {
			res := Pick(logits, p, step, 1)
			banned := res.Token.ID == 0 || res.Token.ID == 2
			if step < 3 && banned {
				t.Errorf("temperature %g step %d: drew stop id %d before min_tokens", temp, step, res.Token.ID)
			}
			if temp == 0 && step >= 3 && res.Token.ID != 0 {
				t.Errorf("greedy step %d: drew %d, want 0 once min_tokens is reached", step, res.Token.ID)
			}
			if res.Top[0].ID != 0 {
				t.Errorf("step %d: top alternative %+v, want the model's best token 0", step, res.Top[0])
			}
		}
	}
	if err := (Params{MinTokens: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "min_tokens") {
		t.Errorf("negative min_tokens: err = %v", err)
	}
}

// TestDrawIsPicksToken: Draw chooses exactly the token Pick reports, for
// greedy and seeded draws with penalties, biases and min_tokens.
func TestDrawIsPicksToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	hist := []int32{3, 3, 7, 250}
	for _, p := range []Params{
		{},
		{Temperature: 0.7, Seed: 5},
		{Temperature: 1.2, TopP: 0.8, TopK: 20, Seed: 6},
		{Temperature: 0.9, MinP: 0.05, Seed: 7, PresencePenalty: 1, RepetitionPenalty: 1.3},
		{LogitBias: []TokenBias{{ID: 12, Bias: 4}}, MinTokens: 2, StopIDs: []int32{argmax32(logits)}},
	} {
		for step := range 20 {
			want := PickWithHistory(logits, p, step, 0, NewHistory(hist, hist), nil).Token.ID
			if got := Draw(logits, p, step, NewHistory(hist, hist), nil); got != want {
				t.Fatalf("%+v step %d: Draw %d, Pick %d", p, step, got, want)
			}
		}
	}
}

func argmax32(x []float32) int32 { return int32(Argmax(x)) }

// TestPlainArgmax: whenever PlainArgmax holds, Draw is the Argmax of the raw
// logits; each thing that changes the logits or the rule turns it off.
func TestPlainArgmax(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	for _, tc := range []struct {
		name string
		p    Params
		step int
		want bool
	}{
		{"greedy", Params{}, 0, true},
		{"repetition 1 is off", Params{RepetitionPenalty: 1}, 0, true},
		{"temperature", Params{Temperature: 0.5}, 0, false},
		{"presence", Params{PresencePenalty: 0.5}, 0, false},
		{"frequency", Params{FrequencyPenalty: -0.5}, 0, false},
		{"repetition", Params{RepetitionPenalty: 1.2}, 0, false},
		{"logit bias", Params{LogitBias: []TokenBias{{ID: 3, Bias: 1}}}, 0, false},
		{"min tokens banning stops", Params{MinTokens: 4, StopIDs: []int32{5}}, 3, false},
		{"min tokens reached", Params{MinTokens: 4, StopIDs: []int32{5}}, 4, true},
		{"min tokens without stops", Params{MinTokens: 4}, 0, true},
	} {
		if got := tc.p.PlainArgmax(tc.step); got != tc.want {
			t.Errorf("%s: PlainArgmax = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want {
			if d, a := Draw(slices.Clone(logits), tc.p, tc.step, NewHistory([]int32{1, 2}, []int32{3}), nil), Argmax(logits); int(d) != a {
				t.Errorf("%s: Draw = %d, Argmax = %d", tc.name, d, a)
			}
		}
	}
}
