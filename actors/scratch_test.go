package actors

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"cohort/internal/testmodels/servetest"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/nccl"
)

// deviceBackend is the CPU backend posing as one with device memory of its
// own: of total bytes, its KV caches, state pools and scratch arena hold
// theirs and MemInfo reports the rest free. A step takes perToken arena
// bytes for each of its tokens and perOutput for each output row; the
// arena grows to what a step takes unless reserved for more. It logs what
// happens to its memory, in order.
type deviceBackend struct {
	*cpu.Backend
	total, perToken, perOutput int64

	mu             sync.Mutex
	held           int64         // caches, pools and the arena's capacity
	used, capacity int64         // the arena
	sizes          map[any]int64 // live caches and pools
	log            []string      // "kv P", "pool S", "step T/R", "free", "reserve B", "meminfo F"
	grew           bool          // a step outgrew the arena after a reservation
}

var (
	_ kernels.ScratchArena   = (*deviceBackend)(nil)
	_ kernels.MemoryReporter = (*deviceBackend)(nil)
	_ kernels.StateFreer     = (*deviceBackend)(nil)
	_ kernels.Stepper        = (*deviceBackend)(nil)
)

func newDeviceBackend(comm nccl.Communicator, total, perToken, perOutput int64) *deviceBackend {
	return &deviceBackend{Backend: cpu.New(cpu.Options{Comm: comm, Threads: 1}), total: total, perToken: perToken,
		perOutput: perOutput, sizes: map[any]int64{}}
}

func (d *deviceBackend) note(format string, args ...any) {
	d.log = append(d.log, fmt.Sprintf(format, args...))
}

func (d *deviceBackend) MemInfo() (free, total int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.note("meminfo %d", d.total-d.held)
	return d.total - d.held, d.total, nil
}

func (d *deviceBackend) BeginStep(_ string, in kernels.StepInputs) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.note("step %d/%d", len(in.Tokens), len(in.Rows))
	d.used += d.perToken*int64(len(in.Tokens)) + d.perOutput*int64(len(in.Rows))
	if d.used > d.capacity {
		d.grew = d.grew || slices.ContainsFunc(d.log, func(s string) bool { return strings.HasPrefix(s, "reserve") })
		d.held += d.used - d.capacity
		d.capacity = d.used
	}
}

func (d *deviceBackend) EndStep(kernels.Tensor) {}

func (d *deviceBackend) ReplayStep(string, kernels.StepInputs) (kernels.Tensor, bool) {
	return nil, false
}

func (d *deviceBackend) ResetScratch() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.used = 0
}

func (d *deviceBackend) ScratchBytes() (used, capacity int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used, d.capacity
}

func (d *deviceBackend) ReserveScratch(bytes int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.note("reserve %d", bytes)
	d.held += bytes - d.capacity
	d.capacity = bytes
	return nil
}

func (d *deviceBackend) NewKVCache(layers, pages, pageSize, kvHeads, headDim int) kernels.KVCache {
	c := d.Backend.NewKVCache(layers, pages, pageSize, kvHeads, headDim)
	d.hold(c, 2*4*int64(layers)*int64(pages)*int64(pageSize)*int64(kvHeads)*int64(headDim), "kv %d", pages)
	return c
}

func (d *deviceBackend) NewStatePool(layers, slots int, cfg kernels.GDNConfig) kernels.StatePool {
	p := d.Backend.NewStatePool(layers, slots, cfg)
	per := int64(cfg.ConvKernel-1)*int64(cfg.ConvDim()) + int64(cfg.ValueHeads)*int64(cfg.KeyDim)*int64(cfg.ValueDim)
	d.hold(p, 4*int64(layers)*int64(slots)*per, "pool %d", slots)
	return p
}

func (d *deviceBackend) hold(x any, bytes int64, format string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.note(format, n)
	d.sizes[x] = bytes
	d.held += bytes
}

func (d *deviceBackend) FreeKVCache(c kernels.KVCache) { d.release(c) }

func (d *deviceBackend) FreeStatePool(p kernels.StatePool) { d.release(p) }

func (d *deviceBackend) release(x any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.note("free")
	d.held -= d.sizes[x]
	delete(d.sizes, x)
}

