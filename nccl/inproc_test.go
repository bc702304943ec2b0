package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// deadline bounds every wait in these tests; it is a failure deadline, never
// a synchronization device.
const deadline = 10 * time.Second

// waitFor polls cond, yielding the processor, until it holds or the deadline
// passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// arrivedCount reports how many ranks wait in the group's current round.
func arrivedCount(g *Group) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur.arrived
}

// recvErr waits for one error from ch, failing the test at the deadline.
func recvErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(deadline):
		t.Fatal("timed out waiting for a collective to return")
		return nil
	}
}

func mustGroup(t testing.TB, n int) *Group {
	t.Helper()
	g, err := NewGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// value is rank's deterministic input element i of step; magnitudes vary
// widely so that a sum in another order would round differently.
func value(step, rank, i int) float32 {
	x := float64((step*7919+rank*104729+i*31)%1000) - 500
	return float32(x * math.Pow(10, float64((rank+i+step)%7-3)) / 3)
}

type stepSpec struct {
	op   opKind
	size int
	root int
}

func schedule(n, steps int, seed uint64) []stepSpec {
	rng := rand.New(rand.NewPCG(seed, 1))
	sizes := []int{0, 1, 3, 15, 16, 17, 100, 255, 1000, 4096, 16385}
	out := make([]stepSpec, steps)
	for i := range out {
		out[i] = stepSpec{
			op:   opKind(1 + rng.IntN(3)),
			size: sizes[rng.IntN(len(sizes))],
			root: rng.IntN(n),
		}
	}
	return out
}

// runSchedule runs steps on every rank of comms (one goroutine per rank) and
// returns each rank's output of each step.
func runSchedule(t *testing.T, comms []Communicator, steps []stepSpec) [][][]float32 {
	t.Helper()
	n := len(comms)
	results := make([][][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			ctx := context.Background()
			for s, sp := range steps {
				if rng.IntN(4) == 0 {
					runtime.Gosched() // vary arrival order
				}
				in := make([]float32, sp.size)
				for i := range in {
					in[i] = value(s, r, i)
				}
				var err error
				out := in
				switch sp.op {
				case opAllReduceSum:
					err = c.AllReduceSum(ctx, in)
				case opAllGather:
					out = make([]float32, n*sp.size)
					err = c.AllGather(ctx, in, out)
				case opBroadcast:
					err = c.Broadcast(ctx, in, sp.root)
				}
				if err != nil {
					errs[r] = fmt.Errorf("step %d %v size %d: %w", s, sp.op, sp.size, err)
					c.Abort(errs[r])
					return
				}
				results[r] = append(results[r], out)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return results
}

func TestInprocCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			g := mustGroup(t, n)
			comms := groupComms(g)
			for r, c := range comms {
				if c.Rank() != r || c.Size() != n {
					t.Fatalf("rank %d: Rank/Size = %d/%d", r, c.Rank(), c.Size())
				}
			}
			steps := schedule(n, 300, uint64(n))
			results := runSchedule(t, comms, steps) // [rank][step]
			for s, sp := range steps {
				var want []float32
				switch sp.op {
				case opAllReduceSum:
					want = make([]float32, sp.size)
					for i := range want {
						acc := value(s, 0, i)
						for r := 1; r < n; r++ {
							acc += value(s, r, i)
						}
						want[i] = acc
					}
				case opAllGather:
					for r := range n {
						for i := range sp.size {
							want = append(want, value(s, r, i))
						}
					}
				case opBroadcast:
					want = make([]float32, sp.size)
					for i := range want {
						want[i] = value(s, sp.root, i)
					}
				}
				for r := range n {
					got := results[r][s]
					if len(got) != len(want) {
						t.Fatalf("step %d %v rank %d: len %d, want %d", s, sp.op, r, len(got), len(want))
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("step %d %v size %d rank %d [%d]: got %v, want %v (rank order)",
								s, sp.op, sp.size, r, i, got[i], want[i])
						}
					}
				}
			}
			if err := g.Aborted(); err != nil {
				t.Fatalf("Aborted() = %v after clean run", err)
			}
		})
	}
}

