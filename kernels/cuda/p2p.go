//go:build cuda

package cuda

// The one-shot all-reduce over NVLink peer-to-peer access, for decode-sized
// messages (at most p2pMaxBytes): each rank copies its vector into a buffer
// its peers have mapped, publishes a sequence number into every peer's flag
// array, waits for theirs, and sums every rank's buffer (the kernel and its
// protocol are described in kernels/60_allreduce.cu). One kernel launch and
// one NVLink round trip, against NCCL's 12–18 µs in a graph on 2×H200.
//
// It needs every rank of the group in this process (nccl.LocalPeers) and
// peer access between all their devices; the ranks agree on it through an
// exchange, so either all use it or none does. Its buffers are never freed:
// a peer may still read them until the group is gone, and they are small
// (2·256 KiB per rank and group generation).

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"cohort/nccl"
)

const (
	// p2pMaxBytes is the largest all-reduce the one-shot kernel takes;
	// larger ones go through NCCL.
	p2pMaxBytes = 256 << 10
	// p2pBlocks and p2pThreads are the one-shot kernel's fixed grid (every
	// call must use every block, see 60_allreduce.cu); 32 blocks move
	// 256 KiB as one float4 per thread.
	p2pBlocks  = 32
	p2pThreads = 512
)

// p2pGroup is one rank's side of the one-shot all-reduce.
type p2pGroup struct {
	size, rank int
	region     devptr // this rank's region (data[2][cap], flags, counters)
	peers      devptr // device array of every rank's region base
	cap        int64  // floats per data buffer
	abortHost  *uint32
	abortDev   devptr
}

// p2pRegionBytes is the size of one rank's region.
func p2pRegionBytes(size int, capFloats int64) int64 {
	return 2*capFloats*4 + int64(size)*p2pBlocks*4 + p2pBlocks*4
}

// newP2P sets up the one-shot all-reduce for the backend's rank, on its
// thread. Every rank of the group must call it (it exchanges region
// addresses). It returns nil and the reason when some rank cannot take
// part; then no rank uses it.
func (b *Backend) newP2P(ctx context.Context, rank int, lp nccl.LocalPeers) (*p2pGroup, string, error) {
	devs := lp.Devices()
	p := &p2pGroup{size: len(devs), rank: rank, cap: p2pMaxBytes / 4}
	why := p.prepare(b, devs)
	vals, err := lp.Exchange(ctx, uint64(p.region))
	if err != nil {
		return nil, "", fmt.Errorf("cuda: one-shot all-reduce setup: %w", err)
	}
	for r, v := range vals {
		if v == 0 {
			if why == "" {
				why = fmt.Sprintf("rank %d cannot take part", r)
			}
			if p.region != 0 {
				memFree(p.region)
			}
			return nil, why, nil
		}
	}
	if err := memcpyHtoD(p.peers, unsafe.Pointer(&vals[0]), int64(len(vals))*8); err != nil {
		return nil, "", fmt.Errorf("cuda: one-shot all-reduce setup: %w", err)
	}
	host := p.abortHost
	lp.OnAbort(func() { atomic.StoreUint32(host, 1) })
	return p, "", nil
}

// prepare allocates and zeroes the rank's region, its peer table and the
// abort flag, and enables access to every peer's memory. It returns why
// this rank cannot take part ("" if it can; p.region is then set).
func (p *p2pGroup) prepare(b *Backend, devs []int) string {
	me := devs[p.rank]
	for r, d := range devs {
		if r == p.rank {
			continue
		}
		dev, err := deviceGet(d)
		if err != nil {
			return err.Error()
		}
		can, err := canAccessPeer(b.device, dev)
		if err != nil {
			return err.Error()
		}
		if !can {
			return fmt.Sprintf("device %d cannot access device %d's memory", me, d)
		}
		// The peer's primary context (shared with its rank and with NCCL);
		// retained for the life of the process.
		pctx, err := primaryCtxRetain(dev)
		if err != nil {
			return err.Error()
		}
		if err := enablePeerAccess(pctx); err != nil {
			return fmt.Sprintf("device %d: %v", d, err)
		}
	}
	// Keep this device's primary context alive as long as the process: the
	// abort hook writes the mapped flag whenever the group is aborted,
	// possibly after the backend was closed.
	if _, err := primaryCtxRetain(b.device); err != nil {
		return err.Error()
	}
	host, dev, err := memMappedAlloc(64)
	if err != nil {
		return err.Error()
	}
	p.abortHost, p.abortDev = (*uint32)(host), dev
	atomic.StoreUint32(p.abortHost, 0)
	bytes := p2pRegionBytes(p.size, p.cap)
	region, err := memAlloc(bytes)
	if err != nil {
		return err.Error()
	}
	peers, err := memAlloc(int64(p.size) * 8)
	if err != nil {
		memFree(region)
		return err.Error()
	}
	if err := memsetD32(region, 0, bytes/4); err != nil {
		memFree(region)
		memFree(peers)
		return err.Error()
	}
	if err := streamSynchronize(); err != nil {
		memFree(region)
		memFree(peers)
		return err.Error()
	}
	p.region, p.peers = region, peers
	return ""
}

// allReduce enqueues the one-shot all-reduce of x (n ≤ cap floats) on the
// backend's stream (captured or skipped like any launch during a graph
// step).
func (p *p2pGroup) allReduce(b *Backend, x *Tensor) {
	b.launch("AllReduce", "allreduce_oneshot_f32", [3]int{p2pBlocks, 1, 1}, [3]int{p2pThreads, 1, 1}, 0,
		x.ptr, int64(x.n), p.peers, p.size, p.rank, p.cap, p.abortDev)
}
