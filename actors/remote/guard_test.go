package remote

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/remote/rankpb"
)

// TestRemoteStopsRefused: a peer on a worker's actor port (here a
// plaintext one, since the test worker runs insecure) sends Stop and
// PoisonPill to the worker's host actor and to a rank id of another
// engine: the guard drops them all, and the host still answers pings.
// Before, one Stop to cohort-worker took the worker out. The worker is a
// process of its own (one protoactor remote per process under -race).
func TestRemoteStopsRefused(t *testing.T) {
	w := startWorkerProc(t, "127.0.0.1:0", nil)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(quietLogger))
	rem, err := startRemote(sys, "127.0.0.1:0", testSecurity(), &guard{allow: engineStopAllowed})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Shutdown(false)
	host := actor.NewPID(w.addr, workerHostName)
	cases := []struct {
		name string
		send func()
	}{
		{"stop the host", func() { sys.Root.Stop(host) }},
		{"poison the host", func() { sys.Root.Poison(host) }},
		{"stop another engine's rank", func() { sys.Root.Stop(actor.NewPID(w.addr, "rank-someone-else-g1-r0")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.send()
			// Messages of one stream arrive in order: the answer to this
			// ping comes after the stop was handled.
			res, err := sys.Root.RequestFuture(host, &rankpb.Ping{}, 10*time.Second).Result()
			if err != nil {
				t.Fatalf("the worker's host no longer answers: %v", err)
			}
			if _, ok := res.(*rankpb.Pong); !ok {
				t.Fatalf("answer %T", res)
			}
		})
	}
}

func TestStopAllowed(t *testing.T) {
	cases := []struct {
		peer, target string
		want         bool
	}{
		{"e1", "rank-e1-g3-r0", true},
		{"e1", "rank-e2-g3-r0", false},
		{"e1", "rank-e10-g3-r0", false},
		{"", "rank--g1-r0", false},
		{"e1", workerHostName, false},
	}
	for _, c := range cases {
		if got := workerStopAllowed(c.peer, c.target); got != c.want {
			t.Errorf("workerStopAllowed(%q, %q) = %v, want %v", c.peer, c.target, got, c.want)
		}
		if engineStopAllowed(c.peer, c.target) {
			t.Errorf("engineStopAllowed(%q, %q) = true", c.peer, c.target)
		}
	}
}

// TestWorkerDoneWhenHostStops: a worker whose host actor stopped (whatever
// stopped it) reports Done, so `cohort worker` exits non-zero instead of
// lingering while engines answer 503; Close does not.
func TestWorkerDoneWhenHostStops(t *testing.T) {
	if isolate(t) {
		return
	}
	for _, viaClose := range []bool{false, true} {
		w, err := StartWorker(WorkerConfig{Listen: "127.0.0.1:0", NewBackend: cpuBackends(1), AnyModelDir: true, Security: testSecurity()})
		if err != nil {
			t.Fatal(err)
		}
		if viaClose {
			w.Close()
			select {
			case <-w.Done():
				t.Error("Done after Close")
			default:
			}
			continue
		}
		w.sys.Root.Stop(actor.NewPID(w.sys.Address(), workerHostName))
		select {
		case <-w.Done():
		case <-time.After(10 * time.Second): // the test's bound
			t.Fatal("Done not closed after the host actor stopped")
		}
		w.Close()
	}
}
