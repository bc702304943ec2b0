package qwen3_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/nccl"
)

// tpGroup is a model sharded over in-process CPU ranks, running one
// sequence.
type tpGroup struct {
	bes    []kernels.Backend
	models []model.Model
	states []model.State
	cached int
}

func loadTP(t *testing.T, ck *model.Checkpoint, size int) *tpGroup {
	t.Helper()
	g, err := nccl.NewGroup(size)
	if err != nil {
		t.Fatal(err)
	}
	tg := &tpGroup{}
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

// step runs one step of the sequence on every rank concurrently (they meet
// in the collectives) and returns each rank's logits of every fed position.
func (tg *tpGroup) step(t *testing.T, ids []int32) [][]float32 {
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

// greedy continues greedily for n tokens from the last position of logits.
func (tg *tpGroup) greedy(t *testing.T, logits []float32, n int) []int32 {
	vocab := len(logits) / tg.cached
	last := logits[len(logits)-vocab:]
	var out []int32
	for len(out) < n {
		id := int32(argmax(last))
		out = append(out, id)
		last = tg.step(t, []int32{id})[0]
	}
	return out
}

// TestTensorParallelMatchesSingle: TP=2 and TP=4 (KV heads replicated at
// 4) give every rank logits within 1e-4 of TP=1, and the same greedy
// continuation through prefill then decode.
func TestTensorParallelMatchesSingle(t *testing.T) {
	ck := openTiny(t)
	ids := prompt(100, ck.Config.VocabSize, 3)
	single := loadTP(t, ck, 1)
	want := single.step(t, ids)[0]
	wantGreedy := single.greedy(t, want, 12)
	for _, size := range []int{2, 4} {
		t.Run(fmt.Sprintf("tp=%d", size), func(t *testing.T) {
			tg := loadTP(t, ck, size)
			got := tg.step(t, ids)
			for r := range got {
				d := 0.0
				for i := range want {
					d = math.Max(d, math.Abs(float64(got[r][i]-want[i])))
				}
				if d > 1e-4 {
					t.Fatalf("rank %d: max |Δlogit| vs TP=1 = %.3g > 1e-4", r, d)
				}
			}
			if g := tg.greedy(t, got[0], 12); !slices.Equal(g, wantGreedy) {
				t.Fatalf("greedy: TP=%d %v, TP=1 %v", size, g, wantGreedy)
			}
		})
	}
}

func TestTensorParallelDegreeErrors(t *testing.T) {
	ck := openTiny(t)
	for _, tt := range []struct {
		size int
		want string
	}{
		{3, "tensor-parallel degree 3 does not divide num_attention_heads = 4"},
		{8, "tensor-parallel degree 8 does not divide num_attention_heads = 4"},
	} {
		_, err := ck.Load(cpu.New(cpu.Options{}), model.Shard{Rank: 0, Size: tt.size})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TP=%d: %v, want %q", tt.size, err, tt.want)
		}
	}
}
