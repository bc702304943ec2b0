//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"cohort/kernels"
)

// Phase 1 collectives copy through the host to the rank's
// nccl.Communicator; device-side NCCL is a later step.

// AllReduce sums x element-wise across the ranks of the group, in place. A
// backend without a communicator is a single rank and does nothing.
func (b *Backend) AllReduce(x kernels.Tensor) error {
	xt := b.tensor("AllReduce", x)
	if b.comm == nil || xt.n == 0 {
		return nil
	}
	buf := b.Download(xt)
	if err := b.comm.AllReduceSum(context.Background(), buf); err != nil {
		return fmt.Errorf("cuda: AllReduce of %v: %w", xt.shape, err)
	}
	if err := memcpyHtoD(xt.ptr, unsafe.Pointer(&buf[0]), int64(len(buf))*4); err != nil {
		return fmt.Errorf("cuda: AllReduce of %v: %w", xt.shape, err)
	}
	return nil
}

// AllGatherCols concatenates every rank's x [T, n] along the last dim in rank
// order, giving [T, n·size].
func (b *Backend) AllGatherCols(x kernels.Tensor) (kernels.Tensor, error) {
	const op = "AllGatherCols"
	xt := b.tensor(op, x)
	shape := append([]int(nil), xt.shape...)
	if len(shape) == 0 {
		shape = []int{1}
	}
	if b.comm == nil {
		y := b.newTensor(op, shape...)
		if err := memcpyDtoD(y.ptr, xt.ptr, int64(xt.n)*4); err != nil {
			return nil, fmt.Errorf("cuda: %s of %v: %w", op, xt.shape, err)
		}
		return y, nil
	}
	size := b.comm.Size()
	T, n := xt.dims()
	send := b.Download(xt)
	recv := make([]float32, size*len(send))
	if err := b.comm.AllGather(context.Background(), send, recv); err != nil {
		return nil, fmt.Errorf("cuda: %s of %v: %w", op, xt.shape, err)
	}
	shape[len(shape)-1] = n * size
	host := make([]float32, len(recv))
	// recv is [rank][T][n]; the result is [T][rank][n].
	for r := range size {
		for t := range T {
			copy(host[t*n*size+r*n:t*n*size+(r+1)*n], recv[r*T*n+t*n:r*T*n+(t+1)*n])
		}
	}
	y := b.newTensor(op, shape...)
	if len(host) > 0 {
		if err := memcpyHtoD(y.ptr, unsafe.Pointer(&host[0]), int64(len(host))*4); err != nil {
			return nil, fmt.Errorf("cuda: %s of %v: %w", op, xt.shape, err)
		}
	}
	return y, nil
}