// events returns the backend's log so far.
func (d *deviceBackend) events() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// TestScratchReservedBeforeCapacity: a rank on a backend with device memory
// and a scratch arena runs the engine's largest step once on a throwaway
// state, frees it, reserves the measured scratch and its margin, and only
// then reads the free memory that sizes slots and pages; serving a
// request afterwards does not grow the arena. The CPU backend does none of
// it. The step limits and the context are small so that the measured step
// (a full forward pass) is quick, under the race detector too.
func TestScratchReservedBeforeCapacity(t *testing.T) {
	tm := openPreset(t, "tiny")
	const total, perToken, perOutput = 96 << 20, 8 << 10, 4 << 10
	const prefill, maxRows, maxLen = 64, 16, 256
	base := servetest.Capacity
	base.MaxModelLen = maxLen
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp=%d", tp), func(t *testing.T) {
			var mu sync.Mutex
			var bes []*deviceBackend
			e := startEngine(t, tm, tp, func(c *Config) {
				c.MaxPrefillTokens, c.MaxRows, c.Capacity.MaxModelLen = prefill, maxRows, maxLen
				c.Capacity.Budget, c.Capacity.Reserve = 0, 1<<20 // from the device, a small reserve
				c.NewBackend = func(_ model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
					be := newDeviceBackend(comm, total, perToken, perOutput)
					mu.Lock()
					defer mu.Unlock()
					bes = append(bes, be)
					return be, nil
				}
			})
			info := e.Info()
			tokens, outputs := prefill+maxRows-1, prefill+maxRows-1 // MaxPrefillTokens + MaxRows - 1; the tiny vocabulary makes every row an output
			want := scratchReservation(perToken*int64(tokens) + perOutput*int64(outputs))
			if info.Scratch != want || info.MaxStepTokens != tokens {
				t.Fatalf("info reports %d B of scratch for %d-token steps, want %d B for %d", info.Scratch, info.MaxStepTokens, want, tokens)
			}
			_, _, _, pages := probeStep(model.CapacityInput{MaxStepTokens: tokens, MaxModelLen: base.MaxModelLen, PageSize: base.PageSize})
			for _, be := range bes {
				ev := be.events()
				free := fmt.Sprintf("meminfo %d", total-want)
				head := []string{fmt.Sprintf("kv %d", pages), "pool 1", fmt.Sprintf("step %d/%d", tokens, outputs), "free", "free",
					fmt.Sprintf("reserve %d", want), free}
				if len(ev) < len(head) || !slices.Equal(ev[:len(head)], head) {
					t.Fatalf("rank's memory events %q, want them to start %q", ev, head)
				}
				in := base
				in.Budget, in.Reserve, in.Snapshots = total-want, 1<<20, -1 // the engine's default: automatic snapshots
				c, err := tm.ck.PlanCapacity(model.Shard{Rank: 0, Size: tp}, in)
				if err != nil {
					t.Fatal(err)
				}
				if info.Slots != c.Slots || info.KVPages != c.Pages {
					t.Errorf("engine has %d slots and %d pages, want %d and %d (the plan of %d B)", info.Slots, info.KVPages, c.Slots, c.Pages, in.Budget)
				}
			}
			s, err := e.Submit(Request{Prompt: []int32{1, 2, 3, 4, 5}, MaxTokens: 4, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			if ids, _, _ := collect(t, s); len(ids) != 4 {
				t.Fatalf("%d tokens", len(ids))
			}
			for _, be := range bes {
				be.mu.Lock()
				grew, capacity := be.grew, be.capacity
				be.mu.Unlock()
				if grew || capacity != want {
					t.Errorf("the arena holds %d B after serving (reserved %d B)", capacity, want)
				}
			}
		})
	}
}

// TestProbeStep: the measured step is one sequence of the largest step's
// tokens ending at the longest context, its last rows sampled, over a page
// list that cycles through as many distinct pages as its rows write into.
func TestProbeStep(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		tokens, outputs, maxLen, pages int
		cached, listLen                int
	}{
		{"end of a long context", 2111, 130, 262144, 133, 262144 - 2111, 16384},
		{"context shorter than the step", 300, 1, 100, 19, 0, 19},
		{"context of the step alone", 320, 320, 320, 20, 0, 20},
		{"rows capped at the tokens", 5, 64, 1024, 2, 1019, 64},
		{"no output rows asked: one", 40, 0, 64, 4, 24, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := model.CapacityInput{MaxStepTokens: tc.tokens, MaxStepOutputs: tc.outputs, MaxModelLen: tc.maxLen, PageSize: 16}
			tokens, b, rows, pages := probeStep(in)
			if len(tokens) != tc.tokens || pages != tc.pages || len(b.Seqs) != 1 {
				t.Fatalf("%d tokens, %d pages, %d sequences; want %d, %d, 1", len(tokens), pages, len(b.Seqs), tc.tokens, tc.pages)
			}
			s := b.Seqs[0]
			if s.Len != tc.tokens || s.Cached != tc.cached || len(s.Pages) != tc.listLen {
				t.Fatalf("sequence len %d cached %d with %d pages listed; want %d, %d, %d", s.Len, s.Cached, len(s.Pages), tc.tokens, tc.cached, tc.listLen)
			}
			if err := kernels.CheckBatch(b, tc.tokens, true); err != nil {
				t.Fatal(err)
			}
			if err := kernels.CheckPages(b, kernels.CacheShape{Pages: pages, PageSize: 16}); err != nil {
				t.Fatal(err)
			}
			written := map[[2]int32]bool{} // (page, offset) of each row: no two rows share one
			for r, p := range b.Positions {
				at := [2]int32{s.Pages[p/16], p % 16}
				if written[at] {
					t.Fatalf("row %d at position %d writes page %d offset %d again", r, p, at[0], at[1])
				}
				written[at] = true
			}
			want := max(1, min(tc.outputs, tc.tokens))
			if len(rows) != want || rows[len(rows)-1] != tc.tokens-1 || rows[0] != tc.tokens-want {
				t.Fatalf("output rows %v, want the last %d", rows, want)
			}
		})
	}
}

