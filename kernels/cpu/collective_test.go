package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"cohort/nccl"
)

// fakeGroup is an in-process communicator group: every rank sends its
// contribution to a coordinator goroutine, which waits for all ranks (the
// barrier), combines them and sends each rank the result.
type fakeGroup struct {
	size int
	in   chan contribution
	outs []chan []float32
}

type contribution struct {
	rank int
	op   string
	data []float32
}

func newFakeGroup(size int) *fakeGroup {
	g := &fakeGroup{size: size, in: make(chan contribution), outs: make([]chan []float32, size)}
	for i := range g.outs {
		g.outs[i] = make(chan []float32, 1)
	}
	go g.coordinate()
	return g
}

func (g *fakeGroup) coordinate() {
	for {
		parts := make([][]float32, g.size)
		op := ""
		for range g.size {
			c, ok := <-g.in
			if !ok {
				return
			}
			parts[c.rank], op = c.data, c.op
		}
		var result []float32
		switch op {
		case "sum":
			result = make([]float32, len(parts[0]))
			for _, p := range parts {
				for i, v := range p {
					result[i] += v
				}
			}
		case "gather":
			result = slices.Concat(parts...)
		}
		for _, out := range g.outs {
			out <- result
		}
	}
}

func (g *fakeGroup) close() { close(g.in) }

type fakeComm struct {
	g    *fakeGroup
	rank int
}

func (c *fakeComm) Rank() int { return c.rank }
func (c *fakeComm) Size() int { return c.g.size }
func (c *fakeComm) exchange(op string, send []float32) []float32 {
	c.g.in <- contribution{rank: c.rank, op: op, data: slices.Clone(send)}
	return <-c.g.outs[c.rank]
}
func (c *fakeComm) AllReduceSum(_ context.Context, buf []float32) error {
	copy(buf, c.exchange("sum", buf))
	return nil
}
func (c *fakeComm) AllGather(_ context.Context, send, recv []float32) error {
	copy(recv, c.exchange("gather", send))
	return nil
}
func (c *fakeComm) Broadcast(context.Context, []float32, int) error { return errors.ErrUnsupported }
func (c *fakeComm) Abort(error)                                     {}
func (c *fakeComm) AsyncError() error                               { return nil }

var _ nccl.Communicator = (*fakeComm)(nil)

func TestCollectivesTwoRanks(t *testing.T) {
	const size, T, n = 2, 3, 4
	g := newFakeGroup(size)
	defer g.close()
	inputs := make([][]float32, size)
	for r := range inputs {
		inputs[r] = randSlice(newRand(uint64(r)), T*n, 1)
	}
	reduced := make([][]float32, size)
	gathered := make([][]float32, size)
	shapes := make([][]int, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			be := New(Options{Comm: &fakeComm{g: g, rank: r}, Threads: 2})
			x := be.Upload(inputs[r], T, n)
			if errs[r] = be.AllReduce(x); errs[r] != nil {
				return
			}
			reduced[r] = be.Download(x)
			y, err := be.AllGatherCols(be.Upload(inputs[r], T, n))
			if errs[r] = err; err != nil {
				return
			}
			gathered[r], shapes[r] = be.Download(y), y.Shape()
		})
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i := range T * n {
			if want := inputs[0][i] + inputs[1][i]; reduced[r][i] != want {
				t.Fatalf("rank %d AllReduce[%d] = %v, want %v", r, i, reduced[r][i], want)
			}
		}
		if !slices.Equal(shapes[r], []int{T, n * size}) {
			t.Fatalf("rank %d AllGatherCols shape %v", r, shapes[r])
		}
		for row := range T {
			want := slices.Concat(inputs[0][row*n:(row+1)*n], inputs[1][row*n:(row+1)*n])
			got := gathered[r][row*n*size : (row+1)*n*size]
			if !slices.Equal(got, want) {
				t.Fatalf("rank %d AllGatherCols row %d = %v, want %v", r, row, got, want)
			}
		}
	}
}

type failingComm struct{ fakeComm }

func (failingComm) AllReduceSum(context.Context, []float32) error { return nccl.ErrAborted }
func (failingComm) AllGather(context.Context, []float32, []float32) error {
	return fmt.Errorf("peer gone: %w", nccl.ErrAborted)
}

func TestCollectiveErrorsWrap(t *testing.T) {
	be := New(Options{Comm: &failingComm{fakeComm{g: &fakeGroup{size: 2}}}})
	x := be.Upload([]float32{1, 2}, 1, 2)
	if err := be.AllReduce(x); !errors.Is(err, nccl.ErrAborted) {
		t.Errorf("AllReduce error %v does not wrap ErrAborted", err)
	}
	if _, err := be.AllGatherCols(x); !errors.Is(err, nccl.ErrAborted) {
		t.Errorf("AllGatherCols error %v does not wrap ErrAborted", err)
	}
}

func TestCollectivesSingleRank(t *testing.T) {
	be := New(Options{})
	x := be.Upload([]float32{1, 2, 3, 4}, 2, 2)
	if err := be.AllReduce(x); err != nil || !slices.Equal(data(x), []float32{1, 2, 3, 4}) {
		t.Errorf("AllReduce: %v %v", err, data(x))
	}
	y, err := be.AllGatherCols(x)
	if err != nil || !slices.Equal(data(y), data(x)) || !slices.Equal(y.Shape(), []int{2, 2}) {
		t.Errorf("AllGatherCols: %v %v %v", err, y.Shape(), data(y))
	}
}
