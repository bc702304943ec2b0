package actors

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/planner"
	"cohort/internal/testmodels/servetest"
	"cohort/kernels/cpu"
	"cohort/model"
)

var benchModels sync.Map // benchmark name/preset -> *testModel

// presetModel loads a preset once per test binary.
func presetModel(b *testing.B, preset string) testModel {
	// The files and the open checkpoint live as long as the benchmark that
	// made them (b.TempDir, b.Cleanup), so the cache is per benchmark.
	key := b.Name() + "/" + preset
	if tm, ok := benchModels.Load(key); ok {
		return *tm.(*testModel)
	}
	var tm testModel
	if preset == "echo" {
		tm = fromServe(servetest.OpenEcho(b)) // no compute: what the engine costs per step
	} else {
		tm = openPreset(b, preset)
	}
	benchModels.Store(key, &tm)
	return tm
}

func benchRequests(n, maxTokens int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		prompt := make([]int32, 16)
		for j := range prompt {
			prompt[j] = int32((i*131 + j*7) % 250)
		}
		reqs[i] = Request{Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true}
	}
	return reqs
}

var benchCapacity = model.CapacityInput{Budget: 1 << 30, ElemBytes: 4, PageSize: 16, MaxSeqs: 256, MaxModelLen: 4096}

// BenchmarkServe compares the actor engine with a direct-call baseline that
// runs the same planner and the same steps in a plain loop, at 1, 8 and 32
// concurrent requests (TP=1). On the small preset it shows throughput. The
// echo model computes nothing, so there the difference per step is the
// actor overhead (messages, mailboxes, executor hand-off, request actors).
func BenchmarkServe(b *testing.B) {
	for _, preset := range []string{"echo", "tiny", "small"} {
		maxTokens := map[string]int{"echo": 256, "tiny": 64, "small": 8}[preset]
		conc := []int{1, 8, 32}
		if preset == "echo" {
			conc = append(conc, 128, 256) // the engine's own cost at the GPU's batch sizes
		}
		b.Run(preset, func(b *testing.B) { benchServe(b, presetModel(b, preset), maxTokens, conc) })
	}
}

func benchServe(b *testing.B, tm testModel, maxTokens int, concs []int) {
	for _, conc := range concs {
		var direct, engine result
		b.Run(fmt.Sprintf("direct/conc=%d", conc), func(b *testing.B) {
			direct = runDirect(b, tm, benchRequests(conc, maxTokens))
		})
		b.Run(fmt.Sprintf("actors/conc=%d", conc), func(b *testing.B) {
			engine = runEngine(b, tm, benchRequests(conc, maxTokens))
			if direct.steps > 0 && engine.steps > 0 {
				over := (engine.elapsed.Seconds()/float64(engine.steps) - direct.elapsed.Seconds()/float64(direct.steps)) * 1e6
				b.ReportMetric(over, "overhead-µs/step")
				b.ReportMetric(engine.tokPerSec()/direct.tokPerSec(), "×direct")
			}
		})
	}
}

type result struct {
	elapsed time.Duration
	steps   int
	tokens  int
}

func (r result) tokPerSec() float64 { return float64(r.tokens) / r.elapsed.Seconds() }

func (r result) report(b *testing.B) {
	b.ReportMetric(r.tokPerSec(), "tok/s")
	b.ReportMetric(r.elapsed.Seconds()*1e6/float64(r.steps), "µs/step")
}

func runEngine(b *testing.B, tm testModel, reqs []Request) result {
	return runEngineWith(b, Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: 1, NewBackend: cpuBackends(0),
		Capacity: benchCapacity, MaxPrefillTokens: 512, MaxRows: 256}, reqs)
}

// runEngineWith starts an engine with cfg and times reqs through it, b.N
// times, checking that each request gets all its tokens.
func runEngineWith(b *testing.B, cfg Config, reqs []Request) result {
	e, err := Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var res result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before, _ := e.Stats(context.Background())
		start := time.Now()
		var wg sync.WaitGroup
		for _, r := range reqs {
			s := mustSubmit(b, e, r)
			wg.Go(func() {
				ids, _, _ := collect(b, s)
				if len(ids) != r.MaxTokens {
					b.Errorf("got %d tokens, want %d", len(ids), r.MaxTokens)
				}
			})
		}
		wg.Wait()
		res.elapsed += time.Since(start)
		after, _ := e.Stats(context.Background())
		res.steps += int(after.Step - before.Step)
		res.tokens += len(reqs) * reqs[0].MaxTokens
	}
	res.report(b)
	return res
}

// runDirect drives the scheduler's logic and the rank's step function in a
// plain loop: no actors, no messages, no executor thread.
func runDirect(b *testing.B, tm testModel, reqs []Request) result {
	be := cpu.New(cpu.Options{})
	m, err := tm.ck.Load(be, model.Single)
	if err != nil {
		b.Fatal(err)
	}
	caps, err := tm.ck.PlanCapacity(model.Single, benchCapacity)
	if err != nil {
		b.Fatal(err)
	}
	st := m.NewState(be, caps.Slots, caps.Pages, caps.PageSize)
	var res result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := planner.New(planner.Config{MaxPrefillTokens: 512, MaxRows: 256, Slots: caps.Slots,
			KVPages: caps.Pages, PageSize: caps.PageSize, MaxModelLen: benchCapacity.MaxModelLen})
		if err != nil {
			b.Fatal(err)
		}
		s := &scheduler{cfg: Config{Checkpoint: tm.ck}, plan: p, live: map[planner.RequestID]*liveRequest{}}
		seqs := newSeqCache(true)
		start := time.Now()
		for j := range reqs {
			r := reqs[j]
			r.ID = planner.RequestID(j + 1)
			if err := p.Add(planner.Request{ID: r.ID, PromptLen: len(r.Prompt), MaxNewTokens: r.MaxTokens}); err != nil {
				b.Fatal(err)
			}
			s.live[r.ID] = &liveRequest{req: &r, out: newCompletion(&r, nil)}
		}
		for {
			step := s.nextStep(nil, 0)
			if step == nil {
				break
			}
			results, err := executeStep(be, m, st, seqs, step, true, nil)
			if err != nil {
				b.Fatal(err)
			}
			f := s.inflight
			f.results, s.inflight = results, nil
			s.record(f, func(*actor.PID, requestMessage) { res.tokens++ })
			res.steps++
		}
		res.elapsed += time.Since(start)
	}
	res.report(b)
	return res
}
