package main

import (
	"context"
	"flag"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors"
	"cohort/httpapi/metrics"
	"cohort/supervision"
)

// failurePolicy holds the serve flags of the failure contract.
type failurePolicy struct {
	stepDeadline, stepTarget, rebuildWindow time.Duration
	progressTimeout                         time.Duration
	maxRebuilds, maxReplays                 int
	replay, debugFaults                     bool
}

func (p *failurePolicy) register(fs *flag.FlagSet) {
	fs.DurationVar(&p.stepDeadline, "step-deadline", time.Minute, "a step's replies must all arrive within this, or within 4× the step's measured cost when that is longer (a hung rank is detected after it)")
	fs.DurationVar(&p.stepTarget, "step-target", 0, "steps are sized (prefill tokens) to take about this long, from their measured cost (0: min(1s, step-deadline/4))")
	fs.DurationVar(&p.progressTimeout, "progress-timeout", 0, "/ready turns false while requests wait or run and no step completed for this long (or 2× the running step's measured cost), and true again when steps complete (0: step-deadline/2; negative: off)")
	fs.IntVar(&p.maxReplays, "max-replays", 3, "a request in this many failed steps in a row (no progress between) ends with an error instead of another replay")
	fs.IntVar(&p.maxRebuilds, "max-rebuilds", 5, "restart intensity: more than this many group rebuilds ...")
	fs.DurationVar(&p.rebuildWindow, "rebuild-window", time.Minute, "... within this window stops the process (exit 1)")
	fs.BoolVar(&p.replay, "replay", true, "replay in-flight requests after a group rebuild (else they end with an error)")
	fs.BoolVar(&p.debugFaults, "debug-faults", false, "enable POST /debug/faults (fault injection for chaos drills; never in production)")
}

// supervisionObserver turns the engine's supervision hooks into metrics and
// a recovery span. The metrics registry belongs to the HTTP server, created
// after the engine, so the hooks read it through an atomic pointer.
type supervisionObserver struct {
	m      atomic.Pointer[supervisionMetrics]
	tracer atomic.Pointer[trace.Tracer]
	cause  atomic.Value // supervision.Cause of the failure being recovered
}

type supervisionMetrics struct {
	failures *metrics.CounterVec
	rebuilds *metrics.CounterVec
	replayed *metrics.CounterVec
	recovery *metrics.Histogram
	poisoned *metrics.Gauge
}

func (o *supervisionObserver) attach(reg *metrics.Registry, tp trace.TracerProvider) {
	m := &supervisionMetrics{
		failures: reg.Counter("cohort:rank_failures_total", "Rank failures detected, by cause.", "cause"),
		rebuilds: reg.Counter("cohort:group_rebuilds_total", "Rank-group rebuilds completed (detect → ready)."),
		replayed: reg.Counter("cohort:replayed_requests_total", "In-flight requests requeued for replay after a failure."),
		recovery: reg.Histogram("cohort:recovery_seconds", "Time from failure detection to the group being ready again.",
			[]float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}),
		poisoned: reg.Gauge("cohort:executor_poisoned", "1 while the current executor is poisoned (a failure is being recovered)."),
	}
	for _, c := range supervision.Causes {
		m.failures.With(string(c)).Add(0)
	}
	m.rebuilds.With().Add(0)
	m.replayed.With().Add(0)
	o.m.Store(m)
	t := tp.Tracer("cohort/supervision")
	o.tracer.Store(&t)
}

func (o *supervisionObserver) hooks(cfg *actors.Config) {
	cfg.OnFailure = func(f *supervision.RankFailure) {
		o.cause.Store(f.Cause)
		if m := o.m.Load(); m != nil {
			m.failures.With(string(f.Cause)).Inc()
			m.poisoned.Set(1)
		}
	}
	cfg.OnRecovered = func(d time.Duration) {
		if m := o.m.Load(); m != nil {
			m.rebuilds.With().Inc()
			m.recovery.Observe(d.Seconds())
			m.poisoned.Set(0)
		}
		if t := o.tracer.Load(); t != nil {
			end := time.Now()
			cause, _ := o.cause.Load().(supervision.Cause)
			_, span := (*t).Start(context.Background(), "cohort.recovery", trace.WithTimestamp(end.Add(-d)),
				trace.WithAttributes(attribute.String("cohort.failure.cause", string(cause))))
			span.End(trace.WithTimestamp(end))
		}
	}
	cfg.OnReplayed = func(n int) {
		if m := o.m.Load(); m != nil {
			m.replayed.With().Add(float64(n))
		}
	}
}
