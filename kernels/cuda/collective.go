//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	"cohort/kernels"
	"cohort/nccl"
)

// Collectives.
//
// A rank whose communicator is a device communicator (NCCL; nccl.AsDevice
// looks through wrappers) runs them on the device, enqueued on the
// backend's stream in op order, so they are captured into and replayed from
// CUDA graphs like any launch: all-reduces of at most p2pMaxBytes go
// through the one-shot peer-to-peer kernel (p2p.go) when every rank of the
// group lives in this process and can map its peers' memory, everything
// else through NCCL. Any other communicator (the in-process group, the TCP
// ring) gets the host path: download, communicator, upload.
//
// COHORT_ALLREDUCE=nccl turns the one-shot all-reduce off (every rank of
// the process must see the same value).

// collectives is a backend's collective state, made by InitCollectives.
type collectives struct {
	inited bool
	err    error
	dev    nccl.DeviceCommunicator // nil: host path
	p2p    *p2pGroup               // nil: NCCL only
	noP2P  string                  // why the one-shot all-reduce is off
}

// InitCollectives prepares the rank's collectives, on the backend's
// thread. With a device communicator it creates the rank's NCCL
// communicator (blocking until every rank of the group has joined, the
// group is aborted or ctx ends) and then, where possible, the one-shot
// all-reduce, which every rank sets up together. The collectives call it on
// first use; a rank's backend factory calls it right after New so that a
// group that cannot connect fails while loading. The result sticks.
func (b *Backend) InitCollectives(ctx context.Context) error {
	c := &b.collectives
	if c.inited {
		return c.err
	}
	c.inited = true
	c.err = b.initCollectives(ctx, c)
	return c.err
}

func (b *Backend) initCollectives(ctx context.Context, c *collectives) error {
	if b.comm == nil || b.comm.Size() == 1 {
		return nil
	}
	dc, ok := nccl.AsDevice(b.comm)
	if !ok {
		c.noP2P = "host-path communicator"
		return nil
	}
	for _, name := range collectiveKernels {
		f, err := moduleGetFunction(b.mod, name)
		if err != nil {
			return fmt.Errorf("cuda: collectives: %w", err)
		}
		b.funcs[name] = f
	}
	if err := dc.Init(ctx); err != nil {
		return fmt.Errorf("cuda: rank %d: %w", dc.Rank(), err)
	}
	c.dev = dc
	switch mode := os.Getenv("COHORT_ALLREDUCE"); mode {
	case "", "auto":
	case "nccl":
		c.noP2P = "COHORT_ALLREDUCE=nccl"
		return nil
	default:
		return fmt.Errorf("cuda: COHORT_ALLREDUCE=%q: want auto or nccl", mode)
	}
	lp, ok := dc.(nccl.LocalPeers)
	if !ok {
		c.noP2P = "the group's ranks are not all in this process"
		return nil
	}
	p, why, err := b.newP2P(ctx, dc.Rank(), lp)
	if err != nil {
		return fmt.Errorf("cuda: rank %d: %w", dc.Rank(), err)
	}
	c.p2p, c.noP2P = p, why
	return nil
}

// CollectivesInfo describes the rank's collectives, for logs.
func (b *Backend) CollectivesInfo() string {
	c := &b.collectives
	switch {
	case b.comm == nil || b.comm.Size() == 1:
		return "single rank"
	case !c.inited:
		return "not initialized"
	case c.err != nil:
		return "failed: " + c.err.Error()
	case c.dev == nil:
		return "host path (" + c.noP2P + ")"
	case c.p2p != nil:
		return fmt.Sprintf("NCCL on device %d; one-shot P2P all-reduce up to %d KiB", c.dev.Device(), p2pMaxBytes>>10)
	}
	return fmt.Sprintf("NCCL on device %d; one-shot all-reduce off: %s", c.dev.Device(), c.noP2P)
}

