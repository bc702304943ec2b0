package remote

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
	"cohort/model"
)

// WorkerConfig configures a worker process: it hosts rank actors that an
// engine (`cohort serve --workers`) places on it.
type WorkerConfig struct {
	Listen string // host:port of the worker's actor remote (port 0 picks one)
	// RingHost is the address the ranks' TCP ring listeners bind; peers dial
	// it [the host of Listen].
	RingHost string
	// ModelDir is the one checkpoint directory this worker serves, whatever
	// path an engine sends; its checksum must match the engine's. Without
	// it the worker serves nothing, unless AnyModelDir lets engines name
	// the directory (tests; it makes the worker probe any path a peer sends).
	ModelDir    string
	AnyModelDir bool
	// Security authenticates the worker's actor port; nil refuses to start.
	Security   *Security
	Build      string                // [Build()]
	NewBackend actors.BackendFactory // CPU ranks' backends (unused with GPU)
	// GPU, if set, makes the hosted ranks GPU ranks joined by NCCL (the
	// engine must send NCCL unique ids, remote.Config.NCCL); nil: CPU
	// ranks joined by the TCP ring.
	GPU *GPURanks
	// CommPoll is how often each rank's communicator is polled for
	// asynchronous errors (a broken TCP ring, ncclCommGetAsyncError),
	// which are reported to the engine as rank failures [100ms].
	CommPoll       time.Duration
	LockThread     bool
	TracerProvider trace.TracerProvider // nil: no tracing
}

// Worker is a running worker process's actor system.
type Worker struct {
	guard *guard
	done  chan struct{} // closed when the host actor stopped other than by Close
	// closing is set by Close: the host actor's end is then expected.
	closing atomic.Bool
	sys     *actor.ActorSystem
	rem     *remote.Remote
	state   *workerState
}

// workerState is shared by the worker's host actor and its rank actors.
type workerState struct {
	cfg       WorkerConfig
	addr      string
	tracer    trace.Tracer
	executors sync.WaitGroup

	mu    sync.Mutex
	cks   map[string]*sharedCheckpoint // by directory
	sums  map[string]string            // fingerprints, for pings
	ranks map[string]*actor.PID        // live rank actors, by id
}

type sharedCheckpoint struct {
	ck   *model.Checkpoint
	refs int
}

// StartWorker starts a worker's actor system and remoting; rank actors are
// spawned in it by engines, as the remote kind "cohort.rank".
func StartWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.checkBackends(); err != nil {
		return nil, err
	}
	if cfg.Build == "" {
		cfg.Build = Build()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	if cfg.CommPoll <= 0 {
		cfg.CommPoll = 100 * time.Millisecond
	}
	if cfg.RingHost == "" {
		host, _, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("remote: worker address %q: %w", cfg.Listen, err)
		}
		cfg.RingHost = host
	}
	st := &workerState{cfg: cfg, tracer: cfg.TracerProvider.Tracer(actors.TracerName),
		cks: map[string]*sharedCheckpoint{}, sums: map[string]string{}, ranks: map[string]*actor.PID{}}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(quietLogger))
	kind := remote.NewKind(rankKind, actor.PropsFromProducer(func() actor.Actor { return newRemoteRank(st) }))
	if cfg.ModelDir == "" && !cfg.AnyModelDir {
		return nil, fmt.Errorf("remote: a worker needs the model directory it serves")
	}
	g := &guard{allow: workerStopAllowed}
	rem, err := startRemote(sys, cfg.Listen, cfg.Security, g, kind)
	if err != nil {
		return nil, err
	}
	st.addr = sys.Address()
	host, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &workerHost{st} }), workerHostName)
	if err != nil {
		rem.Shutdown(false)
		return nil, fmt.Errorf("remote: worker host actor: %w", err)
	}
	w := &Worker{sys: sys, rem: rem, state: st, guard: g, done: make(chan struct{})}
	// A worker whose host actor is gone answers no engine: it must end, so
	// that whatever runs it restarts it, instead of lingering unusable.
	sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &hostWatcher{w: w, host: host} }))
	return w, nil
}

// checkBackends requires what makes the hosted ranks' backends.
func (cfg *WorkerConfig) checkBackends() error {
	g := cfg.GPU
	switch {
	case g == nil && cfg.NewBackend == nil:
		return fmt.Errorf("remote: worker needs a backend factory")
	case g == nil:
		return nil
	case len(g.Devices) == 0 || g.NewBackend == nil || g.Join == nil:
		return fmt.Errorf("remote: a GPU worker needs its devices, a backend factory and an NCCL join")
	}
	return nil
}

// quietLogger silences protoactor's own logging.
func quietLogger(*actor.ActorSystem) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Addr is the worker's actor-remote address (what `serve --workers` takes).
func (w *Worker) Addr() string { return w.state.addr }

