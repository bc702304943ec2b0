package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"cohort/actors"
)

// fakeTicker is a keep-alive clock the test advances: a send on c returns
// once the keep-alive goroutine took the tick, and the next send once that
// tick was handled.
type fakeTicker struct{ c chan time.Time }

func (f fakeTicker) C() <-chan time.Time { return f.c }
func (f fakeTicker) Stop()               {}

// TestKeepAlive: a silent stream gets an SSE comment line per silent tick,
// only between events, never inside one, and a stream that writes gets none.
func TestKeepAlive(t *testing.T) {
	// The first tick after a write finds the stream active; every later one
	// finds it silent. The last tick may land after the second write (then
	// it writes nothing), so the count of comments is n or n+1.
	cases := []struct {
		name          string
		first         string // written and flushed before the ticks
		ticks         int
		second        string // written after them
		before, after string // the output is before + n or n+1 comments + after
		n             int
	}{
		{"silent between events", "data: a\n\n", 4, "data: b\n\n", "data: a\n\n", "data: b\n\n", 2},
		{"silent from the start", "", 3, "data: b\n\n", "", "data: b\n\n", 2},
		{"no silence", "data: a\n\n", 1, "data: b\n\n", "data: a\n\n", "data: b\n\n", 0},
		{"inside an event", "data: par", 4, "tial\n\n", "data: partial\n\n", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			out := bufio.NewWriter(&buf)
			tk := fakeTicker{c: make(chan time.Time)}
			wrote, resume := make(chan struct{}), make(chan struct{})
			go func() {
				<-wrote
				// Each send returns once the previous tick was handled.
				for range c.ticks {
					tk.c <- time.Time{}
				}
				close(resume)
			}()
			withKeepAlive(out, tk, func(w *bufio.Writer) {
				w.WriteString(c.first)
				w.Flush()
				close(wrote)
				<-resume
				w.WriteString(c.second)
				w.Flush()
			}, nil)
			out.Flush()
			got := buf.String()
			want := c.before + strings.Repeat(keepAliveComment, c.n) + c.after
			wantMore := c.before + strings.Repeat(keepAliveComment, c.n+1) + c.after
			if got != want && (c.name == "inside an event" || got != wantMore) {
				t.Errorf("stream %q, want %q", got, want)
			}
		})
	}
}

// TestStreamKeepAliveOverHTTP: a stream whose engine request emits nothing
// (a long prefill, a recovery) still gets bytes: SSE comment lines every
// Options.KeepAlive.
func TestStreamKeepAliveOverHTTP(t *testing.T) {
	f := newFakeEngine()
	f.script = func(actors.Request) []actors.Event { return nil }
	f.hang = true
	base, _ := startFake(t, f, func(o *Options) { o.KeepAlive = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the test's bound
	defer cancel()
	res := postStream(t, ctx, base+"/v1/completions", `{"model":"fake","prompt":"hi","max_tokens":4,"stream":true}`)
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if sc.Text() == strings.TrimSuffix(keepAliveComment, "\n\n") {
			return
		}
	}
	t.Fatalf("no keep-alive comment on a silent stream: %v", sc.Err())
}

// failWriter fails every write: a client that went away.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestKeepAliveTellsGone: when a keep-alive comment cannot be written (the
// client is gone), gone is told at once, so a stream waiting on a silent
// engine request ends (before, its handler waited for an event forever).
func TestKeepAliveTellsGone(t *testing.T) {
	tk := fakeTicker{c: make(chan time.Time)}
	gone := make(chan struct{})
	out := bufio.NewWriterSize(failWriter{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		withKeepAlive(out, tk, func(*bufio.Writer) { <-gone }, func() { close(gone) })
	}()
	tk.c <- time.Time{} // the stream is silent and between events: a comment is due
	select {
	case <-done:
	case <-time.After(10 * time.Second): // the test's bound
		t.Fatal("the stream did not end after its client went away")
	}
}

// postStream posts body to url with ctx through testClient and
// returns the response; its body is closed when the test ends.
func postStream(t testing.TB, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := testClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}
