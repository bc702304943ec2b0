package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const testGroup = "test-generation-1"

// loopbackListeners opens n listeners on 127.0.0.1:0.
func loopbackListeners(t testing.TB, n int) ([]net.Listener, []string) {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for r := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns[r], addrs[r] = ln, ln.Addr().String()
	}
	return lns, addrs
}

// tcpRing forms a ring of n ranks (each DialRing in its own goroutine, as
// separate processes would) on loopback listeners; edit may change each
// rank's configuration. The communicators are closed at cleanup.
func tcpRing(t testing.TB, n int, edit func(r int, cfg *TCPConfig)) ([]*TCPComm, []error) {
	t.Helper()
	lns, addrs := loopbackListeners(t, n)
	comms := make([]*TCPComm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := TCPConfig{Rank: r, Size: n, Addrs: addrs, Group: testGroup, DialTimeout: deadline, Listener: lns[r]}
		if edit != nil {
			edit(r, &cfg)
		}
		wg.Go(func() { comms[r], errs[r] = DialRing(context.Background(), cfg) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	return comms, errs
}

func mustTCPRing(t testing.TB, n int, edit func(r int, cfg *TCPConfig)) []*TCPComm {
	t.Helper()
	comms, errs := tcpRing(t, n, edit)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("DialRing rank %d: %v", r, err)
		}
	}
	return comms
}

// ringSum is the sum the TCP ring computes for element i: chunk k of the
// ring reduce-scatter accumulates x_k + x_{k+1} + ... + x_{k-1}.
func ringSum(step, n, size, i int) float32 {
	k := 0
	for ; k < n; k++ {
		if _, hi := chunkBounds(size, n, k); i < hi {
			break
		}
	}
	acc := value(step, k, i)
	for j := 1; j < n; j++ {
		acc += value(step, (k+j)%n, i)
	}
	return acc
}

func TestTCPCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			steps := schedule(n, 200, uint64(100+n))
			// Frames of several pieces, and more Broadcast segments.
			steps = append(steps,
				stepSpec{op: opAllReduceSum, size: 70001},
				stepSpec{op: opAllGather, size: 20000},
				stepSpec{op: opBroadcast, size: 40000, root: n - 1},
				stepSpec{op: opAllReduceSum, size: 0},
				stepSpec{op: opAllReduceSum, size: 1},
				stepSpec{op: opAllGather, size: 0},
				stepSpec{op: opBroadcast, size: 0, root: n / 2},
				stepSpec{op: opAllReduceSum, size: n - 1},
			)
			tcps := mustTCPRing(t, n, nil)
			tcpComms := make([]Communicator, n)
			for r, c := range tcps {
				if c.Rank() != r || c.Size() != n {
					t.Fatalf("Rank/Size = %d/%d, want %d/%d", c.Rank(), c.Size(), r, n)
				}
				tcpComms[r] = c
			}
			g := mustGroup(t, n)
			inComms := make([]Communicator, n)
			for r := range n {
				inComms[r] = g.Comm(r)
			}
			got := runSchedule(t, tcpComms, steps)
			want := runSchedule(t, inComms, steps)

			for s, sp := range steps {
				for r := range n {
					if len(got[r][s]) != len(want[r][s]) {
						t.Fatalf("step %d %v rank %d: len %d, want %d", s, sp.op, r, len(got[r][s]), len(want[r][s]))
					}
				}
				for i, w := range want[0][s] {
					g0 := got[0][s][i]
					for r := 1; r < n; r++ {
						if math.Float32bits(got[r][s][i]) != math.Float32bits(g0) {
							t.Fatalf("step %d %v size %d [%d]: rank %d has %v, rank 0 has %v: ranks disagree",
								s, sp.op, sp.size, i, r, got[r][s][i], g0)
						}
					}
					if sp.op != opAllReduceSum {
						if math.Float32bits(g0) != math.Float32bits(w) {
							t.Fatalf("step %d %v size %d [%d]: got %v, want %v (in-process group)", s, sp.op, sp.size, i, g0, w)
						}
						continue
					}
					// The ring adds in another order than the in-process
					// group's rank order: both are within n·ε·Σ|x| of the
					// exact sum.
					var abs float64
					for r := range n {
						abs += math.Abs(float64(value(s, r, i)))
					}
					if d := math.Abs(float64(g0) - float64(w)); d > 1e-6*abs {
						t.Fatalf("step %d AllReduceSum size %d [%d]: got %v, in-process %v: |Δ|=%g > 1e-6·Σ|x|=%g",
							s, sp.size, i, g0, w, d, 1e-6*abs)
					}
					if rs := ringSum(s, n, sp.size, i); math.Float32bits(g0) != math.Float32bits(rs) {
						t.Fatalf("step %d AllReduceSum size %d [%d]: got %v, want ring-order sum %v", s, sp.size, i, g0, rs)
					}
				}
			}
			for r, c := range tcps {
				if err := c.Aborted(); err != nil {
					t.Fatalf("rank %d: Aborted() = %v after a clean run", r, err)
				}
				if err := c.AsyncError(); err != nil {
					t.Fatalf("rank %d: AsyncError() = %v after a clean run", r, err)
				}
			}
		})
	}
}

