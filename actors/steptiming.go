package actors

import (
	"fmt"
	"log"
	"os"
	"strings"
	"time"
)

// stepTiming accumulates where a rank's steps spend their wall time, when
// COHORT_STEP_TIMING=1: the forward call (the host's work until the step is
// enqueued on the device: the model's ops, or a recorded step's replay),
// the wait for its logits (device time not hidden by the host), and
// sampling. Decode steps (every sequence one token) and the others
// (prefill chunks, mixed steps) are kept apart, and each kind logs its
// means every stepTimingEvery steps. A rank's is owned by its executor
// goroutine; the scheduler keeps one of its own (newEngineTiming) for what
// happens around the ranks' steps.
type stepTiming struct {
	on        bool
	each      bool // the scheduler's: log every step (logStep)
	eachOther bool // a rank's: log every other (prefill, mixed) step's phases
	who       string
	phases    [4]string
	kinds     [2]phaseSums // 0: decode, 1: other
}

// phaseSums are one kind of step's accumulated phases.
type phaseSums struct {
	n int
	d [4]time.Duration
}

const stepTimingEvery = 30

// With COHORT_STEP_TIMING=steps a rank also logs each step that is not a
// decode step (a long prefill is often a step of its own, which a mean over
// 30 would hide).
func newStepTiming(rank int) *stepTiming {
	return &stepTiming{on: stepTimingOn(), eachOther: stepTimingEach(), who: fmt.Sprintf("rank %d", rank),
		phases: [4]string{"forward (host)", "logits wait", "sampling", "step"}}
}

// newEngineTiming is the scheduler's record, per step: the round trip from
// sending the step to the last rank's reply, handing the results to the
// request actors, the wait from there until the next step is planned (the
// other messages the engine root handles first), and planning it.
func newEngineTiming() *stepTiming {
	return &stepTiming{on: stepTimingOn(), each: stepTimingEach(), who: "scheduler",
		phases: [4]string{"round trip", "results", "wait to plan", "planning"}}
}

// stepTimingOn reports COHORT_STEP_TIMING=1 (or =steps, which also logs
// every step the scheduler completes: see stepTimingEach).
func stepTimingOn() bool { v := os.Getenv("COHORT_STEP_TIMING"); return v == "1" || v == "steps" }

// stepTimingEach reports COHORT_STEP_TIMING=steps.
func stepTimingEach() bool { return os.Getenv("COHORT_STEP_TIMING") == "steps" }

// add records one step's phases, in the order of t.phases (a nil
// stepTiming records nothing).
func (t *stepTiming) add(decode bool, phases ...time.Duration) {
	if t == nil || !t.on {
		return
	}
	k, name := &t.kinds[1], "other"
	if decode {
		k, name = &t.kinds[0], "decode"
	}
	k.n++
	var one [4]time.Duration
	for i, d := range phases[:min(len(phases), len(k.d))] {
		k.d[i] += d
		one[i] = d
	}
	if t.eachOther && !decode {
		log.Printf("actors: %s: other step: %s", t.who, t.phaseList(one, 1))
	}
	if k.n < stepTimingEvery {
		return
	}
	log.Printf("actors: %s: mean over %d %s steps: %s", t.who, k.n, name, t.phaseList(k.d, k.n))
	*k = phaseSums{}
}

// phaseList formats sums over n steps as the phases' means.
func (t *stepTiming) phaseList(d [4]time.Duration, n int) string {
	var b strings.Builder
	for i, p := range t.phases {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", p, d[i]/time.Duration(n))
	}
	return b.String()
}

// enabled reports whether t records (false for nil).
func (t *stepTiming) enabled() bool { return t != nil && t.on }
