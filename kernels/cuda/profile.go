//go:build cuda

package cuda

/*
#include <cuda.h>

// Declared here rather than through cudaProfiler.h, which the header set that
// tools/cuda/cuda-headers.sh fetches does not include; both live in libcuda.
CUresult cuProfilerStart(void);
CUresult cuProfilerStop(void);
*/
import "C"

import (
	"log"
	"os"
	"strconv"
	"strings"
)

// profileWindow brackets one step for a profiler started with collection
// off (ncu --profile-from-start off): COHORT_CUDA_PROFILE_ROWS=N[:K] turns
// collection on when the K-th step (default 1) that embeds N rows begins and
// off when that step's scratch is reset, so a profile holds only that step
// (for example one 1024-token prefill, or the last 2048-token chunk of an
// 8k prompt) however many launches come before it.
type profileWindow struct {
	rows int  // 0: off
	skip int  // steps of rows rows still to pass over
	on   bool // collection is on
}

func newProfileWindow() profileWindow {
	spec, k, _ := strings.Cut(os.Getenv("COHORT_CUDA_PROFILE_ROWS"), ":")
	n, _ := strconv.Atoi(spec)
	skip, err := strconv.Atoi(k)
	if err != nil || skip < 1 {
		skip = 1
	}
	return profileWindow{rows: n, skip: skip - 1}
}

// step is called with the row count of a step's embedding.
func (p *profileWindow) step(rows int) {
	if p.rows == 0 || rows != p.rows || p.on {
		return
	}
	if p.skip > 0 {
		p.skip--
		return
	}
	rc := C.cuProfilerStart()
	log.Printf("cuda: profiler collection on for a step of %d rows (CUresult %d)", rows, int(rc))
	p.on = true
	p.rows = 0 // one step only
}

// end is called when a step's scratch is reset.
func (p *profileWindow) end() {
	if p.on {
		rc := C.cuProfilerStop()
		log.Printf("cuda: profiler collection off (CUresult %d)", int(rc))
		p.on = false
	}
}
