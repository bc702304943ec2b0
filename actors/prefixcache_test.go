package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"cohort/model/sample"
)

// prefixWorkload draws requests that share prefixes the way chat traffic
// does: a few system prompts with questions of their own, the same prompt
// again, and (nextTurns) each conversation's next turn, which repeats its
// whole previous sequence. Greedy, seeded and penalized requests and one
// with prompt logprobs (which must not resume) are mixed.
type prefixWorkload struct {
	r      *rand.Rand
	vocab  int
	system [][]int32
}

func newPrefixWorkload(seed uint64, vocab int) *prefixWorkload {
	w := &prefixWorkload{r: rand.New(rand.NewPCG(seed, 0x9e37)), vocab: vocab}
	for _, n := range []int{40, 57, 90} {
		w.system = append(w.system, w.tokens(n))
	}
	return w
}

func (w *prefixWorkload) tokens(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(w.r.IntN(w.vocab - 16)) // clear of the special tokens
	}
	return out
}

func (w *prefixWorkload) params(i int) (sample.Params, bool) {
	switch i % 5 {
	case 1:
		return sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(100 + i)}, false
	case 2:
		return sample.Params{PresencePenalty: 1.2, FrequencyPenalty: 0.4}, false
	case 3:
		return sample.Params{RepetitionPenalty: 1.3, Temperature: 0.7, Seed: uint64(200 + i)}, false
	case 4:
		return sample.Params{}, i == 4 // one request with prompt logprobs
	}
	return sample.Params{}, false
}

// firstTurns are n requests on the system prompts, every fourth one the
// same prompt as the one before it.
func (w *prefixWorkload) firstTurns(n int) []Request {
	var reqs []Request
	for i := range n {
		sys := w.system[i%len(w.system)]
		prompt := append(slices.Clone(sys), w.tokens(1+w.r.IntN(30))...)
		if i%4 == 3 {
			prompt = slices.Clone(reqs[i-1].Prompt)
		}
		p, plp := w.params(i)
		reqs = append(reqs, Request{Prompt: prompt, MaxTokens: 4 + w.r.IntN(10), IgnoreEOS: true, Params: p,
			PromptLogprobs: plp, Boundaries: []int{len(sys)}})
	}
	return reqs
}

// nextTurns continues each request: its prompt, its output and a new
// question, with the template's boundaries at the end of the system part
// and of the earlier turn.
func (w *prefixWorkload) nextTurns(reqs []Request, outs [][]int32) []Request {
	next := make([]Request, len(reqs))
	for i, r := range reqs {
		prev := append(slices.Clone(r.Prompt), outs[i]...)
		next[i] = r
		next[i].Prompt = append(prev, w.tokens(1+w.r.IntN(20))...)
		next[i].Boundaries = []int{r.Boundaries[0], len(prev)}
		next[i].PromptLogprobs = false
	}
	return next
}

// runAll submits reqs at once and returns each one's tokens and cached
// prompt tokens.
func runAll(t *testing.T, e *Engine, reqs []Request) ([][]int32, []int) {
	t.Helper()
	streams := make([]*Stream, len(reqs))
	for i, r := range reqs {
		streams[i] = mustSubmit(t, e, r)
	}
	got, cached := make([][]int32, len(reqs)), make([]int, len(reqs))
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			var last Event
			got[i], _, last = collect(t, streams[i])
			if last.Err != nil {
				t.Errorf("request %d: %v", i, last.Err)
			}
			cached[i] = last.Usage.CachedTokens
		})
	}
	wg.Wait()
	return got, cached
}