func TestInprocSoloNoCopy(t *testing.T) {
	g := mustGroup(t, 1)
	c := g.Comm(0)
	buf := []float32{1, 2, 3}
	if err := c.AllReduceSum(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
	if buf[0] != 1 || buf[1] != 2 || buf[2] != 3 {
		t.Fatalf("buf changed: %v", buf)
	}
	if err := c.Broadcast(context.Background(), buf, 1); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Broadcast root 1 of 1: %v, want ErrMismatch", err)
	}
	g.Abort(errors.New("solo stop"))
	if err := c.AllReduceSum(context.Background(), buf); !errors.Is(err, ErrAborted) {
		t.Fatalf("after abort: %v", err)
	}
}

func TestInprocAbortWhileBlocked(t *testing.T) {
	cases := []struct {
		n, arrived int
		viaRank    int // -1: Group.Abort, else Comm(viaRank).Abort (a non-arrived rank)
		op         opKind
	}{
		{2, 1, -1, opAllReduceSum},
		{2, 1, 1, opAllGather},
		{3, 1, -1, opBroadcast},
		{3, 2, 2, opAllReduceSum},
		{4, 1, 3, opAllGather},
		{4, 3, -1, opAllReduceSum},
		{4, 2, 3, opBroadcast},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n=%d/arrived=%d/via=%d/%v", tc.n, tc.arrived, tc.viaRank, tc.op), func(t *testing.T) {
			g := mustGroup(t, tc.n)
			ch := make(chan error, tc.arrived)
			for r := range tc.arrived {
				go func() { ch <- callOp(g.Comm(r), context.Background(), tc.op, 8) }()
			}
			waitFor(t, "ranks to block", func() bool { return arrivedCount(g) == tc.arrived })
			reason := errors.New("rank lost: heartbeat timeout")
			if tc.viaRank < 0 {
				g.Abort(reason)
			} else {
				g.Comm(tc.viaRank).Abort(reason)
			}
			g.Abort(errors.New("second reason must not stick"))
			for range tc.arrived {
				checkAborted(t, recvErr(t, ch), reason)
			}
			checkAborted(t, g.Aborted(), reason)
			// The group is dead forever, on every rank.
			for r := range tc.n {
				checkAborted(t, callOp(g.Comm(r), context.Background(), opAllReduceSum, 4), reason)
				checkAborted(t, callOp(g.Comm(r), context.Background(), opBroadcast, 4), reason)
			}
			for r := range tc.n {
				if err := g.Comm(r).AsyncError(); err != nil {
					t.Fatalf("AsyncError after plain abort = %v, want nil", err)
				}
			}
		})
	}
}

func callOp(c Communicator, ctx context.Context, op opKind, size int) error {
	buf := make([]float32, size)
	switch op {
	case opAllGather:
		return c.AllGather(ctx, buf, make([]float32, c.Size()*size))
	case opBroadcast:
		return c.Broadcast(ctx, buf, 0)
	default:
		return c.AllReduceSum(ctx, buf)
	}
}

func checkAborted(t *testing.T, err, reason error) {
	t.Helper()
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("err = %v, want ErrAborted", err)
	}
	if !strings.Contains(err.Error(), reason.Error()) || !errors.Is(err, reason) {
		t.Fatalf("err = %v, want it to carry reason %q", err, reason)
	}
}

