//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// wgCases are the prefills of TestAttentionPrefillWG and
// BenchmarkAttentionPrefillWG: switchCases and a whole 8,192-row prompt.
var wgCases = append(append([]struct{ rows, cached int }{}, switchCases...), struct{ rows, cached int }{8192, 0})

// wgSuffixes are the wgmma twins: plain, pipelined within a warpgroup,
// the warpgroups taking turns, and plain with the copies under S.
var wgSuffixes = []string{"_wg", "_wgp", "_wgt", "_wgc"}

// TestAttentionPrefillWG: on an sm_90a image, the 4b heads over a bf16
// cache through the wgmma entries (kernels/46_attention_prefill_wg.cu,
// _wg, _wgp, _wgt and _wgc), single pass and split (as planFlashSplit chooses, and
// forced slices of four key tiles, so that slices start after position 0
// and lie after some M-rows' positions): each output against
// attention_f32 over the same cache within flashTol, the same bits as the
// _ldm entries (wgmma sums each k16 step's products as mma.sync does, and
// the softmax and ending are shared; a skipped rescale multiplies by
// exactly 1), and a second run the same bits.
func TestAttentionPrefillWG(t *testing.T) {
	withFlash(t, 16)
	withSplit(t, true, 0)
	withSwitches(t, false, true) // flashWG off until the test sets it
	g := gpu(t)
	if !g.wgmma {
		t.Skipf("the module is %s, not an sm_90a image", g.image)
	}
	for _, c := range wgCases {
		t.Run(fmt.Sprintf("%d after %d", c.rows, c.cached), func(t *testing.T) {
			if c.rows > 2048 && testing.Short() {
				t.Skip("8,192 rows in -short")
			}
			g, pf := newPrefill4BKV(t, c.cached, c.rows)
			ref := g.Download(pf.runMode(g, modeF32))
			for _, force := range []int{0, 4} {
				flashSplitForce = force
				for _, m := range []flashMode{modeSingle, modeSplit} {
					flashWG = ""
					ldm := g.Download(pf.runMode(g, m))
					for _, wg := range wgSuffixes {
						name := fmt.Sprintf("%s %v (forced slices %d)", wg, m, force)
						flashWG = wg
						got := g.Download(pf.runMode(g, m))
						again := g.Download(pf.runMode(g, m))
						checkClose(t, name+": vs attention_f32", got, ref, attnTol(flashTol))
						if d := relDiff(got, ldm); d != 0 {
							t.Errorf("%s: differs from the ldm entries (relative %.3g)", name, d)
						}
						if d := relDiff(again, got); d != 0 {
							t.Errorf("%s: a second run differs (relative %.3g)", name, d)
						}
					}
					g.ResetScratch()
				}
			}
			flashSplitForce = 0
		})
	}
}

// BenchmarkAttentionPrefillWG times one 4b-shape attention layer over a
// bf16 cache (kv_write_bf16 included, split path on, inside a step as
// timeStep does) for each prefill of wgCases through the _ldm entries
// (ldm_ms) and each wgmma twin (wg_ms, wgp_ms, wgt_ms), the ratios of the
// _ldm time to each (ldm/wg, ...), and the wgmma entries' rates in causal
// TFLOP/s (4·head dim·query heads·Σ keys seen: the attention's two
// products).
func BenchmarkAttentionPrefillWG(b *testing.B) {
	withFlash(b, 16)
	withSplit(b, true, 0)
	withSwitches(b, false, true)
	g := gpu(b)
	if !g.wgmma {
		b.Skipf("the module is %s, not an sm_90a image", g.image)
	}
	for _, c := range wgCases {
		b.Run(fmt.Sprintf("%d new rows after %d cached", c.rows, c.cached), func(b *testing.B) {
			g, pf := newPrefill4BKV(b, c.cached, c.rows)
			reps := max(2, 4096/c.rows)
			names := append([]string{""}, wgSuffixes...)
			t := make([]time.Duration, len(names))
			for range b.N {
				for i, wg := range names {
					flashWG = wg
					t[i] += pf.timeStep(b, g, modeSplit, reps)
				}
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
			keys := float64(c.rows)*float64(c.cached) + float64(c.rows)*float64(c.rows+1)/2
			flops := 4 * 256 * 16 * keys
			b.ReportMetric(ms(t[0]), "ldm_ms")
			for i, wg := range wgSuffixes {
				name := strings.TrimPrefix(wg, "_")
				b.ReportMetric(ms(t[i+1]), name+"_ms")
				b.ReportMetric(t[0].Seconds()/t[i+1].Seconds(), "ldm/"+name)
				b.ReportMetric(flops/(ms(t[i+1])*1e-3)/1e12, name+"_TFLOPs")
			}
		})
	}
}

// TestFlashWGConstantsMatchSource: the _wg entries walk key tiles of
// FA_WG_BN positions, which the split planner takes to be the bf16 cache's
// tile at head dim 256 (flashKVTile256), and their shared memory
// (flashSmemFor) fits an H100/H200 block.
func TestFlashWGConstantsMatchSource(t *testing.T) {
	src, err := os.ReadFile("kernels/46_attention_prefill_wg.cu")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define FA_WG_BN (\d+)`).FindSubmatch(src)
	if m == nil || string(m[1]) != fmt.Sprint(flashKVTile256) {
		t.Errorf("FA_WG_BN is %q, flashKVTile256 %d", m, flashKVTile256)
	}
	for _, name := range []string{"attention_prefill_kvbf16_hd256_wg", "attention_prefill_split_kvbf16_hd256_wgp"} {
		if n := flashSmemFor(name, 256, true); n > 227<<10 || n != flashSmemKV(256, true)+1024 {
			t.Errorf("%s: %d bytes of shared memory", name, n)
		}
	}
}

// TestFlashWGSuffix: COHORT_CUDA_FLASH_WG's values.
func TestFlashWGSuffix(t *testing.T) {
	for v, want := range map[string]string{"": "_wg", "1": "_wg", "pipe": "_wgp", "turns": "_wgt", "copies": "_wgc", "0": "", "yes": "_wg"} {
		if got := flashWGSuffix(v); got != want {
			t.Errorf("COHORT_CUDA_FLASH_WG=%q: %q, want %q", v, got, want)
		}
	}
}
