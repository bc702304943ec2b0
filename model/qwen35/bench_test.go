package qwen35_test

import (
	"os"
	"sync"
	"testing"
	"time"

	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/modelgen"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
)

// The benchmarks run the `small` preset (vocab 8192, hidden 1024, 4 layers:
// 3 GDN + 1 gated attention, about 91M parameters, 364 MB in f32): large
// enough that the matmuls dominate as they do in a real model, small enough
// to generate, load and run on two cores in seconds.
var small struct {
	once sync.Once
	be   *cpu.Backend
	m    model.Model
	cfg  *model.Config
	load time.Duration // generate + open + load
	err  error
}

// smallModel generates the small preset once per process and loads it on a
// CPU rank. The loaded weights are copies, so the directory is removed at once.
func smallModel(b *testing.B) (*cpu.Backend, model.Model, *model.Config) {
	b.Helper()
	small.once.Do(func() {
		start := time.Now()
		dir, err := os.MkdirTemp("", "cohort-bench-small-")
		if err != nil {
			small.err = err
			return
		}
		defer os.RemoveAll(dir)
		if small.err = modelgen.Write(dir, modelgen.Presets["small"]); small.err != nil {
			return
		}
		ck, err := model.Open(dir)
		if err != nil {
			small.err = err
			return
		}
		defer ck.Close()
		small.be = cpu.New(cpu.Options{})
		small.m, small.err = ck.Load(small.be, model.Single)
		small.cfg = ck.Config
		small.load = time.Since(start)
		b.Logf("small preset generated and loaded in %v (once per process)", small.load.Round(time.Millisecond))
	})
	if small.err != nil {
		b.Fatalf("small preset: %v", small.err)
	}
	return small.be, small.m, small.cfg
}

// BenchmarkPrefill feeds a 128-token prompt through a fresh session in one step.
func BenchmarkPrefill(b *testing.B) {
	be, m, cfg := smallModel(b)
	const n = 128
	ids := archtest.Prompt(n, cfg.VocabSize, 3)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := model.NewSession(be, m, n)
		b.StartTimer()
		if _, err := s.Step(ids, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkDecode measures greedy decode after a 32-token prefill and one
// untimed warm-up step; each op is one decode step. batch=1 is
// one sequence through model.Session; batch=8 decodes 8 sequences together,
// one Forward call per step over a flat batch of 8 one-token rows, the way
// the scheduler batches decode. Both read every weight once per step, so the
// ratio shows how much of batch=1's time is weight traffic rather than math.
func BenchmarkDecode(b *testing.B) {
	const prefill = 32
	var batch1 float64 // tok/s of batch=1 in this run (0 if filtered out)
	b.Run("batch=1", func(b *testing.B) {
		be, m, cfg := smallModel(b)
		s := model.NewSession(be, m, prefill+1+b.N)
		logits, err := s.Step(archtest.Prompt(prefill, cfg.VocabSize, 4), false)
		if err != nil {
			b.Fatal(err)
		}
		if logits, err = s.Step([]int32{int32(sample.Argmax(logits))}, false); err != nil { // warm-up step
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if logits, err = s.Step([]int32{int32(sample.Argmax(logits))}, false); err != nil {
				b.Fatal(err)
			}
		}
		batch1 = float64(b.N) / b.Elapsed().Seconds()
		b.ReportMetric(batch1, "tok/s")
	})
	b.Run("batch=8", func(b *testing.B) {
		be, m, cfg := smallModel(b)
		const seqs, pageSize = 8, 16
		pagesPer := (prefill + 1 + b.N + pageSize - 1) / pageSize
		st := m.NewState(be, seqs, seqs*pagesPer, pageSize)
		pages := make([][]int32, seqs)
		for i := range pages {
			for p := range pagesPer {
				pages[i] = append(pages[i], int32(i*pagesPer+p))
			}
		}
		// Prefill all 8 prompts in one flat batch of 8×32 rows.
		var tokens []int32
		pb := &kernels.Batch{}
		rows := make([]int, seqs)
		for i := range seqs {
			pb.Seqs = append(pb.Seqs, kernels.Seq{Slot: i, Start: len(tokens), Len: prefill, Pages: pages[i]})
			for j := range prefill {
				pb.Positions = append(pb.Positions, int32(j))
			}
			tokens = append(tokens, archtest.Prompt(prefill, cfg.VocabSize, 20+i)...)
			rows[i] = len(tokens) - 1
		}
		logits, err := m.Forward(be, st, tokens, pb, rows)
		if err != nil {
			b.Fatal(err)
		}
		next := greedyRows(be.Download(logits), cfg.VocabSize)
		for i := range rows {
			rows[i] = i
		}
		// decode runs one step for all 8 sequences at position pos.
		decode := func(pos int) {
			db := &kernels.Batch{Positions: make([]int32, seqs)}
			for i := range seqs {
				db.Positions[i] = int32(pos)
				db.Seqs = append(db.Seqs, kernels.Seq{Slot: i, Start: i, Len: 1, Cached: pos, Pages: pages[i]})
			}
			logits, err := m.Forward(be, st, next, db, rows)
			if err != nil {
				b.Fatal(err)
			}
			next = greedyRows(be.Download(logits), cfg.VocabSize)
		}
		decode(prefill) // warm-up step
		b.ResetTimer()
		for step := 0; step < b.N; step++ {
			decode(prefill + 1 + step)
		}
		agg := float64(seqs*b.N) / b.Elapsed().Seconds()
		b.ReportMetric(agg, "tok/s")
		if batch1 > 0 {
			b.ReportMetric(agg/batch1, "x_vs_batch1")
		}
	})
}

// greedyRows returns the argmax of each vocab-wide row of logits.
func greedyRows(logits []float32, vocab int) []int32 {
	ids := make([]int32, len(logits)/vocab)
	for i := range ids {
		ids[i] = int32(sample.Argmax(logits[i*vocab : (i+1)*vocab]))
	}
	return ids
}
