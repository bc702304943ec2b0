package httpapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fdServerEnv makes the test binary a server with a lowered open-file
// limit (see TestFDServerHelper).
const fdServerEnv = "COHORT_TEST_FD_SERVER"

// TestFDServerHelper is the child process of TestIdleConnectionsShed: it
// lowers its own RLIMIT_NOFILE, serves a fake engine on loopback, prints
// the address, and serves until its stdin closes. It is skipped otherwise.
func TestFDServerHelper(t *testing.T) {
	if os.Getenv(fdServerEnv) == "" {
		t.Skip("helper process of TestIdleConnectionsShed")
	}
	var lim syscall.Rlimit
	fmt.Sscan(os.Getenv(fdServerEnv), &lim.Cur)
	lim.Max = lim.Cur
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(newFakeEngine(), Options{ModelName: "fake", Tokenizer: synthTokenizer(t), MaxConnsPerIP: -1})
	if err != nil {
		t.Fatal(err)
	}
	ln, served := serveLoopback(t, s)
	fmt.Printf("ADDR %s\n", ln.Addr())
	stdin := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case err := <-served:
		fmt.Printf("SERVE-ENDED %v\n", err)
		os.Exit(3)
	case <-stdin:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Shutdown(ctx)
}

// TestIdleConnectionsShed: far more idle connections than the server has
// file descriptors leave it serving; it sheds idle connections instead of
// exiting on "accept4: too many open files". The server runs in a child
// process with RLIMIT_NOFILE lowered to 256, so the test is cheap: 20,000
// loopback connections (3,000 with -short), of which the client keeps at
// most 4,000 open at once.
func TestIdleConnectionsShed(t *testing.T) {
	total := 20000
	if testing.Short() {
		total = 3000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFDServerHelper$", "-test.v")
	cmd.Env = append(os.Environ(), fdServerEnv+"=256")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	var addr string
	for addr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the server exited before serving")
			}
			if a, ok := strings.CutPrefix(l, "ADDR "); ok {
				addr = a
			}
		case <-ctx.Done():
			t.Fatal("the server did not start")
		}
	}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: 5 * time.Second}
	refused := 0
	for i := 0; i < total; i++ {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			refused++ // a full backlog may refuse; the server must still serve
			continue
		}
		if open = append(open, c); len(open) > 4000 {
			open[0].Close()
			open = open[1:]
		}
	}
	t.Logf("%d connections, %d refused at connect", total, refused)
	url := "http://" + addr
	for _, path := range []string{"/health", "/v1/completions"} {
		method, body := http.MethodGet, ""
		if path == "/v1/completions" {
			method, body = http.MethodPost, `{"model":"fake","prompt":"hi","max_tokens":2}`
		}
		req, err := http.NewRequestWithContext(ctx, method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := testClient().Do(req)
		if err != nil {
			t.Fatalf("%s after the flood: %v", path, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s after the flood: %d", path, res.StatusCode)
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("the server exited: %v", err)
	default:
	}
}

// TestSlowClientsAreCut: a client that sends part of a request and stops
// (slowloris), one that connects and sends nothing, and a kept-alive one
// that sends no next request are all disconnected by the server within its
// timeouts.
func TestSlowClientsAreCut(t *testing.T) {
	cases := []struct {
		name  string
		write string
	}{
		{"partial headers", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"},
		{"partial body", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":"},
		{"nothing", ""},
		{"idle after a request", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	base, _ := startFake(t, newFakeEngine(), func(o *Options) {
		o.ReadTimeout, o.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	})
	addr := strings.TrimPrefix(base, "http://")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, c.write); err != nil {
				t.Fatal(err)
			}
			// The bound of the test, not a wait: the server must close first.
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept the connection open past its timeouts")
			}
		})
	}
}

// TestMaxConnsPerIP: over the per-address limit new connections are closed
// at once while the ones within it are served.
func TestMaxConnsPerIP(t *testing.T) {
	base, srv := startFake(t, newFakeEngine(), func(o *Options) { o.MaxConnsPerIP = 3 })
	addr := strings.TrimPrefix(base, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The server has accepted the three once a request on the last is answered.
	if _, err := io.WriteString(conns[2], "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conns[2].SetReadDeadline(time.Now().Add(10 * time.Second))
	if res, err := http.ReadResponse(bufio.NewReader(conns[2]), nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("a connection within the limit: %v %v", res, err)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(extra, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(extra), nil); err == nil {
		t.Fatal("a fourth connection from the same address was served")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a fourth connection was left open instead of closed")
	}
	if _, shed := srv.limiter.stats(); shed != 1 {
		t.Errorf("shed %d connections, want 1", shed)
	}
}

// TestRequestBounds: a request that can never be admitted (more choices
// than the engine holds) and one that would queue more than the per-request
// token bound get a 400 naming the bound, not a 429 to retry forever.
func TestRequestBounds(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"n over max pending", `{"model":"fake","prompt":"hi","n":8,"max_tokens":1}`, 400, "too_many_choices"},
		{"prompts × n over max pending", `{"model":"fake","prompt":["a","b","c"],"n":2,"max_tokens":1}`, 400, "too_many_choices"},
		{"work over the bound", `{"model":"fake","prompt":["a","b"],"n":2,"max_tokens":1000}`, 400, "request_too_large"},
		{"within both", `{"model":"fake","prompt":["a","b"],"n":2,"max_tokens":10}`, 200, ""},
	}
	f := newFakeEngine()
	base, srv := startFake(t, f, func(o *Options) { o.MaxRequestTokens = 2000 })
	srv.maxPending = func() int { return 4 }
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := do(t, http.MethodPost, base+"/v1/completions", c.body)
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, c.status, body)
			}
			if c.code != "" {
				if e := checkEnvelope(t, body); deref(e.Error.Code) != c.code {
					t.Errorf("code %q, want %q: %s", deref(e.Error.Code), c.code, e.Error.Message)
				}
			}
		})
	}
}

// TestRetryAfterFollowsRecovery: a 503's Retry-After is the engine's
// measured recovery time, rounded up to whole seconds, not a constant 5 s.
func TestRetryAfterFollowsRecovery(t *testing.T) {
	cases := []struct {
		name     string
		recovery time.Duration // 0: the engine measured none (no RetryAfter)
		want     string
	}{
		{"fast recovery", 300 * time.Millisecond, "1"},
		{"slow recovery", 7200 * time.Millisecond, "8"},
		{"nothing measured", 0, "5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEngine()
			f.setNotReady("rebuilding")
			base, srv := startFake(t, f, nil)
			if c.recovery > 0 {
				srv.retryAfter = func(time.Duration) time.Duration { return c.recovery }
			}
			for _, path := range []string{"/ready", "/v1/completions"} {
				res, _ := do(t, http.MethodPost, base+path, `{"model":"fake","prompt":"hi","max_tokens":1}`)
				if path == "/ready" {
					res, _ = do(t, http.MethodGet, base+path, "")
				}
				if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != c.want {
					t.Errorf("%s: %d Retry-After %q, want 503 %q", path, res.StatusCode, res.Header.Get("Retry-After"), c.want)
				}
			}
		})
	}
}
