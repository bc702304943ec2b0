// Package nccl holds the collective communicators of a tensor-parallel group:
// an in-process one for CPU ranks, a TCP ring for CPU ranks in different
// processes, and NCCL for GPU ranks (build tag cuda; its library is opened at
// run time through nccl/dynload). Every communicator can be aborted from
// another goroutine so that peers blocked in a collective return.
package nccl

import (
	"context"
	"errors"
)

// ErrAborted is returned by collectives on an aborted communicator.
var ErrAborted = errors.New("nccl: communicator aborted")

// Communicator is one rank's handle on a group's collectives. All ranks must
// call the same collectives in the same order with the same sizes.
type Communicator interface {
	Rank() int
	Size() int
	// AllReduceSum sums buf element-wise across ranks, in place.
	AllReduceSum(ctx context.Context, buf []float32) error
	// AllGather concatenates every rank's send into recv (len = Size·len(send)), in rank order.
	AllGather(ctx context.Context, send, recv []float32) error
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf []float32, root int) error
	// Abort makes every pending and later collective of the group fail with
	// an error wrapping ErrAborted and reason. It is safe from any goroutine.
	Abort(reason error)
	// AsyncError reports an asynchronous failure of the communicator, or nil.
	AsyncError() error
}
