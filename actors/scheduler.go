package actors

import (
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/planner"
)

// schedulerActor wraps the pure planner: it turns events (admissions,
// aborts, step results) into planner calls and planner output into RunStep
// broadcasts. One step is in flight at a time.
type schedulerActor struct {
	plan  *planner.Planner
	ranks []*actor.PID
	gen   uint64
	eos   []int32

	live     map[planner.RequestID]*liveRequest
	inflight *inflightStep
}

// liveRequest is the scheduler's view of an admitted request.
type liveRequest struct {
	req       *Request
	pid       *actor.PID
	tokens    []int32 // prompt + generated
	generated int
	scheduled time.Time // when a step first included the request
}

type inflightStep struct {
	plan    planner.Plan
	replies int
	samples []Sampled
	err     error
}

func newSchedulerActor(p *planner.Planner, ranks []*actor.PID, eos []int32) actor.Producer {
	return func() actor.Actor {
		return &schedulerActor{plan: p, ranks: ranks, gen: 1, eos: eos, live: map[planner.RequestID]*liveRequest{}}
	}
}

func (s *schedulerActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *AdmitRequest:
		s.admit(ctx, msg)
	case *AbortRequest:
		if s.plan.Abort(msg.ID) {
			delete(s.live, msg.ID)
		}
	case *FinishRequest:
		if s.plan.Finish(msg.ID) {
			delete(s.live, msg.ID)
		}
	case *StepCompleted:
		s.completed(ctx, msg)
	case *queryStats:
		ctx.Respond(s.plan.Stats())
	}
	s.maybeStep(ctx)
}

func (s *schedulerActor) admit(ctx actor.Context, msg *AdmitRequest) {
	r := msg.Req
	err := s.plan.Add(planner.Request{ID: r.ID, PromptLen: len(r.Prompt), MaxNewTokens: r.MaxTokens})
	if err != nil {
		ctx.Send(msg.PID, &RequestRejected{Err: err})
		return
	}
	s.live[r.ID] = &liveRequest{req: r, pid: msg.PID, tokens: slices.Clone(r.Prompt)}
}

// maybeStep asks the planner for the next step when none is in flight and
// broadcasts it to every rank.
func (s *schedulerActor) maybeStep(ctx actor.Context) {
	if s.inflight != nil {
		return
	}
	step := s.nextStep(ctx.Self())
	if step == nil {
		return
	}
	for _, r := range s.ranks {
		ctx.Send(r, step)
	}
}

// nextStep turns the planner's next plan into a RunStep (nil when idle) and
// marks it in flight.
func (s *schedulerActor) nextStep(replyTo *actor.PID) *RunStep {
	plan := s.plan.Schedule()
	if len(plan.Seqs) == 0 {
		return nil
	}
	step := &RunStep{Generation: s.gen, Step: plan.Step, Reset: plan.Reset, ReplyTo: replyTo}
	now := time.Now()
	for _, sp := range plan.Seqs {
		l := s.live[sp.ID]
		if l.scheduled.IsZero() {
			l.scheduled = now
		}
		start := len(step.Tokens)
		step.Tokens = append(step.Tokens, l.tokens[sp.Cached:sp.Cached+sp.Len]...)
		for p := sp.Cached; p < sp.Cached+sp.Len; p++ {
			step.Positions = append(step.Positions, int32(p))
		}
		step.Seqs = append(step.Seqs, StepSeq{ID: sp.ID, Slot: sp.Slot, Start: start, Len: sp.Len, Cached: sp.Cached, Pages: sp.Pages})
		if sp.Sample {
			out := OutputRow{ID: sp.ID, Row: start + sp.Len - 1, Params: l.req.Params, Index: l.generated, TopN: l.req.TopLogprobs}
			if l.req.Params.Penalized() {
				n := len(l.req.Prompt)
				out.Prompt, out.Generated = l.tokens[:n:n], slices.Clone(l.tokens[n:])
			}
			step.Outputs = append(step.Outputs, out)
		}
	}
	s.inflight = &inflightStep{plan: plan}
	return step
}

func (s *schedulerActor) completed(ctx actor.Context, msg *StepCompleted) {
	f := s.inflight
	if f == nil || msg.Generation != s.gen || msg.Step != f.plan.Step {
		return // a reply from an older step or generation
	}
	f.replies++
	if msg.Err != nil && f.err == nil {
		f.err = fmt.Errorf("rank %d: %w", msg.Rank, msg.Err)
	}
	if msg.Rank == 0 {
		f.samples = msg.Samples
	}
	if f.replies < len(s.ranks) {
		return
	}
	s.inflight = nil
	if f.err != nil {
		s.failStep(ctx, f)
		return
	}
	s.apply(ctx, f)
}

// failStep ends every request of a failed step with the error. (Supervision
// replaces this with poison, rebuild and replay.)
func (s *schedulerActor) failStep(ctx actor.Context, f *inflightStep) {
	for _, sp := range f.plan.Seqs {
		if l, ok := s.live[sp.ID]; ok {
			s.plan.Abort(sp.ID)
			delete(s.live, sp.ID)
			ctx.Send(l.pid, &RequestRejected{Err: f.err})
		}
	}
}

// apply forwards each token of a completed step to its request actor.
func (s *schedulerActor) apply(ctx actor.Context, f *inflightStep) {
	for _, d := range s.record(f) {
		ctx.Send(d.pid, d.ev)
	}
}

// delivery is a token on its way to a request actor.
type delivery struct {
	pid *actor.PID
	ev  *TokenGenerated
}

// record applies a completed step's samples: it appends the tokens, decides
// which requests finished (max tokens, EOS, stop token ids) and returns the
// events for the request actors.
func (s *schedulerActor) record(f *inflightStep) []delivery {
	var sampled []planner.RequestID
	for _, smp := range f.samples {
		if _, ok := s.live[smp.ID]; ok {
			sampled = append(sampled, smp.ID)
		}
	}
	byPlanner := s.plan.Update(f.plan, sampled)
	out := make([]delivery, 0, len(f.samples))
	for _, smp := range f.samples {
		l, ok := s.live[smp.ID]
		if !ok {
			continue // aborted while the step ran
		}
		tok := smp.Result.Token.ID
		l.tokens = append(l.tokens, tok)
		l.generated++
		ev := &TokenGenerated{Sampled: smp}
		if l.generated == 1 {
			ev.ScheduledAt = l.scheduled
		}
		switch {
		case !l.req.IgnoreEOS && slices.Contains(s.eos, tok), slices.Contains(l.req.StopTokenIDs, tok):
			ev.Finish, ev.StopToken = "stop", true
		case l.generated >= l.req.MaxTokens || slices.Contains(byPlanner, smp.ID):
			ev.Finish = "length"
		}
		if ev.Finish != "" {
			s.plan.Finish(smp.ID)
			delete(s.live, smp.ID)
		}
		out = append(out, delivery{l.pid, ev})
	}
	return out
}