// TestScratchReservation: the measurement and an eighth, in whole 2 MiB.
func TestScratchReservation(t *testing.T) {
	for _, tc := range []struct{ used, want int64 }{
		{0, 0},
		{1, 2 << 20},
		{16 << 20, 18 << 20},
		{(16 << 20) + 1, 20 << 20},
		{2662 << 20, 2996 << 20}, // the seed review's 2.66 GiB: + 332.75 MiB, rounded up
	} {
		if got := scratchReservation(tc.used); got != tc.want {
			t.Errorf("scratchReservation(%d) = %d, want %d", tc.used, got, tc.want)
		}
	}
}

// TestMaxStep: the largest step is the prefill budget beside a decode row
// for every other sequence; its outputs, one row per sequence beside one
// chunk of prompt logprobs.
func TestMaxStep(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		prefill, rows, vocab    int
		wantTokens, wantOutputs int
	}{
		{"serve defaults, 4B vocabulary", 2048, 64, 248320, 2111, 63 + 67},
		{"small vocabulary: every row", 256, 64, 512, 319, 319},
		{"one row", 16, 1, 248320, 16, 16},
		{"unset limits", 0, 64, 512, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Checkpoint: &model.Checkpoint{Config: &model.Config{VocabSize: tc.vocab}},
				MaxPrefillTokens: tc.prefill, MaxRows: tc.rows}
			if tokens, outputs := maxStep(cfg); tokens != tc.wantTokens || outputs != tc.wantOutputs {
				t.Errorf("maxStep = %d tokens, %d outputs; want %d, %d", tokens, outputs, tc.wantTokens, tc.wantOutputs)
			}
		})
	}
}

// TestReserveScratchOnlyOnDevices: only a backend with both device memory
// and a scratch arena measures a step; the CPU backend, and a rank that
// knows no step size, reserve nothing and run nothing.
func TestReserveScratchOnlyOnDevices(t *testing.T) {
	tm := openPreset(t, "tiny")
	in := servetest.Capacity
	in.MaxStepTokens, in.MaxStepOutputs = 40, 2
	device := newDeviceBackend(nil, 1<<30, 1000, 10)
	arenaOnly := struct {
		*cpu.Backend
		kernels.ScratchArena
	}{cpu.New(cpu.Options{Threads: 1}), newDeviceBackend(nil, 1<<30, 1000, 10)}
	for _, tc := range []struct {
		name  string
		be    kernels.Backend
		steps int
		want  int64
		in    model.CapacityInput
	}{
		{"cpu", cpu.New(cpu.Options{Threads: 1}), 0, 0, in},
		{"device memory, no arena", memBackend{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 30}, 0, 0, in},
		{"arena, no device memory", arenaOnly, 0, 0, in},
		{"device", device, 1, scratchReservation(40*1000 + 2*10), in},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tm.ck.Load(tc.be, model.Single)
			if err != nil {
				t.Fatal(err)
			}
			got, err := reserveScratch(tc.be, m, tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("reserveScratch = %d, %v; want %d", got, err, tc.want)
			}
			if d, ok := tc.be.(*deviceBackend); ok {
				if steps := slices.IndexFunc(d.events(), func(s string) bool { return s == "step 40/2" }); steps < 0 {
					t.Errorf("no probe step in %q", d.events())
				}
			}
		})
	}
	unknown := in
	unknown.MaxStepTokens = 0
	m, err := tm.ck.Load(device, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	before := len(device.events())
	if got, err := reserveScratch(device, m, unknown); got != 0 || err != nil || len(device.events()) != before {
		t.Errorf("with no step size: %d, %v, events %q", got, err, device.events()[before:])
	}
}

// TestScratchWatch: a rank reports once that a step grew its arena past
// the reservation, and nothing where it reserved none.
func TestScratchWatch(t *testing.T) {
	for _, tc := range []struct {
		name               string
		reserved, capacity int64
		warnings           int
	}{
		{"within the reservation", 4 << 20, 4 << 20, 0},
		{"grown past it", 4 << 20, 68 << 20, 1},
		{"nothing reserved", 0, 68 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := servetest.CaptureLog(t)
			be := newDeviceBackend(nil, 1<<30, 0, 0)
			be.capacity = tc.capacity
			w := &scratchWatch{rank: 1, reserved: tc.reserved}
			for range 3 {
				w.check(be, 2111)
			}
			if got := strings.Count(logs.String(), "grew the scratch arena"); got != tc.warnings {
				t.Errorf("%d warnings, want %d: %s", got, tc.warnings, logs)
			}
		})
	}
}