// ready returns the collective state, initialising it on first use.
func (b *Backend) collReady(op string) (*collectives, error) {
	c := &b.collectives
	if !c.inited {
		b.InitCollectives(context.Background())
	}
	if c.err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, c.err)
	}
	return c, nil
}

// AllReduce sums x element-wise across the ranks of the group, in place. A
// backend without a communicator (or a group of one) does nothing.
func (b *Backend) AllReduce(x kernels.Tensor) error {
	const op = "AllReduce"
	xt := b.tensor(op, x)
	if b.comm == nil || b.comm.Size() == 1 || xt.n == 0 {
		return nil
	}
	c, err := b.collReady(op)
	if err != nil {
		return err
	}
	if c.dev == nil {
		return b.hostAllReduce(xt)
	}
	if c.p2p != nil && xt.n*4 <= p2pMaxBytes {
		c.p2p.allReduce(b, xt)
		return nil
	}
	return b.ncclAllReduce(c.dev, xt)
}

// ncclAllReduce enqueues NCCL's all-reduce of x on the backend's stream.
func (b *Backend) ncclAllReduce(dc nccl.DeviceCommunicator, xt *Tensor) error {
	if b.graph.mode != graphOff && b.graph.skip("AllReduce", "ncclAllReduce", uint64(xt.ptr), uint64(xt.n)) {
		return nil
	}
	if err := dc.AllReduceSumDevice(uintptr(xt.ptr), xt.n, b.Stream()); err != nil {
		return fmt.Errorf("cuda: AllReduce of %v: %w", xt.shape, err)
	}
	return b.syncIfDebug("AllReduce")
}

// syncIfDebug waits for the stream under COHORT_CUDA_SYNC=1 (outside graph
// steps), so an asynchronous fault is reported by the op that caused it.
func (b *Backend) syncIfDebug(op string) error {
	if b.syncLaunch && b.graph.mode == graphOff {
		if err := streamSynchronize(); err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
	}
	return nil
}

// hostAllReduce is the host path: download, communicator, upload.
func (b *Backend) hostAllReduce(xt *Tensor) error {
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
	if b.comm == nil || b.comm.Size() == 1 {
		y := b.newTensor(op, shape...)
		if err := memcpyDtoD(y.ptr, xt.ptr, int64(xt.n)*4); err != nil {
			return nil, fmt.Errorf("cuda: %s of %v: %w", op, xt.shape, err)
		}
		return y, nil
	}
	c, err := b.collReady(op)
	if err != nil {
		return nil, err
	}
	if c.dev == nil {
		return b.hostAllGatherCols(xt, shape)
	}
	size := b.comm.Size()
	T, n := xt.dims()
	shape[len(shape)-1] = n * size
	y := b.newTensor(op, shape...)
	if xt.n == 0 {
		return y, nil
	}
	// NCCL gathers [rank][T][n]; with one row that already is [T][rank·n].
	dst := y
	if T > 1 {
		dst = b.newTensor(op, size*xt.n)
	}
	if b.graph.mode == graphOff || !b.graph.skip(op, "ncclAllGather", uint64(xt.ptr), uint64(dst.ptr), uint64(xt.n)) {
		if err := c.dev.AllGatherDevice(uintptr(xt.ptr), uintptr(dst.ptr), xt.n, b.Stream()); err != nil {
			return nil, fmt.Errorf("cuda: %s of %v: %w", op, xt.shape, err)
		}
	}
	if T > 1 {
		total := int64(size) * int64(xt.n)
		b.launch(op, "gather_cols_f32", [3]int{b.grid1(total, 256), 1, 1}, [3]int{256, 1, 1}, 0,
			y.ptr, dst.ptr, size, int64(T), int64(n))
	}
	if err := b.syncIfDebug(op); err != nil {
		return nil, err
	}
	return y, nil
}

// hostAllGatherCols is the host path of AllGatherCols.
func (b *Backend) hostAllGatherCols(xt *Tensor, shape []int) (kernels.Tensor, error) {
	const op = "AllGatherCols"
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
