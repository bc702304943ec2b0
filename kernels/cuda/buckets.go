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
// page that each pool keeps beyond the requests' (padPlaces). On by
// default since TestDecodeBucketsMatchUnpadded passed on an H100 and
// cohort bench measured batch 32 at 6.81 against 7.17 ms/token (batch 1
// and 8 within 0.5 %; 2026-12-06); COHORT_CUDA_GRAPH_BUCKETS=0 turns it
// off.
var decodeBuckets = os.Getenv("COHORT_CUDA_GRAPH_BUCKETS") != "0"

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

// DecodeBuckets is kernels.DecodePadder's: the buckets of steps of up to
// maxRows rows (nil with buckets off).
func (b *Backend) DecodeBuckets(maxRows int) []int {
	if !b.bucketsOn() {
		return nil
	}
	return decodeBucketsUpTo(maxRows)
}

// decodeBucketsUpTo lists decodeBucket's values for 1 to maxRows rows (at
// most decodeMaxBucket: larger steps are not padded).
func decodeBucketsUpTo(maxRows int) []int {
	var out []int
	for rows := 1; rows <= min(maxRows, decodeMaxBucket); {
		n := decodeBucket(rows)
		out = append(out, n)
		rows = n + 1
	}
	return out
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
