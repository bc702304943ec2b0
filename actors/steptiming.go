package actors

import (
	"log"
	"os"
	"time"
)

// stepTiming accumulates where a rank's steps spend their wall time, when
// COHORT_STEP_TIMING=1: the forward call (the host's work until the step is
// enqueued on the device: the model's ops, or a recorded step's replay),
// the wait for its logits (device time not hidden by the host), and
// sampling. Decode steps (every sequence one token) and the others
// (prefill chunks, mixed steps) are kept apart, and each kind logs its
// means every stepTimingEvery steps. It is owned by the rank's executor
// goroutine.
type stepTiming struct {
	on    bool
	rank  int
	kinds [2]phaseSums // 0: decode, 1: other
}

// phaseSums are one kind of step's accumulated phases.
type phaseSums struct {
	n                        int
	forward, wait, pick, all time.Duration
}

const stepTimingEvery = 30

func newStepTiming(rank int) *stepTiming {
	return &stepTiming{on: os.Getenv("COHORT_STEP_TIMING") == "1", rank: rank}
}

// add records one step's phases (a nil stepTiming records nothing).
func (t *stepTiming) add(decode bool, forward, wait, pick, all time.Duration) {
	if t == nil || !t.on {
		return
	}
	k, name := &t.kinds[1], "other"
	if decode {
		k, name = &t.kinds[0], "decode"
	}
	k.n++
	k.forward += forward
	k.wait += wait
	k.pick += pick
	k.all += all
	if k.n < stepTimingEvery {
		return
	}
	n := time.Duration(k.n)
	log.Printf("actors: rank %d: mean over %d %s steps: forward (host) %v, logits wait %v, sampling %v, step %v",
		t.rank, k.n, name, k.forward/n, k.wait/n, k.pick/n, k.all/n)
	*k = phaseSums{}
}
