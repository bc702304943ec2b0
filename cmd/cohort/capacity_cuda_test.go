//go:build cuda

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/kernels"
	"cohort/kernels/cuda"
	"cohort/model"
	"cohort/nccl"
)

// The GPU tests of issue 12 item 5 (capacity): a rank measures the scratch
// of its largest step and reserves it before it sizes its state from the
// device's free memory. COHORT_CAPACITY_PRESET picks the generated model
// (default small: head dim 256 and 128-wide GDN heads, as the 4B, with a
// 32k context; 4b-shape is the shape, 8 GB to generate) and
// COHORT_CAPACITY_TP the ranks (default 1; that many GPUs).

// capacityPreset is the model the capacity tests generate.
func capacityPreset() string {
	if p := os.Getenv("COHORT_CAPACITY_PRESET"); p != "" {
		return p
	}
	return "small"
}

// capacityTP is the tensor-parallel degree of the capacity tests.
func capacityTP(t *testing.T) int {
	tp := 1
	if s := os.Getenv("COHORT_CAPACITY_TP"); s != "" {
		var err error
		if tp, err = strconv.Atoi(s); err != nil || tp < 1 {
			t.Fatalf("COHORT_CAPACITY_TP=%q", s)
		}
	}
	return tp
}

// TestServeCUDANoMemoryFlags: `cohort serve --device cuda` with no memory
// flag plans from the device and advertises its slots, pages and the
// scratch it reserved, in its banner and on /v1/models.
func TestServeCUDANoMemoryFlags(t *testing.T) {
	dir, tp := presetDir(t, capacityPreset()), strconv.Itoa(capacityTP(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(urlWriter, 4)
	done := make(chan error, 1)
	go func() {
		done <- dispatch(ctx, []string{"serve", "--device", "cuda", "--tp", tp, "--model", dir, "--port", "0"}, out)
	}()
	var banner string
	select {
	case banner = <-out:
	case err := <-done:
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("serve did not print its URL")
	}
	t.Log(banner)
	m := regexp.MustCompile(`on (http://[^ ]+) \(tp=\d+, max_model_len=\d+, slots=(\d+), kv_pages=(\d+), scratch_mib=(\d+), max_step_tokens=(\d+)\)`).
		FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("banner %q", banner)
	}
	for i, name := range []string{"slots", "kv_pages", "scratch_mib", "max_step_tokens"} {
		if n, _ := strconv.Atoi(m[2+i]); n < 1 {
			t.Errorf("%s=%s in the banner", name, m[2+i])
		}
	}
	res, err := http.Get(m[1] + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var models struct {
		Data []struct {
			Scratch    int64 `json:"scratch_bytes"`
			StepTokens int   `json:"max_step_tokens"`
			KVPages    int   `json:"kv_pages"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %v %s", err, body)
	}
	if d := models.Data[0]; d.Scratch < 1<<20 || strconv.FormatInt(d.Scratch>>20, 10) != m[4] || d.StepTokens != cudaServeMaxPrefill+serveMaxSeqs-1 {
		t.Errorf("/v1/models %s against the banner's scratch_mib=%s", body, m[4])
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after shutdown: %v", err)
	}
}

// TestLongPromptAtFullOccupancyCUDA is the case: an engine as serve
// makes it with no memory flags, every slot held by a decoding request but
// one, which an 8192-token prompt takes, so its prefill chunks run beside a
// decode row in every other slot. It must complete with no out-of-memory
// failure, and no step may grow a rank's scratch arena past what the rank
// reserved at start-up.
func TestLongPromptAtFullOccupancyCUDA(t *testing.T) {
	const longPrompt, fillerPrompt = 8192, 16
	dir := presetDir(t, capacityPreset())
	ck, tok, err := openCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	_, lockThread, elemBytes, err := backendFactory("cuda", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := actors.Config{Checkpoint: ck, Tokenizer: tok, TP: capacityTP(t), LockThread: lockThread,
		Capacity:         serveCapacity("cuda", 0, elemBytes, 0),
		MaxPrefillTokens: cudaServeMaxPrefill, MaxRows: serveMaxSeqs}
	if err := configureDevices(&cfg, "cuda", ""); err != nil {
		t.Fatal(err)
	}
	watch := &arenaWatch{}
	cfg.NewBackend = watch.wrap(cfg.NewBackend)
	eng, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	info := eng.Info()
	t.Logf("%s at tp=%d: %d slots, %d KV pages of %d, max_model_len %d; scratch: the %d-token probe took %d MiB, reserved %d MiB",
		capacityPreset(), info.TP, info.Slots, info.KVPages, info.PageSize, info.MaxModelLen,
		info.MaxStepTokens, watch.probe()>>20, info.Scratch>>20)
	if info.Scratch < 1 || info.MaxModelLen < longPrompt+fillerPrompt {
		t.Fatalf("info %+v: no scratch reserved, or no room for the long prompt", info)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	vocab := int32(info.VocabSize)
	prompt := func(n, seed int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((i*7919 + seed*104729 + 1) % int(vocab))
		}
		return p
	}
	fillers := make([]*actors.Stream, info.Slots-1)
	for i := range fillers {
		s, err := eng.Submit(actors.Request{Prompt: prompt(fillerPrompt, i+1), MaxTokens: info.MaxModelLen - fillerPrompt, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		fillers[i] = s
	}
	for i, s := range fillers { // each holds its slot once it has a token
		for ev := (actors.Event{}); !ev.HasToken; {
			if ev, err = s.Recv(ctx); err != nil || ev.Err != nil {
				t.Fatalf("filler %d: %v %v", i, err, ev.Err)
			}
		}
	}
	long, err := eng.Submit(actors.Request{Prompt: prompt(longPrompt, 0), MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		ev, err := long.Recv(ctx)
		if err == io.EOF {
			break
		}
		if err != nil || ev.Err != nil {
			t.Fatalf("the %d-token prompt at full occupancy: %v %v", longPrompt, err, ev.Err)
		}
		if ev.HasToken {
			n++
		}
	}
	st, err := eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := eng.SupervisionStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 || st.Running != len(fillers) || st.Preemptions != 0 || sup.Rebuilds != 0 {
		t.Errorf("%d tokens of 4; after it %d requests run (want the %d fillers), %d preemptions, %d rebuilds",
			n, st.Running, len(fillers), st.Preemptions, sup.Rebuilds)
	}
	for _, s := range fillers {
		s.Cancel()
	}
	served, off := watch.serving()
	t.Logf("while serving, the largest step took %d MiB of scratch (reserved %d MiB)", served>>20, info.Scratch>>20)
	for _, o := range off {
		t.Errorf("an arena left its reservation: %s", o)
	}
}

// arenaWatch records, through each rank's ReserveScratch and ResetScratch,
// how much scratch the steps took before the rank reserved its arena (the
// probe) and after, and every reset that found an arena off its
// reservation.
type arenaWatch struct {
	mu       sync.Mutex
	reserved map[int]int64 // by rank
	probed   int64         // the most a step took before its rank reserved
	served   int64         // the most a step took after
	off      []string      // resets that found an arena of another size than reserved
}

// wrap makes f's CUDA backends report to w.
func (w *arenaWatch) wrap(f actors.BackendFactory) actors.BackendFactory {
	return func(s model.Shard, c nccl.Communicator) (kernels.Backend, error) {
		be, err := f(s, c)
		if err != nil {
			return nil, err
		}
		cb, ok := be.(*cuda.Backend)
		if !ok {
			return nil, fmt.Errorf("rank %d: backend %T is not CUDA", s.Rank, be)
		}
		return &watchedBackend{Backend: cb, watch: w, rank: s.Rank}, nil
	}
}

// probe is the most scratch a step took before its rank reserved.
func (w *arenaWatch) probe() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.probed
}

// serving is the most scratch a step took after its rank reserved, and
// the resets that found an arena off its reservation.
func (w *arenaWatch) serving() (steps int64, off []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.served, w.off
}

func (w *arenaWatch) reserve(rank int, capacity int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reserved == nil {
		w.reserved = map[int]int64{}
	}
	w.reserved[rank] = capacity
}

func (w *arenaWatch) reset(rank int, used, capacity int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reserved, ok := w.reserved[rank]
	switch {
	case !ok:
		w.probed = max(w.probed, used)
	case capacity != reserved || used > reserved:
		w.off = append(w.off, fmt.Sprintf("rank %d: a step took %d B, the arena holds %d B of %d B reserved", rank, used, capacity, reserved))
		fallthrough
	default:
		w.served = max(w.served, used)
	}
}

// watchedBackend is a rank's CUDA backend that reports its arena to the
// watch.
type watchedBackend struct {
	*cuda.Backend
	watch *arenaWatch
	rank  int
}

func (b *watchedBackend) ReserveScratch(bytes int64) error {
	if err := b.Backend.ReserveScratch(bytes); err != nil {
		return err
	}
	_, capacity := b.Backend.ScratchBytes()
	b.watch.reserve(b.rank, capacity)
	return nil
}

func (b *watchedBackend) ResetScratch() {
	used, capacity := b.Backend.ScratchBytes()
	b.watch.reset(b.rank, used, capacity)
	b.Backend.ResetScratch()
}
