package actors

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"cohort/internal/testmodels/servetest"
)

// TestStepTiming: decode and other steps are averaged apart, each kind logs
// once per stepTimingEvery of its steps, and it is silent when off.
func TestStepTiming(t *testing.T) {
	buf := captureLog(t)
	st := newStepTiming(3)
	st.on = true
	for range stepTimingEvery {
		st.add(true, time.Millisecond, 2*time.Millisecond, 0, 3*time.Millisecond)
	}
	for range stepTimingEvery - 1 {
		st.add(false, 9*time.Millisecond, 0, 0, 9*time.Millisecond)
	}
	out := buf.String()
	if !strings.Contains(out, "rank 3: mean over 30 decode steps: forward (host) 1ms, logits wait 2ms, sampling 0s, step 3ms") {
		t.Errorf("log %q lacks the decode means", out)
	}
	if strings.Contains(out, "other steps") {
		t.Errorf("other steps logged before %d of them: %q", stepTimingEvery, out)
	}
	if st.kinds[0].n != 0 || st.kinds[1].n != stepTimingEvery-1 {
		t.Errorf("counts after logging: decode %d, other %d", st.kinds[0].n, st.kinds[1].n)
	}
	buf.Reset()
	var off *stepTiming
	off.add(true, time.Second, 0, 0, time.Second) // nil: records nothing
	quiet := newStepTiming(1)
	quiet.on = false
	for range 2 * stepTimingEvery {
		quiet.add(true, time.Second, 0, 0, time.Second)
	}
	if buf.Len() != 0 || quiet.kinds[0].n != 0 {
		t.Errorf("an off timing logged %q or counted %d", buf.String(), quiet.kinds[0].n)
	}
	each := newStepTiming(2)
	each.on, each.eachOther = true, true
	each.add(true, time.Millisecond, 0, 0, time.Millisecond)
	each.add(false, 4*time.Millisecond, 150*time.Millisecond, 0, 154*time.Millisecond)
	if out := buf.String(); out == "" || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, "rank 2: other step: forward (host) 4ms, logits wait 150ms, sampling 0s, step 154ms") {
		t.Errorf("per-step log of other steps: %q, want one line for the prefill step alone", out)
	}
}

// captureLog sends the standard logger to a buffer until the test ends.
func captureLog(t *testing.T) *bytes.Buffer { return servetest.CaptureLog(t) }