func TestTCPSolo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialRing(context.Background(), TCPConfig{Rank: 0, Size: 1, Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("DialRing left the listener open: Accept = %v", err)
	}
	ctx := context.Background()
	buf := []float32{1, 2, 3}
	if err := c.AllReduceSum(ctx, buf); err != nil || buf[0] != 1 || buf[2] != 3 {
		t.Fatalf("AllReduceSum = %v, buf %v", err, buf)
	}
	recv := make([]float32, 3)
	if err := c.AllGather(ctx, buf, recv); err != nil || recv[1] != 2 {
		t.Fatalf("AllGather = %v, recv %v", err, recv)
	}
	if err := c.Broadcast(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Broadcast(ctx, buf, 1); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Broadcast root 1 of 1: %v, want ErrMismatch", err)
	}
	reason := errors.New("solo stop")
	c.Abort(reason)
	c.Abort(errors.New("second reason must not stick"))
	checkAborted(t, c.AllReduceSum(ctx, buf), reason)
	if err := c.AsyncError(); err != nil {
		t.Fatalf("AsyncError after local abort = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkPeerAborted checks that err is a ring abort whose text carries want.
func checkPeerAborted(t *testing.T, who string, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("%s: err = %v, want ErrAborted", who, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: err = %v, want it to mention %q", who, err, want)
	}
}

// startBlocked starts op on every rank in ranks; each blocks because some
// rank of the ring does not take part. It waits until all have started.
func startBlocked(t *testing.T, comms []*TCPComm, ranks []int, op opKind, size int) map[int]chan error {
	t.Helper()
	chs := make(map[int]chan error)
	for _, r := range ranks {
		ch := make(chan error, 1)
		chs[r] = ch
		go func() { ch <- callOp(comms[r], context.Background(), op, size) }()
	}
	for _, r := range ranks {
		waitFor(t, fmt.Sprintf("rank %d to start %v", r, op), comms[r].busy.Load)
	}
	return chs
}

func TestTCPAbortWhileBlocked(t *testing.T) {
	cases := []struct {
		n, absent, via int // absent: the rank that skips the op; via: the rank that aborts
		op             opKind
		size           int
	}{
		{2, 1, 1, opAllReduceSum, 8},
		{2, 1, 0, opAllGather, 100},
		{3, 0, 2, opBroadcast, 50000}, // callOp broadcasts from root 0
		{3, 0, 1, opAllReduceSum, 3},
		{4, 3, 3, opAllGather, 1},
		{4, 1, 2, opAllReduceSum, 70000},
		{4, 0, 0, opBroadcast, 0},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n=%d/absent=%d/via=%d/%v", tc.n, tc.absent, tc.via, tc.op), func(t *testing.T) {
			comms := mustTCPRing(t, tc.n, nil)
			var ranks []int
			for r := range tc.n {
				if r != tc.absent {
					ranks = append(ranks, r)
				}
			}
			chs := startBlocked(t, comms, ranks, tc.op, tc.size)
			reason := errors.New("rank lost: heartbeat timeout")
			start := time.Now()
			comms[tc.via].Abort(reason)
			comms[tc.via].Abort(errors.New("second reason must not stick"))
			for _, r := range ranks {
				err := recvErr(t, chs[r])
				if r == tc.via {
					checkAborted(t, err, reason)
				} else {
					checkPeerAborted(t, fmt.Sprintf("rank %d", r), err, reason.Error())
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("ranks took %v to return after Abort", d)
			}
			// Dead forever, everywhere; AsyncError only where a peer failed.
			for r, c := range comms {
				waitFor(t, fmt.Sprintf("rank %d to abort", r), func() bool { return c.Aborted() != nil })
				err := callOp(c, context.Background(), opAllReduceSum, 4)
				if !errors.Is(err, ErrAborted) {
					t.Fatalf("rank %d after abort: %v", r, err)
				}
				if r == tc.via {
					checkAborted(t, err, reason)
					if err := c.AsyncError(); err != nil {
						t.Fatalf("AsyncError on the aborting rank = %v, want nil", err)
					}
				} else if err := c.AsyncError(); err == nil || !strings.Contains(err.Error(), reason.Error()) {
					t.Fatalf("rank %d AsyncError = %v, want the peer's reason", r, err)
				}
			}
		})
	}
}

func TestTCPPeerClose(t *testing.T) {
	for _, tc := range []struct{ n, killed int }{{2, 1}, {3, 1}, {4, 2}, {4, 0}} {
		t.Run(fmt.Sprintf("blocked/n=%d/killed=%d", tc.n, tc.killed), func(t *testing.T) {
			comms := mustTCPRing(t, tc.n, nil)
			var ranks []int
			for r := range tc.n {
				if r != tc.killed {
					ranks = append(ranks, r)
				}
			}
			chs := startBlocked(t, comms, ranks, opAllReduceSum, 1000)
			comms[tc.killed].Close()
			name := fmt.Sprintf("rank %d", tc.killed)
			for _, r := range ranks {
				err := recvErr(t, chs[r])
				checkPeerAborted(t, fmt.Sprintf("rank %d", r), err, name)
				// A neighbour may hear of it directly or around the ring,
				// whichever is first: the chain of reasons names it anyway.
				var pe *PeerError
				if !errors.As(err, &pe) {
					t.Fatalf("rank %d: %v is no PeerError", r, err)
				}
				if a := comms[r].AsyncError(); a == nil || !strings.Contains(a.Error(), name) {
					t.Fatalf("rank %d AsyncError = %v", r, a)
				}
			}
		})
	}
	// An idle ring learns of a closed rank through the notices.
	t.Run("idle/n=3", func(t *testing.T) {
		comms := mustTCPRing(t, 3, nil)
		for range 3 { // some traffic first
			runSchedule(t, []Communicator{comms[0], comms[1], comms[2]}, []stepSpec{{op: opAllReduceSum, size: 33}})
		}
		comms[1].Close()
		for _, r := range []int{0, 2} {
			waitFor(t, fmt.Sprintf("rank %d AsyncError", r), func() bool { return comms[r].AsyncError() != nil })
			checkPeerAborted(t, fmt.Sprintf("rank %d", r), comms[r].AsyncError(), "rank 1")
			checkPeerAborted(t, fmt.Sprintf("rank %d", r), callOp(comms[r], context.Background(), opBroadcast, 5), "rank 1")
		}
	})
}

func TestTCPHandshakeRefused(t *testing.T) {
	t.Run("group-token", func(t *testing.T) {
		_, errs := tcpRing(t, 2, func(r int, cfg *TCPConfig) {
			cfg.DialTimeout = 2 * time.Second
			if r == 1 {
				cfg.Group = "test-generation-2"
			}
		})
		var clear int
		for r, err := range errs {
			if err == nil {
				t.Fatalf("rank %d formed a ring with a wrong group token", r)
			}
			if errors.Is(err, ErrHandshake) && strings.Contains(err.Error(), "group token mismatch") {
				clear++
			}
		}
		if clear == 0 {
			t.Fatalf("no rank reports the token mismatch: %v", errs)
		}
	})
	t.Run("size", func(t *testing.T) {
		lns, addrs := loopbackListeners(t, 3) // lns[2] never accepts
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			cfg := TCPConfig{Rank: r, Size: 2, Addrs: addrs[:2], Group: testGroup, DialTimeout: deadline, Listener: lns[r]}
			if r == 1 {
				cfg.Size, cfg.Addrs = 3, addrs
			}
			wg.Go(func() {
				var c *TCPComm
				c, errs[r] = DialRing(context.Background(), cfg)
				if c != nil {
					c.Close()
				}
			})
		}
		wg.Wait()
		for r, err := range errs {
			if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "group size mismatch") {
				t.Fatalf("rank %d: %v, want ErrHandshake naming the size mismatch", r, err)
			}
		}
	})
	t.Run("stale-connection-refused", func(t *testing.T) {
		lns, addrs := loopbackListeners(t, 2)
		comms := make([]*TCPComm, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		dial := func(r int) {
			cfg := TCPConfig{Rank: r, Size: 2, Addrs: addrs, Group: testGroup, Listener: lns[r]}
			wg.Go(func() { comms[r], errs[r] = DialRing(context.Background(), cfg) })
		}
		dial(0)
		// A stranger and a stale generation's rank 1 reach rank 0 while it
		// waits for rank 1.
		stranger, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer stranger.Close()
		if _, err := stranger.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		stale, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer stale.Close()
		if err := writeHello(stale, hello{kind: helloRequest, version: tcpVersion, rank: 1, size: 2, token: "test-generation-0"}); err != nil {
			t.Fatal(err)
		}
		stale.SetDeadline(time.Now().Add(deadline))
		reply, err := readHello(stale)
		if err != nil || reply.kind != helloRefuse || !strings.Contains(reply.msg, "group token mismatch") {
			t.Fatalf("stale rank got %+v, %v; want a refusal naming the token", reply, err)
		}
		dial(1)
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			defer comms[r].Close()
		}
		runSchedule(t, []Communicator{comms[0], comms[1]}, []stepSpec{{op: opAllReduceSum, size: 5}})
	})
	t.Run("version", func(t *testing.T) {
		lns, addrs := loopbackListeners(t, 2) // lns[1] never accepts
		odd, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer odd.Close()
		if err := writeHello(odd, hello{kind: helloRequest, version: 99, rank: 1, size: 2, token: testGroup}); err != nil {
			t.Fatal(err)
		}
		_, err = DialRing(context.Background(), TCPConfig{Rank: 0, Size: 2, Addrs: addrs, Group: testGroup, DialTimeout: deadline, Listener: lns[0]})
		if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "protocol version") {
			t.Fatalf("DialRing = %v, want ErrHandshake naming the version", err)
		}
	})
	t.Run("dial-timeout", func(t *testing.T) {
		lns, addrs := loopbackListeners(t, 2) // nobody plays rank 1
		_, err := DialRing(context.Background(), TCPConfig{Rank: 0, Size: 2, Addrs: addrs, Group: testGroup, DialTimeout: 200 * time.Millisecond, Listener: lns[0]})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("DialRing = %v, want a timeout naming rank 1", err)
		}
	})
}

