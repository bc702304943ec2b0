package actors

import (
	"slices"
	"sync"
	"testing"
	"time"

	"cohort/kernels"
	"cohort/model"
	"cohort/nccl"
)

// TestGrowthCap: the prefill a step may take grows eightfold from the
// largest measured step rounded down to a power of two.
func TestGrowthCap(t *testing.T) {
	for _, tc := range []struct{ observed, want int }{
		{0, coldPrefill}, {1, coldPrefill}, {2, coldPrefill}, {16, 128}, {17, 128}, {112, 512}, {128, 1024},
		{896, 4096}, {897, 4096}, {1024, 8192}, {1027, 8192}, {8192, 65536},
	} {
		if got := growthCap(tc.observed); got != tc.want {
			t.Errorf("growthCap(%d) = %d, want %d", tc.observed, got, tc.want)
		}
	}
	for n := 1; n < 5000; n++ {
		if p := floorPow2(n); p > n || 2*p <= n || p&(p-1) != 0 {
			t.Fatalf("floorPow2(%d) = %d", n, p)
		}
	}
}

// TestColdRampPieces: on a cold engine whose steps only growthCap bounds
// (a step target far above what they take), a 128-token prompt and then
// two of 1024 are prefilled in pieces of 16 and 112, 512 and 512, and 1024:
// never a piece of 896 rows, which the CUDA backend's cuBLASLt timing
// would have kept for the 1024-row steps (docs/gpu.md, phase 16).
func TestColdRampPieces(t *testing.T) {
	tm := openPreset(t, "tiny")
	rec := &stepRows{}
	e := startEngine(t, tm, 1, func(cfg *Config) {
		cfg.NewBackend = rec.wrap(cfg.NewBackend)
		cfg.MaxPrefillTokens = 8192
		cfg.StepTarget, cfg.StepDeadline = time.Hour, time.Hour
		cfg.Capacity.MaxModelLen = 2048
	})
	for i, n := range []int{128, 1024, 1024} {
		prompt := make([]int32, n)
		for j := range prompt {
			prompt[j] = int32(1 + (j*31+i*7)%200)
		}
		if _, _, last := collect(t, mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 1, IgnoreEOS: true})); last.Err != nil {
			t.Fatalf("prompt %d: %v", i, last.Err)
		}
	}
	if got, want := rec.steps(), []int{16, 112, 512, 512, 1024}; !slices.Equal(got, want) {
		t.Errorf("prefill steps of %v rows, want %v", got, want)
	}
}

// stepRows records the rows of every step its backends run.
type stepRows struct {
	mu   sync.Mutex
	rows []int
}

func (r *stepRows) wrap(f BackendFactory) BackendFactory {
	return func(s model.Shard, c nccl.Communicator) (kernels.Backend, error) {
		be, err := f(s, c)
		if err != nil {
			return nil, err
		}
		return rowsBackend{Backend: be, rec: r}, nil
	}
}

func (r *stepRows) steps() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.rows)
}

// rowsBackend is a backend that records each step's rows (a
// kernels.Stepper that records nothing else and replays nothing).
type rowsBackend struct {
	kernels.Backend
	rec *stepRows
}

func (b rowsBackend) BeginStep(_ string, in kernels.StepInputs) {
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	b.rec.rows = append(b.rec.rows, len(in.Tokens))
}

func (rowsBackend) EndStep(kernels.Tensor) {}

func (rowsBackend) ReplayStep(string, kernels.StepInputs) (kernels.Tensor, bool) { return nil, false }