// Done is closed when the worker can no longer serve (its host actor
// stopped other than through Close); the process should then exit non-zero.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Refused returns how many Stop or PoisonPill messages from peers the
// worker's actor port dropped (see guard).
func (w *Worker) Refused() int { return int(w.guard.dropped.Load()) }

// Ranks returns how many rank actors the worker hosts now.
func (w *Worker) Ranks() int {
	w.state.mu.Lock()
	defer w.state.mu.Unlock()
	return len(w.state.ranks)
}

// Close stops every rank actor, waits for their executors, closes the
// checkpoints and shuts remoting down.
func (w *Worker) Close() {
	w.closing.Store(true)
	w.state.mu.Lock()
	pids := make([]*actor.PID, 0, len(w.state.ranks))
	for _, p := range w.state.ranks {
		pids = append(pids, p)
	}
	w.state.mu.Unlock()
	for _, p := range pids {
		_ = w.sys.Root.StopFuture(p).Wait()
	}
	w.rem.Shutdown(false) // the server only: see workerPool.close
	w.sys.Shutdown()
	w.state.executors.Wait()
	w.state.mu.Lock()
	defer w.state.mu.Unlock()
	for dir, s := range w.state.cks {
		s.ck.Close()
		delete(w.state.cks, dir)
	}
}

// hostWatcher ends the worker (Done) when its host actor stops other than
// through Close.
type hostWatcher struct {
	w    *Worker
	host *actor.PID
}

func (h *hostWatcher) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		ctx.Watch(h.host)
	case *actor.Terminated:
		if !h.w.closing.Load() {
			close(h.w.done)
		}
	default:
		actors.ReportUnexpected("worker host watcher", msg)
	}
}

// workerHost is the worker's well-known actor: it answers pings, the
// engines' heartbeat and identity check.
type workerHost struct{ st *workerState }

func (h *workerHost) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *rankpb.Ping:
		st := h.st
		pong := &rankpb.Pong{Build: st.cfg.Build, Address: st.addr, Ranks: int32(st.rankCount())}
		if err := st.check(msg.Identity, true); err != nil {
			pong.Error = err.Error()
		}
		ctx.Respond(pong)
	default:
		actors.ReportUnexpected("worker host", msg)
	}
}

func (st *workerState) rankCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.ranks)
}

// modelDir is the directory the worker opens for an engine that sent
// engineDir: its own, unless it was started with AnyModelDir.
func (st *workerState) modelDir(engineDir string) string {
	if st.cfg.ModelDir != "" || !st.cfg.AnyModelDir {
		return st.cfg.ModelDir
	}
	return engineDir
}

// check refuses an engine of another build or holding another model. With
// cached set it reuses a fingerprint computed before (pings).
func (st *workerState) check(id *rankpb.Identity, cached bool) error {
	if id.GetBuild() != st.cfg.Build {
		return fmt.Errorf("worker %s runs build %q but the engine runs %q: deploy the same build everywhere", st.addr, st.cfg.Build, id.GetBuild())
	}
	if dev := st.cfg.device(); id.GetDevice() != dev {
		return fmt.Errorf("worker %s hosts %s ranks but the engine places %s ranks: start both with the same --device", st.addr, dev, id.GetDevice())
	}
	dir := st.modelDir(id.GetModelDir())
	st.mu.Lock()
	sum, ok := st.sums[dir]
	st.mu.Unlock()
	if !ok || !cached {
		var err error
		if sum, err = model.Fingerprint(dir); err != nil {
			return fmt.Errorf("worker %s: %w", st.addr, err)
		}
		st.mu.Lock()
		st.sums[dir] = sum
		st.mu.Unlock()
	}
	if sum != id.GetModelChecksum() {
		return fmt.Errorf("worker %s: the model at %s has checksum %s but the engine's has %s: a different model or a different copy",
			st.addr, dir, sum, id.GetModelChecksum())
	}
	return nil
}

// openCheckpoint shares one open checkpoint per directory among the ranks.
func (st *workerState) openCheckpoint(dir string) (*model.Checkpoint, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.cks[dir]; ok {
		s.refs++
		return s.ck, nil
	}
	ck, err := model.Open(dir)
	if err != nil {
		return nil, err
	}
	st.cks[dir] = &sharedCheckpoint{ck: ck, refs: 1}
	return ck, nil
}

func (st *workerState) releaseCheckpoint(dir string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.cks[dir]; ok {
		if s.refs--; s.refs == 0 {
			s.ck.Close()
			delete(st.cks, dir)
		}
	}
}

func (st *workerState) addRank(pid *actor.PID) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ranks[pid.Id] = pid
}

func (st *workerState) removeRank(pid *actor.PID) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.ranks, pid.Id)
}
