//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"strconv"
	"unsafe"
)

// L2 prefetch of the next GEMV's weights (decode steps).
//
// A batch-1 decode step reads every weight once, one GEMV after another,
// with small kernels (norms, the GDN recurrence, attention) between them
// during which HBM is idle, and each GEMV ramps up and drains with
// bandwidth to spare. The GEMVs' blocks therefore end by prefetching into
// L2 the first bytes of the weights of the launch that comes next (mma_prefetch
// in kernels/36_gemv_mma.cu), so that those bytes arrive during the tail and
// the small kernels and the next GEMV starts on L2 hits.
//
// Which launch comes next is learned: the backend remembers the first
// weight of each tensor-core GEMV launch and, at the next one, writes a
// descriptor of the new launch's weights (at most prefetchCap bytes of them)
// and files it under the previous launch's first weight. From then on that
// launch carries the descriptor. A cuBLASLt GEMM between two GEMVs breaks
// the chain (a prefill step's projections), and the first successor learned
// stays, so a captured graph and its replays see the same descriptors. The
// descriptor pointer is a hint (hintPtr): it is left out of the graph
// fingerprint, because the results do not depend on it.
//
// COHORT_CUDA_PREFETCH_MB sets the cap (0 turns prefetching off);
// COHORT_CUDA_PREFETCH_PRIO=normal prefetches at the normal L2 eviction
// priority instead of evict_last. Off in deterministic mode (the successor
// of a 32-row group is the same weight).

// prefetchCapDefault is the default cap in MiB.
const prefetchCapDefault = 16

// prefetchSlots is how many descriptors the table holds (a 4b-shape decode
// step has about 130 GEMV launches).
const prefetchSlots = 1024

// prefetchWords is the size of a descriptor in int64: L, R, S, priority and
// (weight, rows, K) for up to four segments (mma_prefetch's layout).
const prefetchWords = 16

// hintPtr is a kernel argument that changes no result (the launch packs it
// like a devptr, the graph fingerprint counts it as 0).
type hintPtr devptr

// prefetcher is the backend's learned chain of GEMV launches.
type prefetcher struct {
	capBytes  int64
	evictLast bool
	table     devptr            // prefetchSlots descriptors (permanent)
	used      int               // descriptors written
	next      map[devptr]devptr // a launch's first weight → its successor's descriptor
	prev      devptr            // the first weight of the last GEMV launch (0: no chain)
}

// prefetchFromEnv reads COHORT_CUDA_PREFETCH_MB and COHORT_CUDA_PREFETCH_PRIO.
func prefetchFromEnv() (prefetcher, error) {
	p := prefetcher{capBytes: prefetchCapDefault << 20, evictLast: true}
	if v := os.Getenv("COHORT_CUDA_PREFETCH_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1024 {
			return p, fmt.Errorf("cuda: COHORT_CUDA_PREFETCH_MB=%q: want an integer in [0, 1024]", v)
		}
		p.capBytes = int64(n) << 20
	}
	switch v := os.Getenv("COHORT_CUDA_PREFETCH_PRIO"); v {
	case "", "last":
	case "normal":
		p.evictLast = false
	default:
		return p, fmt.Errorf("cuda: COHORT_CUDA_PREFETCH_PRIO=%q: want last or normal", v)
	}
	return p, nil
}

// prefetchSeg is one weight of a GEMV launch: its rows [rows, K].
type prefetchSeg struct {
	w    devptr
	rows int
}

// gemvHint returns the descriptor a GEMV launch of plan p over segs (K
// columns each) carries, learning the chain on the way (eagerly run steps
// only: a descriptor is uploaded with a synchronous copy).
func (b *Backend) gemvHint(p mmaPlan, K int, segs ...prefetchSeg) hintPtr {
	pf := &b.prefetch
	if pf.capBytes == 0 || b.det || len(segs) == 0 {
		return 0
	}
	w0 := segs[0].w
	if pf.prev != 0 && b.graph.mode == graphOff {
		if _, ok := pf.next[pf.prev]; !ok {
			if d := b.writeDescriptor(p, K, segs); d != 0 {
				pf.next[pf.prev] = d
			}
		}
	}
	pf.prev = w0
	return hintPtr(pf.next[w0])
}

// breakChain forgets the last GEMV launch (a launch of another kind read
// weights after it).
func (b *Backend) breakChain() { b.prefetch.prev = 0 }

// writeDescriptor writes the descriptor of a launch of plan p over segs
// into the next free slot and returns its address (0 when the table is
// full or the cap holds less than a line a row).
func (b *Backend) writeDescriptor(p mmaPlan, K int, segs []prefetchSeg) devptr {
	pf := &b.prefetch
	if pf.used == prefetchSlots || len(segs) > 4 {
		return 0
	}
	d := prefetchLayout(p.grid[0]*p.grid[1] <= b.occupancy(p.name, p.block[0])*b.sms, pf.capBytes, K, segs)
	if d[0] == 0 {
		return 0
	}
	if pf.evictLast {
		d[3] = 1
	}
	if pf.table == 0 {
		pf.table = b.allocPermanent("prefetch", prefetchSlots*prefetchWords*8)
		pf.next = map[devptr]devptr{}
	}
	at := pf.table + devptr(pf.used*prefetchWords*8)
	if err := memcpyHtoD(at, unsafe.Pointer(&d[0]), prefetchWords*8); err != nil {
		panic(fmt.Sprintf("cuda: prefetch descriptor: %v", err))
	}
	pf.used++
	return at
}

// prefetchLayout is a descriptor's values less the priority: for a launch
// that runs in one wave (every tile at once, each read from the start of
// its rows), the first L lines of every row with L·rows·128 ≤ capBytes; for
// one of several waves (tiles in order), whole rows of the first segments up
// to capBytes. L = 0 when nothing fits.
func prefetchLayout(oneWave bool, capBytes int64, K int, segs []prefetchSeg) [prefetchWords]int64 {
	var d [prefetchWords]int64
	rows, rowLines := 0, (K*2+127)/128
	for _, s := range segs {
		rows += s.rows
	}
	if rows == 0 || rowLines == 0 {
		return d
	}
	L, R := int64(rowLines), int64(rows)
	if oneWave {
		L = min(L, capBytes/(int64(rows)*128))
	} else {
		R = min(R, capBytes/(int64(rowLines)*128))
	}
	if L == 0 || R == 0 {
		return d
	}
	d[0], d[1], d[2] = L, R, int64(len(segs))
	for i, s := range segs {
		d[4+3*i], d[5+3*i], d[6+3*i] = int64(s.w), int64(s.rows), int64(K)
	}
	return d
}

// restart forgets what the prefetcher learned and sets its cap (tests: the
// table stays allocated; graphs captured with the old descriptors must be
// dropped first).
func (p *prefetcher) restart(capBytes int64) {
	p.capBytes, p.used, p.prev = capBytes, 0, 0
	if p.next != nil {
		p.next = map[devptr]devptr{}
	}
}