func TestInprocContextCancel(t *testing.T) {
	cases := []struct {
		name      string
		n         int
		others    int  // ranks (other than the canceller) that arrive and block
		preCancel bool // canceller's ctx is already done when it calls
		deadline  bool // use an expired deadline instead of cancel
	}{
		{"blocked/n=2/alone", 2, 0, false, false},
		{"blocked/n=3", 3, 1, false, false},
		{"blocked/n=3/alone", 3, 0, false, false},
		{"blocked/n=4", 4, 2, false, false},
		{"precancelled/n=3", 3, 2, true, false},
		{"deadline/n=4", 4, 3, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := mustGroup(t, tc.n)
			canceller := tc.n - 1
			if tc.others+1 >= tc.n && !tc.preCancel {
				t.Fatal("bad case: the collective would complete")
			}
			others := make(chan error, tc.others)
			for r := range tc.others {
				go func() { others <- callOp(g.Comm(r), context.Background(), opAllReduceSum, 32) }()
			}
			waitFor(t, "peers to block", func() bool { return arrivedCount(g) == tc.others })

			var ctx context.Context
			var cancel context.CancelFunc
			if tc.deadline {
				ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			} else {
				ctx, cancel = context.WithCancel(context.Background())
			}
			defer cancel()
			mine := make(chan error, 1)
			if tc.preCancel {
				cancel()
				mine <- callOp(g.Comm(canceller), ctx, opAllReduceSum, 32)
			} else {
				go func() { mine <- callOp(g.Comm(canceller), ctx, opAllReduceSum, 32) }()
				waitFor(t, "canceller to block", func() bool { return arrivedCount(g) == tc.others+1 })
				cancel()
			}
			err := recvErr(t, mine)
			if !errors.Is(err, ctx.Err()) || ctx.Err() == nil {
				t.Fatalf("canceller: %v, want %v", err, ctx.Err())
			}
			for range tc.others {
				if err := recvErr(t, others); !errors.Is(err, ErrAborted) || !errors.Is(err, ctx.Err()) {
					t.Fatalf("peer: %v, want ErrAborted wrapping %v", err, ctx.Err())
				}
			}
			if err := g.Aborted(); !errors.Is(err, ErrAborted) {
				t.Fatalf("Aborted() = %v", err)
			}
			for r := range tc.n {
				if err := callOp(g.Comm(r), context.Background(), opAllGather, 4); !errors.Is(err, ErrAborted) {
					t.Fatalf("rank %d after cancel: %v, want ErrAborted", r, err)
				}
			}
		})
	}
}

func TestInprocMismatch(t *testing.T) {
	cases := []struct {
		name string
		n    int
		call func(c Communicator) error
	}{
		{"allreduce-size", 3, func(c Communicator) error {
			return c.AllReduceSum(context.Background(), make([]float32, 10+c.Rank()%2))
		}},
		{"allgather-send", 2, func(c Communicator) error {
			l := 4 + c.Rank()
			return c.AllGather(context.Background(), make([]float32, l), make([]float32, 2*l))
		}},
		{"allgather-recv", 4, func(c Communicator) error {
			l := 4 * 4
			if c.Rank() == 2 {
				l--
			}
			return c.AllGather(context.Background(), make([]float32, 4), make([]float32, l))
		}},
		{"broadcast-root", 3, func(c Communicator) error {
			return c.Broadcast(context.Background(), make([]float32, 5), c.Rank()%2)
		}},
		{"broadcast-root-range", 2, func(c Communicator) error {
			return c.Broadcast(context.Background(), make([]float32, 5), 7)
		}},
		{"broadcast-size", 2, func(c Communicator) error {
			return c.Broadcast(context.Background(), make([]float32, 5+c.Rank()), 0)
		}},
		{"op", 2, func(c Communicator) error {
			if c.Rank() == 0 {
				return c.AllReduceSum(context.Background(), make([]float32, 5))
			}
			return c.Broadcast(context.Background(), make([]float32, 5), 0)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := mustGroup(t, tc.n)
			ch := make(chan error, tc.n)
			for r := range tc.n {
				go func() { ch <- tc.call(g.Comm(r)) }()
			}
			for range tc.n {
				if err := recvErr(t, ch); !errors.Is(err, ErrMismatch) {
					t.Fatalf("err = %v, want ErrMismatch", err)
				}
			}
			// The ranks agree on the failure, so the group stays usable.
			for r := range tc.n {
				go func() { ch <- callOp(g.Comm(r), context.Background(), opAllReduceSum, 3) }()
			}
			for range tc.n {
				if err := recvErr(t, ch); err != nil {
					t.Fatalf("collective after mismatch: %v", err)
				}
			}
		})
	}
}

