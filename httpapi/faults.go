package httpapi

import (
	"context"
	"net/http"
	"time"

	"cohort/actors"
	"cohort/httpapi/metrics"
)

// faultRequest is the body of POST /debug/faults (debug builds of the
// deployment only: the route exists when Options.InjectFault is set, which
// `cohort serve --debug-faults` does).
type faultRequest struct {
	Kind       string `json:"kind"`
	Rank       int    `json:"rank"`
	DurationMS int    `json:"duration_ms"`
	Persistent bool   `json:"persistent"`
}

func (s *Server) handleFault(c *call) reply {
	var r faultRequest
	if err := unmarshalStrict(c.body, &r); err != nil {
		return errorReply(badRequest("", "invalid fault request: %v", err))
	}
	known := false
	for _, k := range actors.FaultKinds {
		known = known || string(k) == r.Kind
	}
	if !known {
		return errorReply(badRequest("kind", "unknown fault kind %q (have %v)", r.Kind, actors.FaultKinds))
	}
	if r.DurationMS < 0 || r.DurationMS > 600_000 {
		return errorReply(badRequest("duration_ms", "duration_ms %d must be in [0, 600000]", r.DurationMS))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := actors.Fault{Kind: actors.FaultKind(r.Kind), Rank: r.Rank, Duration: time.Duration(r.DurationMS) * time.Millisecond, Persistent: r.Persistent}
	if err := s.opts.InjectFault(ctx, f); err != nil {
		return errorReply(badRequest("rank", "%v", err))
	}
	return jsonReply(http.StatusOK, []byte(`{"status":"injected"}`))
}

// Metrics returns the server's metrics registry, so other parts of the
// process (supervision) can add their series.
func (s *Server) Metrics() *metrics.Registry { return s.metrics }