func TestTCPConfigErrors(t *testing.T) {
	for _, cfg := range []TCPConfig{
		{Rank: 0, Size: 0},
		{Rank: 2, Size: 2, Addrs: []string{"a:1", "b:1"}},
		{Rank: -1, Size: 2, Addrs: []string{"a:1", "b:1"}},
		{Rank: 0, Size: 3, Addrs: []string{"a:1", "b:1"}},
		{Rank: 0, Size: 2, Addrs: []string{"a:1", "b:1"}, Group: strings.Repeat("x", maxHelloString+1)},
	} {
		if _, err := DialRing(context.Background(), cfg); err == nil {
			t.Fatalf("DialRing(%+v) succeeded", cfg)
		}
	}
}

func TestTCPOpTimeout(t *testing.T) {
	const opTimeout = 400 * time.Millisecond
	comms := mustTCPRing(t, 2, func(_ int, cfg *TCPConfig) { cfg.OpTimeout = opTimeout })
	// Traffic within the timeout is fine.
	runSchedule(t, []Communicator{comms[0], comms[1]}, schedule(2, 20, 7))
	start := time.Now()
	err := comms[0].AllReduceSum(context.Background(), make([]float32, 64)) // rank 1 never joins
	if d := time.Since(start); d < opTimeout {
		t.Fatalf("returned after %v, before OpTimeout %v", d, opTimeout)
	}
	var pe *PeerError
	if !errors.Is(err, ErrAborted) || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &pe) || pe.Rank != 1 {
		t.Fatalf("err = %v, want ErrAborted with a deadline PeerError on rank 1", err)
	}
	if a := comms[0].AsyncError(); a == nil {
		t.Fatal("AsyncError = nil after OpTimeout")
	}
	waitFor(t, "rank 1 to learn of the timeout", func() bool { return comms[1].AsyncError() != nil })
	checkPeerAborted(t, "rank 1", callOp(comms[1], context.Background(), opAllReduceSum, 64), "OpTimeout")
}

