//go:build cuda

package cuda

import (
	"fmt"
	"os"

	"cohort/kernels"
)

// decodeBuckets turns on decode graphs per batch-size bucket
// (kernels.DecodePadder): a decode step of n rows runs as the graph of
// decodeBucket(n) rows, its extra rows pad rows in a state slot and a KV
// page that each pool keeps beyond the requests' (padPlaces). Off until it
// is measured on a GPU; COHORT_CUDA_GRAPH_BUCKETS=1 turns it on.
var decodeBuckets = os.Getenv("COHORT_CUDA_GRAPH_BUCKETS") == "1"

// decodeMaxBucket is the largest bucket: bigger decode steps run as they
// are. decodeMaxPads is the most pad rows a bucket adds (the gap between
// two buckets, less one).
const (
	decodeMaxBucket = 512
	decodeMaxPads   = 7
)

// decodeBucket returns the bucket of a decode step of rows rows: 1, 2, 4,
// then the multiples of 8 up to decodeMaxBucket (vLLM's capture sizes), or
// rows itself beyond it.
func decodeBucket(rows int) int {
	switch {
	case rows <= 2 || rows > decodeMaxBucket:
		return rows
	case rows <= 4:
		return 4
	}
	return (rows + 7) / 8 * 8
}

// padPlaces is how many slots and pages the state pools and KV caches keep
// for pad rows: 1 with decode buckets and graphs on, else 0.
func (b *Backend) padPlaces() int {
	if b.bucketsOn() {
		return 1
	}
	return 0
}

func (b *Backend) bucketsOn() bool { return decodeBuckets && b.graph.enabled }

// DecodeBucket is kernels.DecodePadder's: the rows a decode step of rows
// rows runs as.
func (b *Backend) DecodeBucket(rows int) int {
	if !b.bucketsOn() {
		return rows
	}
	return decodeBucket(rows)
}

// Head returns the first rows rows of t, sharing its memory (and its bf16
// twin's).
func (b *Backend) Head(t kernels.Tensor, rows int) kernels.Tensor {
	ct := b.tensor("Head", t)
	n, cols := ct.dims()
	if rows < 0 || rows > n {
		panic(fmt.Sprintf("cuda: Head: %d rows of %v", rows, ct.shape))
	}
	v := *ct
	v.shape, v.n = []int{rows, cols}, rows*cols
	return &v
}
