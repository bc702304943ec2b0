package remote

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"cohort/actors/remote/rankpb"
	"cohort/model"
)

// workerPool is the engine's view of its workers: a heartbeat pings each
// one (and checks its identity), ranks are placed on the live ones, and a
// worker that stops answering takes its ranks down with it.
type workerPool struct {
	cfg   Config
	ident *rankpb.Identity
	sys   *actor.ActorSystem
	rem   *remote.Remote

	mu      sync.Mutex
	workers []*workerView
	changed chan struct{} // closed and replaced on every liveness change
	waiting string        // why the generation being placed waits ("" if none)

	stop chan struct{}
	wg   sync.WaitGroup
}

type workerView struct {
	addr     string
	alive    bool
	pinging  bool
	lastSeen time.Time
	reason   string                // why it is not alive
	proxies  map[string]*actor.PID // proxies of ranks placed on it
}

// newWorkerPool starts remoting for the engine and pings every worker once:
// a worker that refuses this engine (another build or model) fails the
// start; one that does not answer is waited for.
func newWorkerPool(sys *actor.ActorSystem, cfg Config) (*workerPool, error) {
	if len(cfg.Workers) == 0 {
		return nil, fmt.Errorf("remote: remote placement needs at least one worker")
	}
	sum, err := model.Fingerprint(cfg.ModelDir)
	if err != nil {
		return nil, err
	}
	rem, err := startRemote(sys, cfg.Listen, cfg.Security, &guard{allow: engineStopAllowed})
	if err != nil {
		return nil, err
	}
	p := &workerPool{cfg: cfg, sys: sys, rem: rem, changed: make(chan struct{}), stop: make(chan struct{}),
		ident: &rankpb.Identity{Build: cfg.Build, ModelDir: cfg.ModelDir, ModelChecksum: sum, Device: cfg.engineDevice()}}
	for _, a := range cfg.Workers {
		p.workers = append(p.workers, &workerView{addr: a, reason: "not contacted yet", proxies: map[string]*actor.PID{}})
	}
	if err := p.firstRound(); err != nil {
		rem.Shutdown(false)
		return nil, err
	}
	p.wg.Add(1)
	go p.heartbeat()
	return p, nil
}

// firstRound pings every worker once, concurrently.
func (p *workerPool) firstRound() error {
	var wg sync.WaitGroup
	refused := make([]string, len(p.workers))
	for i, w := range p.workers {
		wg.Go(func() {
			if pong, err := p.ping(w.addr, p.cfg.DownAfter); err == nil && pong.Error != "" {
				refused[i] = pong.Error
			}
		})
	}
	wg.Wait()
	var errs []string
	for _, r := range refused {
		if r != "" {
			errs = append(errs, r)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remote: refused by workers: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (p *workerPool) hostPID(addr string) *actor.PID { return actor.NewPID(addr, workerHostName) }

func (p *workerPool) ping(addr string, timeout time.Duration) (*rankpb.Pong, error) {
	res, err := p.sys.Root.RequestFuture(p.hostPID(addr), &rankpb.Ping{Identity: p.ident}, timeout).Result()
	if err == nil {
		if pong, ok := res.(*rankpb.Pong); ok {
			p.seen(addr, pong)
			return pong, nil
		}
		err = fmt.Errorf("unexpected answer %T", res)
	}
	p.missed(addr, err)
	return nil, err
}

func (p *workerPool) heartbeat() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for _, w := range p.workers {
			if !w.pinging {
				w.pinging = true
				p.wg.Go(func() { p.ping(w.addr, p.cfg.DownAfter) })
			}
		}
		p.mu.Unlock()
	}
}

func (p *workerPool) view(addr string) *workerView {
	for _, w := range p.workers {
		if w.addr == addr {
			return w
		}
	}
	return nil
}

// seen records an answer: the worker is alive unless it refused us.
func (p *workerPool) seen(addr string, pong *rankpb.Pong) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.view(addr)
	if w == nil {
		return
	}
	w.pinging, w.lastSeen = false, time.Now()
	alive := pong.Error == ""
	if !alive {
		w.reason = "refused: " + pong.Error
	}
	if alive != w.alive {
		w.alive = alive
		p.notifyLocked()
	}
}

