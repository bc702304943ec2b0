//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"testing"

	"cohort/internal/testmodels/archtest"
)

// TestPrefetchKeepsLogits: the GEMVs' L2 prefetch is a hint. Decode steps
// (eager, then captured and replayed as graphs) give bit-identical logits
// with it off, at a cap that prefetches whole weights, and at one that
// prefetches a few lines of each row; with it on the chain is learned.
func TestPrefetchKeepsLogits(t *testing.T) {
	be := bf16Backend(t)
	saved := be.prefetch
	t.Cleanup(func() {
		be.dropGraphs()
		be.prefetch = saved
		be.prefetch.restart(saved.capBytes)
	})
	fx := fixtures(t)[0]
	ck := archtest.OpenDir(t, fx.Dir)
	m := loadOn(t, ck, be)
	prompts := [][]int32{fx.Prompts[63], fx.Prompts[1], fx.Prompts[130]}
	const steps = 12
	run := func(capBytes int64) [][]float32 {
		be.dropGraphs()
		be.prefetch.restart(capBytes)
		return decodeRun(t, be, m, ck.Config.VocabSize, prompts, steps)
	}
	off := run(0)
	for _, capBytes := range []int64{64 << 20, 16 << 10} {
		t.Run(fmt.Sprint(capBytes), func(t *testing.T) {
			got := run(capBytes)
			if be.prefetch.used == 0 {
				t.Errorf("cap %d: no descriptor learned", capBytes)
			}
			for i := range off {
				if !slices.Equal(got[i], off[i]) {
					t.Errorf("step %d: logits with prefetch differ (relative %.3g)", i, relDiff(got[i], off[i]))
				}
			}
		})
	}
}

// TestPrefetchLayout: what a descriptor asks for, by launch shape.
func TestPrefetchLayout(t *testing.T) {
	seg := func(rows int) prefetchSeg { return prefetchSeg{w: 1 << 20, rows: rows} }
	for _, c := range []struct {
		name     string
		oneWave  bool
		capBytes int64
		K        int
		segs     []prefetchSeg
		wantL    int64
		wantR    int64
	}{
		// One wave: every row's first lines, as many as the cap allows.
		{"whole weight fits", true, 64 << 20, 2560, []prefetchSeg{seg(4096)}, 40, 4096},
		{"part of each row", true, 16 << 20, 2560, []prefetchSeg{seg(8192), seg(4096), seg(32), seg(32)}, 10, 12352},
		{"long rows", true, 16 << 20, 9216, []prefetchSeg{seg(2560)}, 51, 2560},
		{"less than a line a row", true, 1 << 20, 2560, []prefetchSeg{seg(9216), seg(9216)}, 0, 0},
		// Several waves: whole rows from the first.
		{"LM head", false, 16 << 20, 2560, []prefetchSeg{seg(248320)}, 40, 3276},
		{"no rows", true, 16 << 20, 2560, nil, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := prefetchLayout(c.oneWave, c.capBytes, c.K, c.segs)
			if d[0] != c.wantL || d[1] != c.wantR {
				t.Fatalf("L, R = %d, %d; want %d, %d", d[0], d[1], c.wantL, c.wantR)
			}
			if c.wantL == 0 {
				return
			}
			if d[2] != int64(len(c.segs)) {
				t.Errorf("segments %d; want %d", d[2], len(c.segs))
			}
			if bytes := d[0] * d[1] * 128; bytes > c.capBytes {
				t.Errorf("asks for %d bytes; cap %d", bytes, c.capBytes)
			}
			for i, s := range c.segs {
				if d[4+3*i] != int64(s.w) || d[5+3*i] != int64(s.rows) || d[6+3*i] != int64(c.K) {
					t.Errorf("segment %d: %v; want %v rows of %d", i, d[4+3*i:7+3*i], s, c.K)
				}
			}
		})
	}
}
