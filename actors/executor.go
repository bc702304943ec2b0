package actors

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// executor is a rank's device executor: one goroutine that runs the rank's
// jobs in order, locked to its OS thread when the backend needs it (CUDA
// contexts are per thread). The CPU backend does not: it fans each op out to
// worker goroutines, and a locked thread turns every fan-in into an OS-level
// hand-off (measured: +1.5 ms per step on the tiny preset, see
// BenchmarkServe).
// Actors hand it work and get the result back as a message, so Receive never
// blocks on compute.
type executor struct {
	jobs chan func()
	done chan struct{}
	once sync.Once
}

// newExecutor starts an executor; running counts it until its loop exits,
// so the engine can wait for every job (a shard load reads the mmapped
// checkpoint) before the checkpoint is closed.
func newExecutor(lockThread bool, running *sync.WaitGroup) *executor {
	e := &executor{jobs: make(chan func(), 16), done: make(chan struct{})}
	running.Add(1)
	go func() {
		defer running.Done()
		e.loop(lockThread)
	}()
	return e
}

func (e *executor) loop(lockThread bool) {
	if lockThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	defer close(e.done)
	for job := range e.jobs {
		job()
	}
}

// submit queues a job. It never blocks the caller for long: the queue is
// deeper than the one step the scheduler keeps in flight.
func (e *executor) submit(job func()) {
	e.jobs <- job
}

// close stops taking jobs; the loop exits after the queued ones ran.
func (e *executor) close() {
	e.once.Do(func() { close(e.jobs) })
}

// protect runs f and turns a panic into an error carrying the stack.
func protect(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("actors: %s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	return f()
}
