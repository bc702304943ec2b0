package archtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
)

// TPGroup is a checkpoint sharded over in-process CPU ranks, running one
// sequence.
type TPGroup struct {
	bes    []kernels.Backend
	models []model.Model
	states []model.State
	cached int
}

// LoadTP loads ck on size CPU ranks joined by an in-process group.
func LoadTP(t testing.TB, ck *model.Checkpoint, size int) *TPGroup {
	t.Helper()
	g, err := nccl.NewGroup(size)
	if err != nil {
		t.Fatal(err)
	}
	tg := &TPGroup{}
	for r := range size {
		be := cpu.New(cpu.Options{Comm: g.Comm(r), Threads: 1})
		m, err := ck.Load(be, model.Shard{Rank: r, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		tg.bes, tg.models = append(tg.bes, be), append(tg.models, m)
		tg.states = append(tg.states, m.NewState(be, 1, 64, 16))
	}
	return tg
}

// Step runs one step of the sequence on every rank concurrently (they meet
// in the collectives) and returns each rank's logits of every fed position.
func (tg *TPGroup) Step(t testing.TB, ids []int32) [][]float32 {
	t.Helper()
	n := len(ids)
	b := &kernels.Batch{Positions: make([]int32, n)}
	rows := make([]int, n)
	for i := range rows {
		rows[i], b.Positions[i] = i, int32(tg.cached+i)
	}
	pages := make([]int32, (tg.cached+n+15)/16)
	for i := range pages {
		pages[i] = int32(i)
	}
	b.Seqs = []kernels.Seq{{Len: n, Cached: tg.cached, Pages: pages}}
	out := make([][]float32, len(tg.models))
	errs := make([]error, len(tg.models))
	var wg sync.WaitGroup
	for r := range tg.models {
		wg.Go(func() {
			logits, err := tg.models[r].Forward(tg.bes[r], tg.states[r], ids, b, rows)
			if errs[r] = err; err == nil {
				out[r] = tg.bes[r].Download(logits)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	tg.cached += n
	return out
}

// Greedy continues greedily for n tokens from the last position of logits
// (rank 0's logits of the last step).
func (tg *TPGroup) Greedy(t testing.TB, logits []float32, n int) []int32 {
	vocab := len(logits) / tg.cached
	last := logits[len(logits)-vocab:]
	var out []int32
	for len(out) < n {
		id := int32(sample.Argmax(last))
		out = append(out, id)
		last = tg.Step(t, []int32{id})[0]
	}
	return out
}

// TPMatchesSingle checks that TP=2 and TP=4 give every rank logits of ids
// within 1e-4 of TP=1, and the same greedy continuation through prefill
// then decode. fits, where not nil, skips a degree that the checkpoint's
// heads do not allow. Under the race detector ids is cut to raceMaxLen.
func TPMatchesSingle(t *testing.T, ck *model.Checkpoint, ids []int32, fits func(size int) error) {
	if RaceEnabled {
		ids = ids[:min(len(ids), raceMaxLen)]
	}
	single := LoadTP(t, ck, 1)
	want := single.Step(t, ids)[0]
	wantGreedy := single.Greedy(t, want, 12)
	for _, size := range []int{2, 4} {
		t.Run(fmt.Sprintf("tp=%d", size), func(t *testing.T) {
			if fits != nil {
				if err := fits(size); err != nil {
					t.Skipf("degree does not fit this checkpoint: %v", err)
				}
			}
			tg := LoadTP(t, ck, size)
			got := tg.Step(t, ids)
			for r := range got {
				if d := MaxAbsDiff(got[r], want); d > 1e-4 {
					t.Fatalf("rank %d: max |Δlogit| vs TP=1 = %.3g > 1e-4", r, d)
				}
			}
			if g := tg.Greedy(t, got[0], 12); !slices.Equal(g, wantGreedy) {
				t.Fatalf("greedy: TP=%d %v, TP=1 %v", size, g, wantGreedy)
			}
		})
	}
}
