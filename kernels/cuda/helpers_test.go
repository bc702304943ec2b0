//go:build cuda

package cuda

import (
	"cohort/kernels/kernelstest"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
)

var (
	sharedOnce sync.Once
	sharedBe   *Backend
	sharedErr  error
	skipReason string
)

// gpu returns the shared test backend, bound to the calling test's
// goroutine (locked to its OS thread until the test ends), or skips the
// test when the host has no CUDA device.
func gpu(t testing.TB) *Backend {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	sharedOnce.Do(func() {
		if n, err := deviceCount(); err != nil || n == 0 {
			skipReason = "no CUDA device"
			if err != nil {
				skipReason = err.Error()
			}
			return
		}
		sharedBe, sharedErr = New(Options{Weights: "f32"})
		if sharedErr == nil {
			sharedBe.syncLaunch = true // attribute asynchronous faults to their op
			t.Logf("%s", sharedBe.Info())
		}
	})
	if skipReason != "" {
		t.Skipf("no GPU: %s", skipReason)
	}
	if sharedErr != nil {
		t.Fatalf("New: %v", sharedErr)
	}
	if err := sharedBe.Bind(); err != nil {
		t.Fatal(err)
	}
	return sharedBe
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0xc0da)) }

// randSlice and relDiff are the shared kernelstest helpers.
var (
	randSlice = kernelstest.RandSlice
	relDiff   = kernelstest.RelDiff
	batchOf   = kernelstest.BatchOf
)

// checkClose fails unless got is within tol of want (relDiff) and logs the
// difference, so the verbose output records every measured error.
func checkClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	d := relDiff(got, want)
	if !(d <= tol) {
		t.Errorf("%s: relative difference %.3g > %.3g", what, d, tol)
		return
	}
	t.Logf("%s: relative difference %.3g (tol %.0g)", what, d, tol)
}

// pair holds the CPU oracle and the GPU backend for a differential test.
type pair struct {
	c *cpu.Backend
	g *Backend
}

func newPair(t *testing.T) pair { return pair{c: cpu.New(cpu.Options{}), g: gpu(t)} }

// up uploads the same data to both backends.
func (p pair) up(data []float32, shape ...int) (kernels.Tensor, kernels.Tensor) {
	return p.c.Upload(data, shape...), p.g.Upload(data, shape...)
}

// loadOn loads ck whole (one rank) on be.
func loadOn(t *testing.T, ck *model.Checkpoint, be kernels.Backend) model.Model {
	t.Helper()
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
