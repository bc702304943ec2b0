package sample

import (
	"math"
	"slices"
	"testing"
)

// drawLogits is what Draw samples from, written as Draw writes it: the
// penalties (Penalize), then the logit bias, then the ban of the stops.
func drawLogits(logits []float32, p Params, step int, h *History) []float32 {
	work := Penalize(logits, p, h)
	for _, b := range p.LogitBias {
		if int(b.ID) < len(work) {
			work[b.ID] += float32(b.Bias)
		}
	}
	if p.bansStops(step) {
		for _, id := range p.StopIDs {
			if id >= 0 && int(id) < len(work) {
				work[id] = float32(math.Inf(-1))
			}
		}
	}
	return work
}

// TestAdjustmentsMatchDraw: applying Adjustments to the logits gives, bit
// for bit, the logits Draw samples from, for every kind of adjustment and
// their overlaps on one token; the ids come ascending and distinct.
func TestAdjustmentsMatchDraw(t *testing.T) {
	const vocab = 64
	logits := normalLogits(vocab, 4, 5, 6)
	logits[3], logits[4], logits[5] = 0, float32(math.Copysign(0, -1)), float32(math.Inf(-1))
	prompt := []int32{1, 2, 3, 4, 5, 70, -1}
	generated := []int32{2, 2, 2, 7, 8, 8, 63, 99}
	bias := []TokenBias{{ID: 2, Bias: 1.5}, {ID: 9, Bias: -100}, {ID: 40, Bias: 0.1}, {ID: 64, Bias: 3}}
	stops := []int32{7, 9, 9, 63, 200}
	for _, tc := range []struct {
		name    string
		p       Params
		step    int
		history bool
		ids     int // how many adjustments
	}{
		{"none", Params{}, 0, false, 0},
		{"repetition", Params{RepetitionPenalty: 1.3}, 0, true, 8},
		{"repetition below 1", Params{RepetitionPenalty: 0.7}, 0, true, 8},
		{"frequency and presence", Params{FrequencyPenalty: 0.4, PresencePenalty: -0.3}, 0, true, 4},
		{"all penalties", Params{RepetitionPenalty: 1.1, FrequencyPenalty: 1.7, PresencePenalty: 0.2}, 0, true, 8},
		{"logit bias", Params{LogitBias: bias}, 0, false, 3},
		{"min tokens bans", Params{MinTokens: 3, StopIDs: stops}, 2, false, 3},
		{"min tokens reached", Params{MinTokens: 3, StopIDs: stops}, 3, false, 0},
		{"everything on one token", Params{RepetitionPenalty: 2, FrequencyPenalty: 0.5, LogitBias: bias, MinTokens: 1, StopIDs: stops}, 0, true, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h *History
			if tc.history {
				h = NewHistory(prompt, generated)
			}
			adj := Adjustments(tc.p, tc.step, h, vocab)
			if len(adj) != tc.ids {
				t.Errorf("%d adjustments, want %d: %+v", len(adj), tc.ids, adj)
			}
			if !slices.IsSortedFunc(adj, func(a, b Adjustment) int { return int(a.ID) - int(b.ID) }) {
				t.Errorf("ids not ascending: %+v", adj)
			}
			got := slices.Clone(logits)
			for i, a := range adj {
				if i > 0 && a.ID == adj[i-1].ID {
					t.Errorf("id %d twice", a.ID)
				}
				got[a.ID] = a.Apply(got[a.ID])
			}
			want := drawLogits(logits, tc.p, tc.step, h)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Errorf("logit %d: adjusted %v (%#x), Draw's %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		})
	}
}

// TestUniformIsDraws: the uniform Uniform returns is the one Draw uses:
// sampling with it over the sorted candidates gives Draw's token.
func TestUniformIsDraws(t *testing.T) {
	logits := peaky()
	for step := range 100 {
		p := Params{Temperature: 1.3, Seed: 17}
		cands, total := tempered(logits, p.Temperature)
		sortCands(cands)
		u, want := p.Uniform(step)*total, cands[len(cands)-1].id
		for _, c := range cands {
			if u -= c.p; u < 0 {
				want = c.id
				break
			}
		}
		if got := int(Draw(logits, p, step, nil, nil)); got != want {
			t.Fatalf("step %d: Draw %d, with Uniform %d", step, got, want)
		}
	}
}

// TestDrawFromIsDraw: Draw is DrawFrom of the logits with Adjustments
// applied and the step's Uniform, for every filter and adjustment, greedy
// or not: the chain a device that samples elsewhere carries out.
func TestDrawFromIsDraw(t *testing.T) {
	const vocab = 300
	logits := normalLogits(vocab, 3, 8, 9)
	h := NewHistory([]int32{4, 5, 6}, []int32{7, 7, 8, 250})
	bias := []TokenBias{{ID: 3, Bias: 4}, {ID: 100, Bias: -2}}
	for _, tc := range []struct {
		name string
		p    Params
		h    *History
	}{
		{"greedy", Params{}, nil},
		{"greedy with bias", Params{LogitBias: bias}, nil},
		{"greedy with penalties", Params{RepetitionPenalty: 1.5, FrequencyPenalty: 1}, h},
		{"temperature", Params{Temperature: 0.8}, nil},
		{"top-k", Params{Temperature: 1.2, TopK: 5}, nil},
		{"top-p", Params{Temperature: 1, TopP: 0.9}, nil},
		{"min-p", Params{Temperature: 1.5, MinP: 0.05}, nil},
		{"all filters", Params{Temperature: 0.7, TopK: 50, TopP: 0.95, MinP: 0.02}, nil},
		{"filters and adjustments", Params{Temperature: 1.1, TopK: 40, TopP: 0.8, PresencePenalty: 0.5,
			RepetitionPenalty: 1.2, LogitBias: bias, MinTokens: 50, StopIDs: []int32{3, 9}}, h},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for step := range 60 {
				tc.p.Seed = uint64(step) * 31
				work := slices.Clone(logits)
				for _, a := range Adjustments(tc.p, step, tc.h, vocab) {
					work[a.ID] = a.Apply(work[a.ID])
				}
				want := Draw(logits, tc.p, step, tc.h, nil)
				if got := DrawFrom(work, tc.p, tc.p.Uniform(step)); got != want {
					t.Fatalf("step %d: DrawFrom %d, Draw %d", step, got, want)
				}
			}
		})
	}
}
