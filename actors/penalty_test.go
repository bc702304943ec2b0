package actors

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"cohort/model/sample"
)

// penalizedRequests are requests whose draws depend on their history:
// presence, frequency and repetition penalties, greedy and seeded, with a
// logit bias, over prompts long enough to be prefilled in chunks.
func penalizedRequests(vocab int) []Request {
	params := []sample.Params{
		{PresencePenalty: 1.5},
		{FrequencyPenalty: 1, Temperature: 0.9, Seed: 11},
		{RepetitionPenalty: 1.8},
		{RepetitionPenalty: 1.3, PresencePenalty: -0.5, FrequencyPenalty: 0.7, Temperature: 0.7, TopK: 30, Seed: 12,
			LogitBias: []sample.TokenBias{{ID: 5, Bias: 3}}},
	}
	var reqs []Request
	for i, p := range params {
		prompt := make([]int32, 20+17*i)
		for j := range prompt {
			prompt[j] = int32((i*97 + j*31) % (vocab - 16))
		}
		reqs = append(reqs, Request{Prompt: prompt, MaxTokens: 12, IgnoreEOS: true, Params: p})
	}
	return reqs
}

// TestPenaltiesMatchAlone: penalized requests, concurrent on few slots
// with small prefill chunks, get the tokens each gets alone, where the
// penalties see the whole sequence at every draw: the ranks' incremental
// history (kept from each step's new tokens) is the same history.
func TestPenaltiesMatchAlone(t *testing.T) {
	tm := openPreset(t, "tiny")
	reqs := penalizedRequests(tm.tok.VocabSize())
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp=%d", tp), func(t *testing.T) {
			e := startEngine(t, tm, tp, func(c *Config) { c.Capacity.MaxSeqs = 2; c.MaxPrefillTokens = 16 })
			got := make([][]int32, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				s := mustSubmit(t, e, r)
				wg.Go(func() { got[i], _, _ = collect(t, s) })
			}
			wg.Wait()
			for i, r := range reqs {
				if want := aloneTokens(t, tm, r); !slices.Equal(got[i], want) {
					t.Errorf("request %d (%+v): got %v, alone %v", i, r.Params, got[i], want)
				}
			}
		})
	}
}

// TestPenaltiesSurviveReplay: after a rank fails mid-generation, the
// rebuilt group's ranks know nothing of the requests; their admissions are
// sent again and the penalty history is rebuilt from the re-prefilled
// tokens, so every penalized request ends with its fault-free tokens.
func TestPenaltiesSurviveReplay(t *testing.T) {
	tm := openPreset(t, "tiny")
	reqs := penalizedRequests(tm.tok.VocabSize())
	e, _ := chaosEngine(t, tm, 2, nil)
	if err := e.InjectFault(context.Background(), Fault{Kind: FaultError, Rank: 0, Skip: 4}); err != nil {
		t.Fatal(err)
	}
	got := make([][]int32, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		s := mustSubmit(t, e, r)
		wg.Go(func() { got[i], _, _ = collect(t, s) })
	}
	wg.Wait()
	st, _ := e.SupervisionStats(context.Background())
	if st.Replayed == 0 {
		t.Fatalf("no request was replayed (failures %v)", st.Failures)
	}
	for i, r := range reqs {
		if want := aloneTokens(t, tm, r); !slices.Equal(got[i], want) {
			t.Errorf("request %d (%+v): %v after replay, %v alone", i, r.Params, got[i], want)
		}
	}
}