// missed records an unanswered ping; after DownAfter without an answer a
// live worker is declared down.
func (p *workerPool) missed(addr string, err error) {
	p.mu.Lock()
	w := p.view(addr)
	if w == nil {
		p.mu.Unlock()
		return
	}
	w.pinging = false
	never, silent := w.lastSeen.IsZero(), time.Since(w.lastSeen)
	p.mu.Unlock()
	switch {
	case never:
		p.markDown(addr, fmt.Errorf("worker %s does not answer: %v", addr, err))
	case silent >= p.cfg.DownAfter:
		p.markDown(addr, fmt.Errorf("worker %s answered no heartbeat for %v: %v", addr, silent.Round(time.Millisecond), err))
	}
}

// markDown declares a worker down and tells the proxies of its ranks.
func (p *workerPool) markDown(addr string, reason error) {
	p.mu.Lock()
	w := p.view(addr)
	if w == nil || !w.alive {
		if w != nil {
			w.reason = reason.Error()
		}
		p.mu.Unlock()
		return
	}
	w.alive, w.reason = false, reason.Error()
	proxies := make([]*actor.PID, 0, len(w.proxies))
	for _, pid := range w.proxies {
		proxies = append(proxies, pid)
	}
	p.notifyLocked()
	p.mu.Unlock()
	for _, pid := range proxies {
		p.sys.Root.Send(pid, &workerDown{addr: addr, err: reason})
	}
}

func (p *workerPool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// track and untrack record which proxies have ranks on a worker.
func (p *workerPool) track(addr string, proxy *actor.PID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.view(addr); w != nil {
		w.proxies[proxy.Id] = proxy
	}
}

func (p *workerPool) untrack(addr string, proxy *actor.PID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.view(addr); w != nil {
		delete(w.proxies, proxy.Id)
	}
}

// assign waits until the live workers can hold size ranks and deals them
// out: rank r goes to the (r mod n)-th live worker, in the order of
// Remote.Workers. While it waits, why is reported through wait.
func (p *workerPool) assign(ctx context.Context, size int, wait func(why string)) ([]string, error) {
	for {
		p.mu.Lock()
		var alive []string
		for _, w := range p.workers {
			if w.alive {
				alive = append(alive, w.addr)
			}
		}
		if len(alive)*p.cfg.RanksPerWorker >= size {
			p.waiting = ""
			p.mu.Unlock()
			out := make([]string, size)
			for r := range out {
				out[r] = alive[r%len(alive)]
			}
			return out, nil
		}
		p.waiting = p.shortfallLocked(size, len(alive))
		why, changed := p.waiting, p.changed
		p.mu.Unlock()
		wait(why)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}

func (p *workerPool) shortfallLocked(size, alive int) string {
	var down []string
	for _, w := range p.workers {
		if !w.alive {
			down = append(down, fmt.Sprintf("%s (%s)", w.addr, w.reason))
		}
	}
	return fmt.Sprintf("waiting for workers: %d ranks need %d workers at %d ranks each, %d of %d alive; down: %s",
		size, (size+p.cfg.RanksPerWorker-1)/p.cfg.RanksPerWorker, p.cfg.RanksPerWorker, alive, len(p.workers), strings.Join(down, ", "))
}

// Status says why placement waits, for the recovery-timeout error
// (actors.Placer).
func (p *workerPool) Status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// Close stops the heartbeat and remoting (actors.Placer). It stops the
// gRPC server only: protoactor's graceful shutdown (Shutdown(true)) races
// on unsynchronized flags, so the outgoing connections stay until the
// process ends.
func (p *workerPool) Close() {
	close(p.stop)
	p.wg.Wait()
	p.rem.Shutdown(false)
}
