package actors

import (
	"context"
	"io"
	"sync"
	"time"

	"cohort/model/sample"
)

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is how many prompt tokens were resumed from the prefix
	// cache (OpenAI's prompt_tokens_details.cached_tokens).
	CachedTokens int
}

// Event is one step of a request's output. The last event has Finish set
// ("stop", "length", "cancelled" or "error"; Err says why for "error").
type Event struct {
	Token    int32
	Text     string // text delta; never splits a UTF-8 sequence, never contains a stop string
	Logprob  float64
	Top      []sample.TokenLogprob
	HasToken bool
	Finish   string
	Usage    Usage
	Err      error
	// Time is when the request actor emitted the event. ScheduledAt is set
	// on the first token's event: when the request's prefill first ran.
	Time        time.Time
	ScheduledAt time.Time
	// PromptLogprobs, on the first token's event of a request with
	// PromptLogprobs, holds the logprob of prompt tokens 1..n-1 in order
	// (the first prompt token has none).
	PromptLogprobs []sample.Result
}

// Stream delivers a request's events. Its queue is unbounded so that the
// request actor never blocks on a slow client.
type Stream struct {
	mu     sync.Mutex
	events []Event
	closed bool
	notify chan struct{}
	cancel func()
	onDone func() // called once, when the final event is queued
}

func newStream() *Stream { return &Stream{notify: make(chan struct{}, 1)} }

func (s *Stream) push(ev Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.events = append(s.events, ev)
	done := ev.Finish != ""
	if done {
		s.closed = true
	}
	s.mu.Unlock()
	if done && s.onDone != nil {
		s.onDone()
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next event, io.EOF after the final one, or ctx's error.
func (s *Stream) Recv(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.events) > 0 {
			ev := s.events[0]
			s.events = s.events[1:]
			s.mu.Unlock()
			return ev, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return Event{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Cancel aborts the request; its state is freed on every rank.
func (s *Stream) Cancel() { s.cancel() }
