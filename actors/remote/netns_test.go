package remote

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cohort/actors"
	"cohort/supervision"
)

// netns is a network namespace joined to this one by a veth pair: the host
// end has hostIP, the namespace end nsIP.
type netns struct {
	name, hostIf, hostIP, nsIP string
}

// newNetns creates the namespace, or skips the test when this machine does
// not allow it (not root, no ip(8), or no CAP_SYS_ADMIN in a container).
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("partition test needs root for ip netns (skipped)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("partition test needs ip(8) from iproute2 (skipped)")
	}
	id := os.Getpid() % 200
	n := &netns{name: fmt.Sprintf("cohort-t%d", os.Getpid()), hostIf: fmt.Sprintf("cht%dh", os.Getpid()%100000),
		hostIP: fmt.Sprintf("10.231.%d.1", id), nsIP: fmt.Sprintf("10.231.%d.2", id)}
	nsIf := fmt.Sprintf("cht%dn", os.Getpid()%100000)
	if err := ipCmd("netns", "add", n.name); err != nil {
		t.Skipf("ip netns is not allowed here (skipped): %v", err)
	}
	t.Cleanup(func() {
		ipCmd("link", "del", n.hostIf)
		ipCmd("netns", "del", n.name)
	})
	for _, args := range [][]string{
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", n.name},
		{"addr", "add", n.hostIP + "/24", "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", n.nsIP + "/24", "dev", nsIf},
		{"-n", n.name, "link", "set", nsIf, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Skipf("cannot set up the veth pair (skipped): %v", err)
		}
	}
	return n
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// TestRemotePartition puts one of two workers in a network namespace and
// sets its link down under streaming load: the heartbeat declares the worker
// down within Config.DownAfter (plus one heartbeat), the group is torn down
// the same way as after a kill, and once the link is up again the worker
// rejoins and every request completes with its fault-free tokens.
func TestRemotePartition(t *testing.T) {
	if isolate(t) {
		return
	}
	ns := newNetns(t)
	tm := openPreset(t, "tiny")
	local := startWorkerProc(t, ns.hostIP+":0", nil)
	far := startWorkerProc(t, ns.nsIP+":0", []string{"ip", "netns", "exec", ns.name})
	failures := newFailureLog()
	downAfter, heartbeat := time.Second, 100*time.Millisecond
	e := remoteEngine(t, tm, 2, []string{local.addr, far.addr}, func(rc *Config) {
		rc.Listen, rc.DownAfter, rc.Heartbeat = ns.hostIP+":0", downAfter, heartbeat
	}, func(c *actors.Config) {
		c.Replay, c.StepDeadline = true, 30*time.Second // the heartbeat, not the step deadline, must notice
		failures.hook(c)
	})
	reqs := mixedRequests(4, tm.tok.VocabSize())
	for i := range reqs {
		reqs[i].MaxTokens, reqs[i].IgnoreEOS = 30, true
	}
	streams := make([]*actors.Stream, len(reqs))
	for i, r := range reqs {
		streams[i] = mustSubmit(t, e, r)
	}
	waitTokens(t, streams[0], 3)
	cut := time.Now()
	if err := ipCmd("link", "set", ns.hostIf, "down"); err != nil {
		t.Fatal(err)
	}
	f := failures.first(t, 10*time.Second)
	took := f.at.Sub(cut)
	t.Logf("link down → detected in %v (bound %v): %v", took.Round(time.Millisecond), downAfter+2*heartbeat, f.f)
	if bound := downAfter + 2*heartbeat + 500*time.Millisecond; took > bound {
		t.Errorf("partition detected after %v, bound %v", took, bound)
	}
	if f.f.Cause != supervision.CauseTerminated {
		t.Errorf("cause %s, want %s", f.f.Cause, supervision.CauseTerminated)
	}
	if err := ipCmd("link", "set", ns.hostIf, "up"); err != nil {
		t.Fatal(err)
	}
	checkReplayed(t, tm, reqs, streams)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatalf("not ready after the link came back: %v", err)
	}
}
