package remote

import (
	"fmt"
	"testing"

	"cohort/actors"
)

// BenchmarkRemoteStep compares remote rank actors (two workers reached over
// loopback gRPC, a TCP ring between them) with local ones (in this process,
// an in-process group), at TP=2: µs per engine step side by side, and their
// difference and ratio. On echo (no compute, no collectives) the difference
// is the messaging overhead of remoting; on small it includes the TCP ring's
// all-reduces against the in-process ones.
func BenchmarkRemoteStep(b *testing.B) {
	for _, c := range []struct {
		preset          string
		conc, maxTokens int
	}{{"echo", 1, 64}, {"echo", 8, 64}, {"small", 1, 8}} {
		tm := presetModel(b, c.preset)
		reqs := benchRequests(c.conc, c.maxTokens)
		var local, remote result
		b.Run(fmt.Sprintf("%s/local/conc=%d", c.preset, c.conc), func(b *testing.B) {
			local = runEngineWith(b, benchConfig(tm, nil), reqs)
		})
		b.Run(fmt.Sprintf("%s/remote/conc=%d", c.preset, c.conc), func(b *testing.B) {
			addrs := benchWorkers(b, 2)
			remote = runEngineWith(b, benchConfig(tm, &Config{Workers: addrs, Security: testSecurity()}), reqs)
			if local.steps > 0 && remote.steps > 0 {
				l, r := local.elapsed.Seconds()*1e6/float64(local.steps), remote.elapsed.Seconds()*1e6/float64(remote.steps)
				b.ReportMetric(l, "local-µs/step")
				b.ReportMetric(r-l, "overhead-µs/step")
				b.ReportMetric(r/l, "×local")
			}
		})
	}
}

func benchConfig(tm testModel, rem *Config) actors.Config {
	c := actors.Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: 2, NewBackend: cpuBackends(0), Capacity: benchCapacity,
		MaxPrefillTokens: 512, MaxRows: 64}
	if rem != nil {
		c.NewBackend, c.Placement = nil, Placement(*rem)
	}
	return c
}

// benchWorkers starts n workers in this process (their own actor systems,
// reached over loopback gRPC like any other).
func benchWorkers(b *testing.B, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		w, err := StartWorker(WorkerConfig{Listen: "127.0.0.1:0", NewBackend: cpuBackends(0), AnyModelDir: true, Security: testSecurity()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(w.Close)
		addrs[i] = w.Addr()
	}
	return addrs
}