// TestPrefixCacheMatchesNoCache is the cache's acceptance test on CPU
// ranks: random shared-prefix workloads (two waves: first turns, then next
// turns) give every greedy, seeded and penalized request exactly its tokens
// without the cache, at TP 1, 2 and 4, with chunked prefill and mixed
// steps on few slots; and the cache serves a good part of the second
// wave's prompts.
func TestPrefixCacheMatchesNoCache(t *testing.T) {
	tm := openPreset(t, "tiny")
	small := func(c *Config) { c.Capacity.MaxSeqs, c.MaxPrefillTokens = 4, 48 }
	seeds, tps := []uint64{1, 2}, []int{1, 2, 4}
	if raceEnabled {
		t.Skip("about 25 s under the race detector; TestPrefixCacheReplay runs the cache's concurrent paths (ranks in parallel, a failure) there")
	}
	for _, seed := range seeds {
		w := newPrefixWorkload(seed, tm.tok.VocabSize())
		first := w.firstTurns(12)
		ref := startEngine(t, tm, 1, func(c *Config) { small(c); c.DisablePrefixCache = true })
		want1, none := runAll(t, ref, first)
		second := w.nextTurns(first, want1)
		want2, _ := runAll(t, ref, second)
		ref.Close()
		if slices.Max(none) != 0 {
			t.Fatalf("cached tokens %v without the cache", none)
		}
		for _, tp := range tps {
			t.Run(fmt.Sprintf("seed=%d/tp=%d", seed, tp), func(t *testing.T) {
				e := startEngine(t, tm, tp, small)
				got1, _ := runAll(t, e, first)
				got2, cached := runAll(t, e, second)
				for i := range first {
					if !slices.Equal(got1[i], want1[i]) {
						t.Errorf("first turn %d (%+v): %v with the cache, %v without", i, first[i].Params, got1[i], want1[i])
					}
					if !slices.Equal(got2[i], want2[i]) {
						t.Errorf("next turn %d (%+v, %d cached): %v with the cache, %v without", i, second[i].Params, cached[i], got2[i], want2[i])
					}
				}
				st, err := e.Stats(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				hits, prompt := 0, 0
				for i, r := range second {
					hits, prompt = hits+cached[i], prompt+len(r.Prompt)
				}
				t.Logf("next turns: %d of %d prompt tokens cached; %v", hits, prompt, st)
				if 2*hits < prompt || st.PrefixHits == 0 || st.Running != 0 || st.FreePages != e.Info().KVPages {
					t.Errorf("next turns: %d of %d prompt tokens cached; after the runs: %v", hits, prompt, st)
				}
			})
		}
	}
}

// TestPrefixCacheReplay: a rank fails while shared-prefix requests run.
// The rebuilt group's memory holds nothing of the old one, so its cache
// starts empty (a stale restore would change the tokens); the replayed
// requests resume from what the new group caches, and every request ends
// with its fault-free tokens.
func TestPrefixCacheReplay(t *testing.T) {
	tm := openPreset(t, "tiny")
	w := newPrefixWorkload(3, tm.tok.VocabSize())
	reqs := w.firstTurns(8)
	for i := range reqs {
		reqs[i].PromptLogprobs = false
	}
	small := func(c *Config) { c.Capacity.MaxSeqs, c.MaxPrefillTokens = 4, 48 }
	ref := startEngine(t, tm, 1, func(c *Config) { small(c); c.DisablePrefixCache = true })
	want, _ := runAll(t, ref, reqs)
	ref.Close()

	e, _ := chaosEngine(t, tm, 2, small)
	warm, _ := runAll(t, e, reqs[:3]) // the system prompts are cached
	for i := range warm {
		if !slices.Equal(warm[i], want[i]) {
			t.Fatalf("warm-up request %d: %v, want %v", i, warm[i], want[i])
		}
	}
	if err := e.InjectFault(context.Background(), Fault{Kind: FaultError, Rank: 1, Skip: 3}); err != nil {
		t.Fatal(err)
	}
	got, _ := runAll(t, e, reqs)
	sup, _ := e.SupervisionStats(context.Background())
	st, _ := e.Stats(context.Background())
	t.Logf("failures %v, replayed %d; %v", sup.Failures, sup.Replayed, st)
	if sup.Rebuilds == 0 {
		t.Fatalf("no rebuild (failures %v)", sup.Failures)
	}
	for i := range reqs {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d (%+v): %v after the failure, %v fault-free", i, reqs[i].Params, got[i], want[i])
		}
	}
	if st.PrefixHits == 0 {
		t.Errorf("nothing resumed from the cache: %v", st)
	}
}

// TestPrefixCacheFullKeepsCapacity: a cache filled past its pages and
// snapshot places (so both evict) lowers no capacity: afterwards every page
// is free or idle, and four requests that need every page between them run
// at once (no preemption) with their tokens alone.
func TestPrefixCacheFullKeepsCapacity(t *testing.T) {
	if raceEnabled {
		t.Skip("about 50 s under the race detector; it checks accounting, which the unit run covers")
	}
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, func(c *Config) { c.Capacity.Budget, c.Capacity.MaxSeqs = 4<<20, 4 })
	info := e.Info()
	w := newPrefixWorkload(5, tm.tok.VocabSize())
	var fill []Request
	for range 40 {
		fill = append(fill, Request{Prompt: w.tokens(64), MaxTokens: 4, IgnoreEOS: true})
	}
	runAll(t, e, fill)
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("info %+v; after filling: %v", info, st)
	if st.FreePages != info.KVPages || st.CachedPages == 0 || st.Snapshots != info.Snapshots || st.SnapshotEvictions == 0 {
		t.Fatalf("after filling the cache: %v (info %+v)", st, info)
	}
	per := info.KVPages / 4 * info.PageSize
	var big []Request
	for range 4 {
		big = append(big, Request{Prompt: w.tokens(per - 10), MaxTokens: 10, IgnoreEOS: true})
	}
	got, _ := runAll(t, e, big)
	for i, r := range big {
		if want := aloneTokens(t, tm, r); !slices.Equal(got[i], want) {
			t.Errorf("request %d: %v, alone %v", i, got[i], want)
		}
	}
	if after, _ := e.Stats(context.Background()); after.Preemptions != st.Preemptions {
		t.Errorf("%d preemptions while four requests that fit together ran: %v", after.Preemptions-st.Preemptions, after)
	}
}
