package supervision

import "time"

// Progress is a watchdog over an engine's progress: while it has work
// (requests waiting or running) it must complete a step at least once per
// bound, or it is stalled. The step deadline catches a step whose replies
// do not all arrive; Progress also catches an engine that has work but
// runs no step at all, and it reports a stall through readiness (new
// requests go elsewhere) before the deadline tears the group down.
//
// It keeps no clock: every call is given the time, so that tests can drive
// it with an injected one. The zero value is idle and not stalled. It is
// not safe for concurrent use (the engine root owns it).
type Progress struct {
	last    time.Time // the latest progress: a completed step, serving (re)started, work arriving
	busy    bool      // work was present at the last call
	stalled bool
}

// Mark records progress at now: a step completed, or the group started
// serving (again). A stall is counted from the latest Mark while the work
// stays, and from its arrival when the engine was idle in between (seen by
// a Check that found no work). It reports whether it ended a stall.
func (p *Progress) Mark(now time.Time) (ended bool) {
	ended = p.stalled
	p.last = now
	p.busy, p.stalled = true, false
	return ended
}

// Check reports, at now, whether the engine is stalled: it has work (busy)
// and made no progress for longer than bound. The time since work arrived
// at an idle engine counts, the idle time before it does not. changed says
// whether the answer differs from the previous Check's. An engine without
// work is never stalled: with nothing to run there is no evidence of a
// stall, and a readiness that waited for a step would never return.
func (p *Progress) Check(now time.Time, busy bool, bound time.Duration) (stalled, changed bool) {
	if busy && !p.busy {
		p.last = now // work arrived while idle: the clock starts now
	}
	p.busy = busy
	was := p.stalled
	p.stalled = busy && bound > 0 && now.Sub(p.last) > bound
	return p.stalled, p.stalled != was
}

// Stalled reports the last Check's answer (false after Mark).
func (p *Progress) Stalled() bool { return p.stalled }

// Since returns how long before now the latest progress was.
func (p *Progress) Since(now time.Time) time.Duration { return now.Sub(p.last) }
