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
// sampling. It logs the means every stepTimingEvery steps. It is owned by
// the rank's executor goroutine.
type stepTiming struct {
	on                       bool
	rank                     int
	n                        int
	forward, wait, pick, all time.Duration
}

const stepTimingEvery = 30

func newStepTiming(rank int) *stepTiming {
	return &stepTiming{on: os.Getenv("COHORT_STEP_TIMING") == "1", rank: rank}
}

// add records one step's phases (a nil stepTiming records nothing).
func (t *stepTiming) add(forward, wait, pick, all time.Duration) {
	if t == nil || !t.on {
		return
	}
	t.n++
	t.forward += forward
	t.wait += wait
	t.pick += pick
	t.all += all
	if t.n < stepTimingEvery {
		return
	}
	n := time.Duration(t.n)
	log.Printf("actors: rank %d: mean over %d steps: forward (host) %v, logits wait %v, sampling %v, step %v",
		t.rank, t.n, t.forward/n, t.wait/n, t.pick/n, t.all/n)
	*t = stepTiming{on: true, rank: t.rank}
}
