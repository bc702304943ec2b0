package cpu

import (
	"context"
	"fmt"

	"cohort/kernels"
)

// AllReduce sums x element-wise across the ranks of the group, in place. A
// backend without a communicator is a single rank and does nothing.
func (b *Backend) AllReduce(x kernels.Tensor) error {
	xt := asTensor("AllReduce", x)
	if b.comm == nil {
		return nil
	}
	if err := b.comm.AllReduceSum(context.Background(), xt.data); err != nil {
		return fmt.Errorf("cpu: AllReduce of %v: %w", xt.shape, err)
	}
	return nil
}

// AllGatherCols concatenates every rank's x [T, n] along the last dim in rank
// order, giving [T, n·size].
func (b *Backend) AllGatherCols(x kernels.Tensor) (kernels.Tensor, error) {
	xt := asTensor("AllGatherCols", x)
	if b.comm == nil {
		return &Tensor{shape: append([]int(nil), xt.shape...), data: append([]float32(nil), xt.data...)}, nil
	}
	size := b.comm.Size()
	T, n := xt.dims()
	recv := make([]float32, size*len(xt.data))
	if err := b.comm.AllGather(context.Background(), xt.data, recv); err != nil {
		return nil, fmt.Errorf("cpu: AllGatherCols of %v: %w", xt.shape, err)
	}
	shape := append([]int(nil), xt.shape...)
	if len(shape) == 0 {
		shape = []int{1}
	}
	shape[len(shape)-1] = n * size
	y := &Tensor{shape: shape, data: make([]float32, len(recv))}
	// recv is [rank][T][n]; y is [T][rank][n].
	for r := range size {
		for t := range T {
			copy(y.data[t*n*size+r*n:t*n*size+(r+1)*n], recv[r*T*n+t*n:r*T*n+(t+1)*n])
		}
	}
	return y, nil
}
