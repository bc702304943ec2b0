//go:build cuda

package cuda

import (
	"testing"

	"cohort/kernels"
)

// TestReserveScratch: a reserved arena is one chunk of the size asked (to
// the alignment); steps within it allocate nothing, a step past it grows it
// by one small chunk instead of doubling it; it refuses to move while
// scratch is in use; and freed caches and pools give their memory back.
func TestReserveScratch(t *testing.T) {
	shared := gpu(t) // skips without a GPU; the thread stays locked
	be, err := New(Options{Weights: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		be.Close()
		shared.Bind()
	})
	x := be.Upload(make([]float32, 1<<20), 1<<20) // 4 MiB
	capacity := func() int64 { _, c := be.ScratchBytes(); return c }
	const reserved = 10<<20 + arenaAlign
	if err := be.ReserveScratch(10<<20 + 1); err != nil || capacity() != reserved {
		t.Fatalf("ReserveScratch: %v, capacity %d, want %d", err, capacity(), reserved)
	}
	be.Add(x, x)
	be.Add(x, x)
	if capacity() != reserved {
		t.Fatalf("8 MiB of outputs moved the arena to %d B", capacity())
	}
	be.Add(x, x)
	if capacity() != reserved+arenaMinChunk {
		t.Fatalf("12 MiB of outputs: arena %d B, want the reservation and one %d B chunk", capacity(), arenaMinChunk)
	}
	if err := be.ReserveScratch(reserved); err == nil {
		t.Error("ReserveScratch with scratch in use did not fail")
	}
	be.ResetScratch()
	if n := len(be.scratch.chunks); n != 1 || capacity() != reserved+arenaMinChunk {
		t.Fatalf("after the reset: %d chunks, %d B", n, capacity())
	}

	live := len(be.permanent)
	kv := be.NewKVCache(2, 64, 16, 2, 64)
	pool := be.NewStatePool(2, 3, kernels.GDNConfig{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 16, ConvKernel: 4})
	if n := pool.(kernels.SnapshotPool).AllocSnapshots(2); n == 0 {
		t.Fatal("no snapshot places")
	}
	if got := len(be.permanent); got != live+5 {
		t.Fatalf("%d permanent allocations after a cache, a pool and its snapshots, want %d", got, live+5)
	}
	be.FreeKVCache(kv)
	be.FreeStatePool(pool)
	be.FreeStatePool(pool) // twice: nothing left to free
	if got := len(be.permanent); got != live {
		t.Fatalf("%d permanent allocations after freeing them, want %d", got, live)
	}
}
