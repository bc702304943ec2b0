package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// The progress watchdog (Config.ProgressTimeout): while the group serves
// and the engine root holds requests, a step must complete at least once
// per bound, or readiness turns false with the reason; it turns true again
// when a step completes, or when no request is left (see
// supervision.Progress). The bound is ProgressTimeout, or twice the
// predicted duration of the step in flight when that is longer, so a step
// measured to be long is not taken for a stall. It only reports: the step
// deadline (or the rank's own failure) still tears the group down.

// progressTick returns how often the watchdog looks, for a bound d.
func progressTick(d time.Duration) time.Duration { return max(d/4, time.Millisecond) }

// startWatchdog ticks the engine root (checkProgress) until stopWatchdog
// (nothing when the watchdog is off).
func (s *scheduler) startWatchdog(ctx actor.Context) {
	if s.cfg.ProgressTimeout <= 0 {
		return
	}
	stop := make(chan struct{})
	s.stopTicks = func() { close(stop) }
	root, self := ctx.ActorSystem().Root, ctx.Self()
	go func() {
		t := time.NewTicker(progressTick(s.cfg.ProgressTimeout))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				root.Send(self, &checkProgress{})
			}
		}
	}()
}

// stopWatchdog ends the watchdog's ticks.
func (s *scheduler) stopWatchdog() {
	if s.stopTicks != nil {
		s.stopTicks()
		s.stopTicks = nil
	}
}

// progressBound is how long the engine may go without completing a step.
func (s *scheduler) progressBound() time.Duration {
	b := s.cfg.ProgressTimeout
	if f := s.inflight; f != nil && s.cost.Known() {
		b = max(b, 2*s.cost.Predict(f.tokens))
	}
	return b
}

// watchProgress runs the watchdog at now and turns readiness with it; it
// watches only while a group serves.
func (s *scheduler) watchProgress(now time.Time, serving bool) {
	if s.cfg.ProgressTimeout <= 0 || !serving {
		return
	}
	bound := s.progressBound()
	stalled, changed := s.progress.Check(now, len(s.live) > 0, bound)
	switch {
	case !changed:
	case stalled:
		s.stats.stalled()
		s.health.SetReady(false, s.stallReason(now, bound))
	default:
		s.health.SetReady(true, "")
	}
}

// stepProgressed records a completed step; it ends a stall. (A step
// completes only while its group serves.)
func (s *scheduler) stepProgressed(now time.Time) {
	if s.progress.Mark(now) {
		s.health.SetReady(true, "")
	}
}

// stallReason says why the watchdog turned readiness off.
func (s *scheduler) stallReason(now time.Time, bound time.Duration) string {
	st := s.planStats()
	why := fmt.Sprintf("actors: no progress: no engine step completed for %v with %d requests waiting or running (bound %v)",
		s.progress.Since(now).Round(time.Millisecond), len(s.live), bound)
	if f := s.inflight; f != nil {
		replied := 0
		for _, ok := range f.replied {
			if ok {
				replied++
			}
		}
		return why + fmt.Sprintf("; step %d (%d tokens) running for %v, %d of %d ranks replied",
			f.plan.Step, f.tokens, now.Sub(f.started).Round(time.Millisecond), replied, len(f.replied))
	}
	return why + fmt.Sprintf("; no step was planned (%d running, %d waiting)", st.Running, st.Waiting)
}
