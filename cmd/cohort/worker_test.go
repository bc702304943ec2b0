package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// cliEnv makes the test binary run the cohort CLI with the arguments in
// it (space-separated): TestServeWorkers starts its workers that way, as
// processes of their own (each process may start protoactor remoting once
// without racing on grpc's global logger).
const cliEnv = "COHORT_TEST_CLI"

func TestMain(m *testing.M) {
	if args := os.Getenv(cliEnv); args != "" {
		if err := dispatch(context.Background(), strings.Fields(args), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "cohort:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startWorker runs `cohort worker --listen 127.0.0.1:0 --threads 1` with
// the extra flags in a child process and returns its address.
func startWorker(t *testing.T, extra string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliEnv+"=worker --listen 127.0.0.1:0 --threads 1 "+extra)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
		io.Copy(io.Discard, out)
	}()
	select {
	case banner := <-line:
		m := regexp.MustCompile(`listening on (\S+) `).FindStringSubmatch(banner)
		if m == nil {
			t.Fatalf("worker banner %q", banner)
		}
		return m[1]
	case <-time.After(time.Minute):
		t.Fatal("worker did not start")
		return ""
	}
}

// TestServeWorkers runs two `cohort worker` processes and `cohort serve
// --workers` (in this process) and completes a request.
func TestServeWorkers(t *testing.T) {
	dir := tinyDir(t)
	addrs := []string{startWorker(t, "--insecure --model "+dir), startWorker(t, "--insecure --model "+dir)}
	serveOneCompletion(t, []string{"serve", "--model", dir, "--port", "0", "--tp", "2", "--workers", strings.Join(addrs, ","), "--insecure",
		"--served-model-name", "tiny", "--max-model-len", "512", "--kv-budget-mib", "64"})
}

// serveOneCompletion runs `cohort` with args (a serve at TP=2 on the
// workers) until it prints its URL, checks that a 4-token completion
// succeeds, then stops it and checks that it ended cleanly.
func serveOneCompletion(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(urlWriter, 4)
	done := make(chan error, 1)
	go func() { done <- dispatch(ctx, args, out) }()
	var banner string
	select {
	case banner = <-out:
	case err := <-done:
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not print its URL")
	}
	m := regexp.MustCompile(`on (http://\S+) \(tp=2,`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("banner %q", banner)
	}
	res, err := (&http.Client{Timeout: time.Minute}).Post(m[1]+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tiny","prompt":"hello","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"completion_tokens":4`) {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestWorkerFlags: bad worker flags are refused with errors that say what
// is wrong, GPU workers included (their port needs TLS or --insecure too).
func TestWorkerFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		why  string // what the error says
	}{
		{[]string{"worker", "--device", "cuda"}, "--model is required"},
		{[]string{"worker", "--device", "tpu", "--model", "x", "--insecure"}, `unknown --device "tpu" (want cpu or cuda)`},
		{[]string{"worker", "--devices", "0", "--model", "x", "--insecure"}, "--devices applies only to --device cuda"},
		{[]string{"worker", "--device", "cuda", "--devices", "0,0", "--model", "x", "--insecure"}, "lists GPU 0 twice"},
		{[]string{"worker", "--device", "cuda", "--devices", "0,gpu1", "--model", "x", "--insecure"}, `"gpu1" is not a device ordinal`},
		{[]string{"worker", "--device", "cuda", "--listen", "127.0.0.1:0", "--model", "x"}, "or --insecure"}, // a GPU worker's port is not open either
		{[]string{"worker", "--threads", "-1"}, "--threads must not be negative"},
		{[]string{"worker", "extra"}, "unexpected arguments"},
		{[]string{"worker", "--listen", "not-an-address", "--model", "x", "--insecure"}, "not-an-address"},
		{[]string{"worker", "--listen", "127.0.0.1:0", "--insecure"}, "--model is required"},
		{[]string{"worker", "--listen", "127.0.0.1:0", "--model", "x"}, "or --insecure"},
		{[]string{"worker", "--listen", "127.0.0.1:0", "--model", "x", "--tls-cert", "c"}, "go together"},
	} {
		err := dispatch(context.Background(), c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%q: error %v, want one saying %q", c.args, err, c.why)
		}
	}
}
