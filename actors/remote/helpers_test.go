package remote

// Test helpers of the engine's own tests (package actors) that the remote
// tests need too; an internal test of actors cannot share them without an
// import cycle, so the few needed are repeated here.

import (
	"bytes"
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/modelgen"
	"cohort/model/qwen35"
	"cohort/model/sample"
	"cohort/model/tokenizer"
	"cohort/nccl"
)

// chaosDeadline is the step deadline of the failure tests.
var chaosDeadline = map[bool]time.Duration{false: time.Second, true: 4 * time.Second}[raceEnabled]

func cpuBackends(threads int) actors.BackendFactory {
	return func(_ model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		return cpu.New(cpu.Options{Comm: comm, Threads: threads}), nil
	}
}

type testModel struct {
	ck  *model.Checkpoint
	tok *tokenizer.Tokenizer
	be  kernels.Backend // a single-rank copy for reference runs
	m   model.Model
}

func openPreset(t testing.TB, preset string) testModel {
	t.Helper()
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets[preset]); err != nil {
		t.Fatal(err)
	}
	return openDir(t, dir)
}

func openDir(t testing.TB, dir string) testModel {
	t.Helper()
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	return testModel{ck: ck, tok: tok, be: be, m: m}
}

func startEngine(t testing.TB, tm testModel, tp int, mutate func(*actors.Config)) *actors.Engine {
	t.Helper()
	cfg := actors.Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: tp, NewBackend: cpuBackends(1),
		Capacity:         model.CapacityInput{Budget: 64 << 20, ElemBytes: 4, PageSize: 16, MaxSeqs: 64, MaxModelLen: 1024},
		MaxPrefillTokens: 256, MaxRows: 64}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func mustSubmit(t testing.TB, e *actors.Engine, r actors.Request) *actors.Stream {
	t.Helper()
	s, err := e.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// collect reads a stream to its end.
func collect(t testing.TB, s *actors.Stream) (ids []int32, text string, last actors.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if err == io.EOF {
			return ids, text, last
		}
		if err != nil {
			t.Errorf("stream: %v", err)
			return ids, text, last
		}
		if ev.HasToken {
			ids = append(ids, ev.Token)
		}
		text += ev.Text
		last = ev
	}
}

// aloneTokens generates with a Session and the same sampling rule: the
// tokens a request gets when run alone.
func aloneTokens(t testing.TB, tm testModel, r actors.Request) []int32 {
	t.Helper()
	s := model.NewSession(tm.be, tm.m, len(r.Prompt)+r.MaxTokens)
	logits, err := s.Step(r.Prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for i := 0; i < r.MaxTokens; i++ {
		id := sample.Pick(logits, r.Params, i, 0).Token.ID
		out = append(out, id)
		if slices.Contains(tm.ck.Config.EOS, id) || i+1 == r.MaxTokens {
			break
		}
		if logits, err = s.Step([]int32{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func mixedRequests(n, vocab int) []actors.Request {
	reqs := make([]actors.Request, n)
	x := uint32(12345)
	for i := range reqs {
		plen := []int{1, 3, 17, 40, 64, 65, 90}[i%7]
		prompt := make([]int32, plen)
		for j := range prompt {
			x = x*1664525 + 1013904223
			prompt[j] = int32(x>>8) % int32(vocab-16) // stay clear of the special tokens
		}
		reqs[i] = actors.Request{Prompt: prompt, MaxTokens: 4 + i%9}
		if i%2 == 1 {
			reqs[i].Params = sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(1000 + i)}
		}
	}
	return reqs
}

// captureLog sends the standard logger to a buffer until the test ends.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	saved := log.Writer()
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(saved) })
	return &buf
}

// --- benchmarks ---

// echoArch is Qwen3.5's weight declaration with a forward pass that does no
// compute (as in actors' overhead benchmark): serving it measures what the
// messages cost per step.
type echoArch struct{ qwen35.Arch }

type echoModel struct {
	vocab int
}

// echoState is the echo model's state: there is none to keep.
type echoState struct{}

func (echoState) Reset(int) {}

func init() { model.MustRegister("CohortEchoForBenchmarks", echoArch{}) }

func (echoArch) Build(c *model.Config, _ model.Shard, _ map[string]kernels.Tensor) (model.Model, error) {
	return &echoModel{vocab: c.VocabSize}, nil
}

func (m *echoModel) NewState(kernels.Backend, int, int, int) model.State { return echoState{} }

func (m *echoModel) Forward(be kernels.Backend, _ model.State, _ []int32, _ *kernels.Batch, rows []int) (kernels.Tensor, error) {
	logits := make([]float32, len(rows)*m.vocab)
	for i := range rows {
		logits[i*m.vocab+(i%m.vocab)] = 5
	}
	return be.Upload(logits, len(rows), m.vocab), nil
}

// presetModel opens a preset (echo: the tiny preset with the echo forward).
func presetModel(b testing.TB, preset string) testModel {
	if preset != "echo" {
		return openPreset(b, preset)
	}
	tm := openPreset(b, "tiny")
	cfgPath := filepath.Join(tm.ck.Dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	edited := strings.Replace(string(raw), "Qwen3_5ForConditionalGeneration", "CohortEchoForBenchmarks", 1)
	if err := os.WriteFile(cfgPath, []byte(edited), 0o644); err != nil {
		b.Fatal(err)
	}
	return openDir(b, tm.ck.Dir)
}

func benchRequests(n, maxTokens int) []actors.Request {
	reqs := make([]actors.Request, n)
	for i := range reqs {
		prompt := make([]int32, 16)
		for j := range prompt {
			prompt[j] = int32((i*131 + j*7) % 250)
		}
		reqs[i] = actors.Request{Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true}
	}
	return reqs
}

var benchCapacity = model.CapacityInput{Budget: 1 << 30, ElemBytes: 4, PageSize: 16, MaxSeqs: 64, MaxModelLen: 4096}

type result struct {
	elapsed time.Duration
	steps   int
	tokens  int
}

// runEngineWith starts an engine with cfg and times reqs through it, b.N
// times, checking that each request gets all its tokens.
func runEngineWith(b *testing.B, cfg actors.Config, reqs []actors.Request) result {
	e, err := actors.Start(context.Background(), cfg)
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
				if ids, _, _ := collect(b, s); len(ids) != r.MaxTokens {
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
	b.ReportMetric(float64(res.tokens)/res.elapsed.Seconds(), "tok/s")
	b.ReportMetric(res.elapsed.Seconds()*1e6/float64(res.steps), "µs/step")
	return res
}
