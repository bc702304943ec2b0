package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/planner"
	"cohort/model"
	"cohort/model/tokenizer"
	"cohort/nccl"
)

// Config sizes an engine.
type Config struct {
	Checkpoint *model.Checkpoint
	Tokenizer  *tokenizer.Tokenizer
	TP         int            // tensor-parallel degree (ranks)
	NewBackend BackendFactory // makes each rank's backend
	// LockThread pins each rank's device executor to its OS thread; GPU
	// backends need it, the CPU backend is faster without it.
	LockThread bool
	// Capacity per rank: Budget, Reserve, Scratch, ElemBytes, PageSize,
	// MaxSeqs and MaxModelLen (0 means the model's max_position_embeddings).
	Capacity         model.CapacityInput
	MaxPrefillTokens int // per-step prefill token budget
	MaxRows          int // per-step sequence cap
	// MaxPending bounds the requests the engine holds (running + queued);
	// Submit fails with ErrOverloaded beyond it. 0 means 16 × the slots.
	MaxPending  int
	LoadTimeout time.Duration
}

// Info describes a running engine.
type Info struct {
	TP          int
	MaxModelLen int
	Slots       int // concurrent requests (minimum over ranks)
	KVPages     int // minimum over ranks
	PageSize    int
	VocabSize   int
}

// Engine is the Go API over the actor system: submit requests, read their
// event streams, cancel them.
type Engine struct {
	sys    *actor.ActorSystem
	sched  *actor.PID
	ranks  []*actor.PID
	tok    *tokenizer.Tokenizer
	info   Info
	nextID atomic.Uint64

	pending    atomic.Int64 // submitted requests whose stream has not ended
	maxPending int64
	notReady   atomic.Pointer[string] // nil when ready, else the reason
}

// Start loads every rank's shard (in parallel, each in its own executor
// thread), sizes the planner from the smallest rank and starts the scheduler.
func Start(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.TP < 1 {
		return nil, fmt.Errorf("actors: tensor-parallel degree %d must be at least 1", cfg.TP)
	}
	mc := cfg.Checkpoint.Config
	if cfg.Capacity.MaxModelLen == 0 {
		cfg.Capacity.MaxModelLen = mc.MaxPositions
	}
	if _, err := cfg.Checkpoint.Arch.Declare(mc, model.Shard{Rank: 0, Size: cfg.TP}); err != nil {
		return nil, err
	}
	group, err := nccl.NewGroup(cfg.TP)
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	e := &Engine{sys: sys, tok: cfg.Tokenizer}
	caps, err := e.loadRanks(ctx, cfg, group)
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	e.info = Info{TP: cfg.TP, MaxModelLen: cfg.Capacity.MaxModelLen, Slots: caps.Slots, KVPages: caps.Pages,
		PageSize: caps.PageSize, VocabSize: mc.VocabSize}
	p, err := planner.New(planner.Config{MaxPrefillTokens: cfg.MaxPrefillTokens, MaxRows: cfg.MaxRows,
		Slots: caps.Slots, KVPages: caps.Pages, PageSize: caps.PageSize, MaxModelLen: cfg.Capacity.MaxModelLen})
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	e.sched = sys.Root.Spawn(actor.PropsFromProducer(newSchedulerActor(p, e.ranks, mc.EOS)))
	e.maxPending = int64(cfg.MaxPending)
	if e.maxPending <= 0 {
		e.maxPending = 16 * int64(caps.Slots)
	}
	return e, nil
}