func TestTCPContextCancel(t *testing.T) {
	t.Run("blocked", func(t *testing.T) {
		comms := mustTCPRing(t, 3, nil)
		peer := startBlocked(t, comms, []int{0}, opAllReduceSum, 32)[0]
		ctx, cancel := context.WithCancel(context.Background())
		mine := make(chan error, 1)
		go func() { mine <- callOp(comms[1], ctx, opAllReduceSum, 32) }()
		waitFor(t, "rank 1 to start", comms[1].busy.Load)
		cancel()
		if err := recvErr(t, mine); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrAborted) {
			t.Fatalf("canceller: %v, want context.Canceled and ErrAborted", err)
		}
		checkPeerAborted(t, "rank 0", recvErr(t, peer), "abandoned")
		waitFor(t, "rank 2 to abort", func() bool { return comms[2].AsyncError() != nil })
		if err := comms[1].AsyncError(); err != nil {
			t.Fatalf("AsyncError on the canceller = %v, want nil", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		comms := mustTCPRing(t, 2, nil)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if err := callOp(comms[0], ctx, opAllGather, 4); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrAborted) {
			t.Fatalf("expired ctx: %v", err)
		}
		waitFor(t, "rank 1 to abort", func() bool { return comms[1].AsyncError() != nil })
		checkPeerAborted(t, "rank 1", callOp(comms[1], context.Background(), opAllGather, 4), "abandoned")
	})
}