func TestInprocInjectAsyncError(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			g := mustGroup(t, n)
			for r := range n {
				if err := g.Comm(r).AsyncError(); err != nil {
					t.Fatalf("AsyncError before injection = %v", err)
				}
			}
			blocked := n - 1
			ch := make(chan error, blocked)
			for r := range blocked {
				go func() { ch <- callOp(g.Comm(r), context.Background(), opAllGather, 2) }()
			}
			waitFor(t, "ranks to block", func() bool { return arrivedCount(g) == blocked })
			inj := errors.New("device lost")
			g.InjectAsyncError(inj)
			g.InjectAsyncError(errors.New("later error must not stick"))
			for r := range n {
				if err := g.Comm(r).AsyncError(); !errors.Is(err, inj) {
					t.Fatalf("rank %d AsyncError = %v, want %v", r, err, inj)
				}
			}
			for range blocked {
				checkAborted(t, recvErr(t, ch), inj)
			}
			checkAborted(t, callOp(g.Comm(n-1), context.Background(), opAllReduceSum, 2), inj)
		})
	}
}

func TestInprocConcurrentUse(t *testing.T) {
	g := mustGroup(t, 2)
	ch := make(chan error, 1)
	go func() { ch <- callOp(g.Comm(0), context.Background(), opAllReduceSum, 4) }()
	waitFor(t, "rank 0 to block", func() bool { return arrivedCount(g) == 1 })
	if err := callOp(g.Comm(0), context.Background(), opAllReduceSum, 4); !errors.Is(err, ErrConcurrentUse) {
		t.Fatalf("second concurrent call: %v, want ErrConcurrentUse", err)
	}
	if err := callOp(g.Comm(1), context.Background(), opAllReduceSum, 4); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, ch); err != nil {
		t.Fatal(err)
	}
}

func TestInprocNewGroupAndComm(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := NewGroup(n); err == nil {
			t.Fatalf("NewGroup(%d) succeeded", n)
		}
	}
	g := mustGroup(t, 2)
	for _, r := range []int{-1, 2} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("Comm(%d) did not panic", r)
				}
			}()
			g.Comm(r)
		}()
	}
	g.Abort(nil)
	if err := g.Aborted(); !errors.Is(err, ErrAborted) {
		t.Fatalf("Abort(nil): Aborted() = %v", err)
	}
}

// TestInprocAbortRace aborts at random moments while ranks run collectives
// back to back: every rank must return (success or ErrAborted), never hang.
func TestInprocAbortRace(t *testing.T) {
	for i := range 50 {
		n := 2 + i%3
		g := mustGroup(t, n)
		ch := make(chan error, n)
		for r := range n {
			go func() {
				for k := 0; ; k++ {
					if err := callOp(g.Comm(r), context.Background(), opKind(1+k%3), 64); err != nil {
						ch <- err
						return
					}
				}
			}()
		}
		for range i % 7 {
			runtime.Gosched()
		}
		reason := fmt.Errorf("stop %d", i)
		g.Abort(reason)
		for range n {
			checkAborted(t, recvErr(t, ch), reason)
		}
	}
}

func TestInprocNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 5 {
		g := mustGroup(t, 3)
		// Normal traffic.
		var wg sync.WaitGroup
		for r := range 3 {
			wg.Go(func() {
				for range 20 {
					_ = callOp(g.Comm(r), context.Background(), opAllReduceSum, 100)
				}
			})
		}
		wg.Wait()
		// Cancel one blocked rank, then abort.
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan error, 2)
		go func() { ch <- callOp(g.Comm(0), context.Background(), opAllReduceSum, 8) }()
		go func() { ch <- callOp(g.Comm(1), ctx, opAllReduceSum, 8) }()
		waitFor(t, "ranks to block", func() bool { return arrivedCount(g) == 2 })
		cancel()
		recvErr(t, ch)
		recvErr(t, ch)
		g.Abort(errors.New("done"))
	}
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

// groupComms returns the communicators of an in-process group.
func groupComms(g *Group) []Communicator {
	comms := make([]Communicator, g.Size())
	for r := range comms {
		comms[r] = g.Comm(r)
	}
	return comms
}

func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", n, size), func(b *testing.B) {
				benchAllReduce(b, groupComms(mustGroup(b, n)), size)
			})
		}
	}
}
