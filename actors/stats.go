package actors

import (
	"sync"
	"time"

	"cohort/supervision"
)

// supervisionStats counts what supervision did, for metrics and tests.
type supervisionStats struct {
	mu       sync.Mutex
	failures map[supervision.Cause]int
	rebuilds int
	replays  int
	stuck    int
	stalls   int
	recovery []time.Duration
	deathErr error
}

// SupervisionStats is a snapshot of supervisionStats.
type SupervisionStats struct {
	Failures map[supervision.Cause]int
	Rebuilds int
	Replayed int // in-flight requests requeued for replay
	// Recovery lists detect → ready durations, one per completed recovery.
	Recovery   []time.Duration
	StuckAbort int // communicator aborts that did not return in time
	// Stalls counts the times the progress watchdog turned readiness off.
	Stalls   int
	Poisoned bool
	Dead     error
}

func newSupervisionStats() *supervisionStats {
	return &supervisionStats{failures: map[supervision.Cause]int{}}
}

func (st *supervisionStats) failed(f *supervision.RankFailure) {
	st.mu.Lock()
	st.failures[f.Cause]++
	st.mu.Unlock()
}

func (st *supervisionStats) rebuilt()          { st.mu.Lock(); st.rebuilds++; st.mu.Unlock() }
func (st *supervisionStats) replayed(n int)    { st.mu.Lock(); st.replays += n; st.mu.Unlock() }
func (st *supervisionStats) stuckAborts(n int) { st.mu.Lock(); st.stuck += n; st.mu.Unlock() }
func (st *supervisionStats) stalled()          { st.mu.Lock(); st.stalls++; st.mu.Unlock() }
func (st *supervisionStats) died(err error)    { st.mu.Lock(); st.deathErr = err; st.mu.Unlock() }
func (st *supervisionStats) recovered(d time.Duration) {
	st.mu.Lock()
	st.recovery = append(st.recovery, d)
	st.mu.Unlock()
}

// retryAfter is the longest of the last 5 recoveries, or fallback.
func (st *supervisionStats) retryAfter(fallback time.Duration) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.recovery) == 0 {
		return fallback
	}
	var d time.Duration
	for _, r := range st.recovery[max(0, len(st.recovery)-5):] {
		d = max(d, r)
	}
	return d
}

func (st *supervisionStats) deathReason() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.deathErr == nil {
		return ""
	}
	return st.deathErr.Error()
}

func (st *supervisionStats) snapshot(poisoned bool) SupervisionStats {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := SupervisionStats{Failures: map[supervision.Cause]int{}, Rebuilds: st.rebuilds, Replayed: st.replays,
		Recovery: append([]time.Duration(nil), st.recovery...), StuckAbort: st.stuck, Stalls: st.stalls, Poisoned: poisoned, Dead: st.deathErr}
	for c, n := range st.failures {
		out.Failures[c] = n
	}
	return out
}