func TestTCPMismatch(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		local int // rank that must report ErrMismatch itself; -1: any
		call  func(c *TCPComm) error
	}{
		{"op", 2, -1, func(c *TCPComm) error {
			if c.Rank() == 0 {
				return c.AllReduceSum(context.Background(), make([]float32, 5))
			}
			return c.Broadcast(context.Background(), make([]float32, 5), 0)
		}},
		{"allreduce-size", 3, -1, func(c *TCPComm) error {
			return c.AllReduceSum(context.Background(), make([]float32, 10+c.Rank()%2))
		}},
		{"broadcast-root", 3, -1, func(c *TCPComm) error {
			return c.Broadcast(context.Background(), make([]float32, 5), c.Rank()%2)
		}},
		{"allgather-recv", 4, 2, func(c *TCPComm) error {
			l := 4 * 4
			if c.Rank() == 2 {
				l--
			}
			return c.AllGather(context.Background(), make([]float32, 4), make([]float32, l))
		}},
		{"broadcast-root-range", 2, 1, func(c *TCPComm) error {
			return c.Broadcast(context.Background(), make([]float32, 5), 7*c.Rank())
		}},
		{"seq", 3, -1, func(c *TCPComm) error {
			if c.Rank() == 1 {
				c.seq++ // as if rank 1 had run one collective more
			}
			return c.AllReduceSum(context.Background(), make([]float32, 9))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comms := mustTCPRing(t, tc.n, nil)
			errs := make([]error, tc.n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() { errs[r] = tc.call(c) })
			}
			wg.Wait()
			var mismatch int
			for r, err := range errs {
				if !errors.Is(err, ErrAborted) {
					t.Fatalf("rank %d: %v, want ErrAborted", r, err)
				}
				if errors.Is(err, ErrMismatch) {
					mismatch++
				} else if r == tc.local {
					t.Fatalf("rank %d: %v, want ErrMismatch", r, err)
				}
				if !strings.Contains(err.Error(), ErrMismatch.Error()) {
					t.Fatalf("rank %d: %v does not tell of the mismatch", r, err)
				}
			}
			if mismatch == 0 {
				t.Fatalf("no rank reports ErrMismatch: %v", errs)
			}
			if tc.name == "seq" && !strings.Contains(fmt.Sprint(errs), "seq=") {
				t.Fatalf("errors do not show the sequence numbers: %v", errs)
			}
		})
	}
}

func TestTCPConcurrentUse(t *testing.T) {
	comms := mustTCPRing(t, 2, nil)
	ch := startBlocked(t, comms, []int{0}, opAllReduceSum, 4)[0]
	if err := callOp(comms[0], context.Background(), opAllReduceSum, 4); !errors.Is(err, ErrConcurrentUse) {
		t.Fatalf("second concurrent call: %v, want ErrConcurrentUse", err)
	}
	if err := callOp(comms[1], context.Background(), opAllReduceSum, 4); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, ch); err != nil {
		t.Fatal(err)
	}
}

