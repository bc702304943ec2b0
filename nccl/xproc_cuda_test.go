//go:build cuda

package nccl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// xprocEnv makes the test binary the second rank of
// TestAllReduceLatencyProcesses: "<unique id in hex>,<rank>,<device>".
const xprocEnv = "COHORT_NCCL_XPROC_RANK"

// latencyBytes are the all-reduce sizes measured (float32 buffers).
var latencyBytes = []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10}

// measureAllReduce times c's device all-reduce of every latencyBytes size
// on the calling rank's thread: 20 calls to warm up, then iters calls back
// to back on one stream, waited for at the end (waitStream polls every
// 100 µs: at most 0.5 µs per call at 200 calls). It returns µs per call.
func measureAllReduce(c DeviceCommunicator, iters int) ([]float64, error) {
	s, err := streamCreate()
	if err != nil {
		return nil, err
	}
	defer streamDestroy(s)
	buf, err := devAlloc(latencyBytes[len(latencyBytes)-1])
	if err != nil {
		return nil, err
	}
	defer devFree(buf)
	var out []float64
	for _, size := range latencyBytes {
		call := func(n int) error {
			for range n {
				if err := c.AllReduceSumDevice(uintptr(buf), size/4, s); err != nil {
					return err
				}
			}
			return waitStream(s, 30*time.Second)
		}
		if err := call(20); err != nil {
			return nil, fmt.Errorf("%d bytes: %w", size, err)
		}
		start := time.Now()
		if err := call(iters); err != nil {
			return nil, fmt.Errorf("%d bytes: %w", size, err)
		}
		out = append(out, float64(time.Since(start).Nanoseconds())/1e3/float64(iters))
	}
	return out, nil
}

// joinAndMeasure joins the group of id as rank on device, on a thread of
// its own, and measures it.
func joinAndMeasure(t *testing.T, id []byte, rank, device, iters int) ([]float64, error) {
	c, err := JoinGroup(id, rank, 2, device)
	if err != nil {
		return nil, err
	}
	defer c.Abort(errors.New("test done"))
	var us []float64
	startGPURank(t, device).do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err = c.Init(ctx); err == nil {
			us, err = measureAllReduce(c, iters)
		}
	})
	return us, err
}

// TestAllReduceLatencyProcesses prints NCCL's device all-reduce time per
// call, float32, 4-256 KiB, eager (back-to-back calls on a stream), between
// two ranks in this process (a DeviceGroup on GPUs 0 and 1) and between two
// processes (this one, rank 0 on GPU 0, and the test binary re-executed as
// rank 1 on GPU 1, joined by one ncclGetUniqueId as cohort worker ranks
// are). The slowest rank's time counts. It measures, it does not judge.
// (kernels/cuda TestAllReduceLatency has the one-shot kernel and graphs.)
func TestAllReduceLatencyProcesses(t *testing.T) {
	const iters = 200
	if spec := os.Getenv(xprocEnv); spec != "" { // the second rank
		f := strings.Split(spec, ",")
		id, err := hex.DecodeString(f[0])
		if err != nil || len(f) != 3 {
			t.Fatalf("%s=%q: want <id hex>,<rank>,<device>", xprocEnv, spec)
		}
		rank, _ := strconv.Atoi(f[1])
		device, _ := strconv.Atoi(f[2])
		us, err := joinAndMeasure(t, id, rank, device, iters)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range latencyBytes {
			fmt.Printf("latency bytes=%d us=%.3f\n", b, us[i])
		}
		return
	}
	gpus(t, 2)

	// in-process: two ranks of one DeviceGroup
	g := newGroup(t, []int{0, 1})
	ranks := []*gpuRank{startGPURank(t, 0), startGPURank(t, 1)}
	local := make([][]float64, 2)
	firstErr(t, onRanks(ranks, func(r int) error {
		c := g.Comm(r)
		if err := c.Init(context.Background()); err != nil {
			return err
		}
		var err error
		local[r], err = measureAllReduce(c, iters)
		return err
	}))

	// across processes
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAllReduceLatencyProcesses$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,1,1", xprocEnv, hex.EncodeToString(id)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mine, err := joinAndMeasure(t, id, 0, 0, iters)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("rank 0: %v; rank 1's output:\n%s", err, out.String())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rank 1's process: %v:\n%s", err, out.String())
	}
	peer := map[int]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var b int
		var us float64
		if n, _ := fmt.Sscanf(sc.Text(), "latency bytes=%d us=%g", &b, &us); n == 2 {
			peer[b] = us
		}
	}
	t.Logf("NCCL all-reduce of float32 across 2 GPUs, µs per call (slowest rank; %d back-to-back calls on a stream, eager)", iters)
	t.Logf("%8s %12s %14s %8s", "bytes", "in-process", "2 processes", "×")
	for i, b := range latencyBytes {
		p, ok := peer[b]
		if !ok {
			t.Fatalf("rank 1 reported no time for %d bytes:\n%s", b, out.String())
		}
		in, x := max(local[0][i], local[1][i]), max(mine[i], p)
		t.Logf("%8d %12.2f %14.2f %8.2f", b, in, x, x/in)
	}
}
