package actors

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// executor is a rank's device executor: one goroutine, locked to its OS
// thread (CUDA contexts are per thread), that runs the rank's jobs in order.
// Actors hand it work and get the result back as a message, so Receive never
// blocks on compute.
type executor struct {
	jobs chan func()
	done chan struct{}
	once sync.Once
}

func newExecutor() *executor {
	e := &executor{jobs: make(chan func(), 16), done: make(chan struct{})}
	go e.loop()
	return e
}

func (e *executor) loop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
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