// TestTCPAbortRace aborts at random moments while ranks run collectives
// back to back: every rank must return (ErrAborted), never hang.
func TestTCPAbortRace(t *testing.T) {
	for i := range 20 {
		n := 2 + i%3
		comms := mustTCPRing(t, n, nil)
		ch := make(chan error, n)
		for r := range n {
			go func() {
				for k := 0; ; k++ {
					if err := callOp(comms[r], context.Background(), opKind(1+k%3), 1+k%200); err != nil {
						ch <- err
						return
					}
				}
			}()
		}
		for range i % 5 * 20 {
			runtime.Gosched()
		}
		reason := fmt.Errorf("stop %d", i)
		via := i % n
		comms[via].Abort(reason)
		for range n {
			if err := recvErr(t, ch); !errors.Is(err, ErrAborted) {
				t.Fatalf("iteration %d: %v, want ErrAborted", i, err)
			}
		}
		checkAborted(t, comms[via].Aborted(), reason)
	}
}

func TestTCPNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := range 3 {
		lns, addrs := loopbackListeners(t, 3)
		comms := make([]*TCPComm, 3)
		var wg sync.WaitGroup
		for r := range 3 {
			wg.Go(func() {
				var err error
				comms[r], err = DialRing(context.Background(), TCPConfig{Rank: r, Size: 3, Addrs: addrs, Group: testGroup, Listener: lns[r]})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		runSchedule(t, []Communicator{comms[0], comms[1], comms[2]}, schedule(3, 30, uint64(i)))
		if i == 1 {
			comms[0].Abort(errors.New("done"))
		}
		for _, c := range comms {
			c.Close()
		}
	}
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

func benchAllReduce(b *testing.B, comms []Communicator, size int) {
	n := len(comms)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, size/4) // zeros: repeated sums would overflow
	}
	ctx := context.Background()
	errs := make([]error, n)
	var wg sync.WaitGroup
	b.SetBytes(int64(size))
	b.ResetTimer()
	for r := 1; r < n; r++ {
		wg.Go(func() {
			for range b.N {
				if err := comms[r].AllReduceSum(ctx, bufs[r]); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	for range b.N {
		if err := comms[0].AllReduceSum(ctx, bufs[0]); err != nil {
			comms[0].Abort(err)
			errs[0] = err
			break
		}
	}
	wg.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/op")
}

// BenchmarkTCPAllReduce runs the TCP ring (over loopback) and the in-process
// group side by side at the same sizes.
func BenchmarkTCPAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
			for _, impl := range []string{"inproc", "tcp"} {
				b.Run(fmt.Sprintf("ranks=%d/bytes=%d/%s", n, size, impl), func(b *testing.B) {
					comms := make([]Communicator, n)
					if impl == "tcp" {
						for r, c := range mustTCPRing(b, n, nil) {
							comms[r] = c
						}
					} else {
						comms = groupComms(mustGroup(b, n))
					}
					benchAllReduce(b, comms, size)
				})
			}
		}
	}
}

// TestTCPPortableCodec runs the ring with the byte-by-byte encoding of
// big-endian hosts (the wire stays little-endian): results must not change.
func TestTCPPortableCodec(t *testing.T) {
	steps := schedule(3, 60, 42)
	steps = append(steps, stepSpec{op: opAllReduceSum, size: 70001}, stepSpec{op: opBroadcast, size: 40000, root: 2})
	run := func() [][][]float32 {
		comms := mustTCPRing(t, 3, nil)
		res := runSchedule(t, []Communicator{comms[0], comms[1], comms[2]}, steps)
		for _, c := range comms {
			c.Close()
		}
		return res
	}
	native := run()
	if !hostLE {
		t.Skip("big-endian host: the portable codec is the native one")
	}
	hostLE = false // no ring runs now
	portable := run()
	hostLE = true
	for s := range steps {
		for r := range 3 {
			for i, v := range native[r][s] {
				if math.Float32bits(portable[r][s][i]) != math.Float32bits(v) {
					t.Fatalf("step %d rank %d [%d]: portable %v, native %v", s, r, i, portable[r][s][i], v)
				}
			}
		}
	}
}
