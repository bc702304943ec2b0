package actors

import (
	"context"
	"sync/atomic"

	"cohort/nccl"
)

// countingComm counts the collectives its rank has entered, so that when a
// step misses its deadline the engine can tell the rank that hung (it
// entered fewer collectives than its peers, which wait for it inside the
// next one) from the peers blocked on it. The engine reads the count
// directly; for a rank on a worker the wrapped communicator is only the
// engine's handle and the count stays 0.
type countingComm struct {
	nccl.Communicator
	entered atomic.Uint64
}

func (c *countingComm) AllReduceSum(ctx context.Context, buf []float32) error {
	c.entered.Add(1)
	return c.Communicator.AllReduceSum(ctx, buf)
}

func (c *countingComm) AllGather(ctx context.Context, send, recv []float32) error {
	c.entered.Add(1)
	return c.Communicator.AllGather(ctx, send, recv)
}

func (c *countingComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	c.entered.Add(1)
	return c.Communicator.Broadcast(ctx, buf, root)
}

// hungRanks returns the ranks to blame for a step that missed its deadline:
// among the ranks that did not reply, those that entered the fewest
// collectives, when that is fewer than some other rank entered; otherwise
// every rank that did not reply.
func hungRanks(replied []bool, entered []uint64) []int {
	var missing []int
	for r, ok := range replied {
		if !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) < 2 || len(entered) != len(replied) {
		return missing
	}
	lo, hi := entered[missing[0]], entered[0]
	for _, r := range missing {
		lo = min(lo, entered[r])
	}
	for _, n := range entered {
		hi = max(hi, n)
	}
	if lo == hi {
		return missing
	}
	var behind []int
	for _, r := range missing {
		if entered[r] == lo {
			behind = append(behind, r)
		}
	}
	return behind
}