// loadRanks spawns the rank actors and waits for every shard; the capacity
// is the minimum over ranks.
func (e *Engine) loadRanks(ctx context.Context, cfg Config, group *nccl.Group) (model.Capacity, error) {
	timeout := cfg.LoadTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	futures := make([]*actor.Future, cfg.TP)
	for r := 0; r < cfg.TP; r++ {
		pid := e.sys.Root.Spawn(actor.PropsFromProducer(newRankActor(r, cfg.NewBackend, cfg.LockThread)))
		e.ranks = append(e.ranks, pid)
		futures[r] = e.sys.Root.RequestFuture(pid, &LoadShard{Checkpoint: cfg.Checkpoint,
			Shard: model.Shard{Rank: r, Size: cfg.TP}, Comm: group.Comm(r), Capacity: cfg.Capacity}, timeout)
	}
	var caps model.Capacity
	for r, f := range futures {
		res, err := f.Result()
		if err != nil {
			return caps, fmt.Errorf("actors: rank %d did not load: %w", r, err)
		}
		ready := res.(*ShardReady)
		if ready.Err != nil {
			return caps, fmt.Errorf("actors: rank %d: %w", r, ready.Err)
		}
		if r == 0 || ready.Capacity.Slots < caps.Slots {
			caps.Slots = ready.Capacity.Slots
		}
		if r == 0 || ready.Capacity.Pages < caps.Pages {
			caps.Pages = ready.Capacity.Pages
		}
		caps.PageSize = ready.Capacity.PageSize
	}
	return caps, ctx.Err()
}

// Info returns the engine's shape and capacity.
func (e *Engine) Info() Info { return e.info }

// Submit validates a request, spawns its request actor and returns its stream.
func (e *Engine) Submit(req Request) (*Stream, error) {
	if err := e.validate(&req); err != nil {
		return nil, err
	}
	if reason := e.notReady.Load(); reason != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotReady, *reason)
	}
	if e.pending.Add(1) > e.maxPending {
		e.pending.Add(-1)
		return nil, fmt.Errorf("%w: %d requests pending (limit %d)", ErrOverloaded, e.maxPending, e.maxPending)
	}
	req.ID = planner.RequestID(e.nextID.Add(1))
	s := newStream()
	s.onDone = func() { e.pending.Add(-1) }
	pid := e.sys.Root.Spawn(actor.PropsFromProducer(newRequestActor(&req, e.sched, s, e.tok)))
	s.cancel = func() { e.sys.Root.Send(pid, &CancelRequest{}) }
	return s, nil
}

// Errors of Submit, for the HTTP edge to map onto status codes.
var (
	ErrInvalidRequest = errors.New("actors: invalid request")           // 400
	ErrOverloaded     = errors.New("actors: too many pending requests") // 429
	ErrNotReady       = errors.New("actors: engine not ready")          // 503
)

// Ready reports whether the engine takes new requests, and why not.
func (e *Engine) Ready() (bool, string) {
	if reason := e.notReady.Load(); reason != nil {
		return false, *reason
	}
	return true, ""
}

// Pending returns the number of submitted requests that have not ended.
func (e *Engine) Pending() int { return int(e.pending.Load()) }

func (e *Engine) validate(r *Request) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	switch {
	case len(r.Prompt) == 0:
		return bad("the prompt is empty")
	case r.MaxTokens < 1:
		return bad("max_tokens %d must be at least 1", r.MaxTokens)
	case r.TopLogprobs < 0 || r.TopLogprobs > 20:
		return bad("top_logprobs %d must be in [0, 20]", r.TopLogprobs)
	}
	for i, id := range r.Prompt {
		if id < 0 || int(id) >= e.info.VocabSize {
			return bad("prompt token %d at position %d is outside the vocabulary [0, %d)", id, i, e.info.VocabSize)
		}
	}
	if err := r.Params.Validate(); err != nil {
		return bad("%v", err)
	}
	return nil
}

// Stats returns the planner's statistics.
func (e *Engine) Stats(ctx context.Context) (planner.Stats, error) {
	res, err := e.sys.Root.RequestFuture(e.sched, &queryStats{}, 5*time.Second).Result()
	if err != nil {
		return planner.Stats{}, fmt.Errorf("actors: stats: %w", err)
	}
	return res.(planner.Stats), nil
}

// Close stops every actor and the actor system.
func (e *Engine) Close() {
	if e.sched != nil {
		e.sys.Root.StopFuture(e.sched).Wait()
	}
	for _, r := range e.ranks {
		e.sys.Root.StopFuture(r).Wait()
	}
	e.sys.Shutdown()
}
