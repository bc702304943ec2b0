package supervision

import (
	"testing"
	"time"
)

// TestProgressWatchdog drives the watchdog with an injected clock: each
// case is a sequence of marks and checks at given times.
func TestProgressWatchdog(t *testing.T) {
	const bound = 10 * time.Second
	type op struct {
		at      time.Duration // since t0
		mark    bool          // Mark instead of Check
		busy    bool
		stalled bool // want (Check)
		changed bool // want (Check; for a Mark: that it ended a stall)
	}
	cases := []struct {
		name string
		ops  []op
	}{
		{"idle engine never stalls", []op{
			{at: 0, mark: true},
			{at: time.Hour, busy: false},
		}},
		{"busy without a step past the bound", []op{
			{at: 0, mark: true},
			{at: 5 * time.Second, busy: true},
			{at: 10 * time.Second, busy: true},
			{at: 10*time.Second + 1, busy: true, stalled: true, changed: true},
			{at: 20 * time.Second, busy: true, stalled: true},
		}},
		{"steps completing keep it healthy", []op{
			{at: 0, mark: true},
			{at: 9 * time.Second, mark: true},
			{at: 18 * time.Second, busy: true},
			{at: 18 * time.Second, mark: true},
			{at: 27 * time.Second, busy: true},
		}},
		{"a step completing again ends the stall", []op{
			{at: 0, mark: true},
			{at: 11 * time.Second, busy: true, stalled: true, changed: true},
			{at: 12 * time.Second, mark: true, changed: true},
			{at: 13 * time.Second, busy: true},
		}},
		{"idle time before work arrives is not counted", []op{
			{at: 0, mark: true},
			{at: 5 * time.Second, busy: false},
			{at: time.Hour, busy: true},
			{at: time.Hour + 10*time.Second, busy: true},
			{at: time.Hour + 11*time.Second, busy: true, stalled: true, changed: true},
		}},
		{"work gone ends the stall", []op{
			{at: 0, mark: true},
			{at: 11 * time.Second, busy: true, stalled: true, changed: true},
			{at: 12 * time.Second, busy: false, changed: true},
			{at: 13 * time.Second, busy: true},
		}},
		{"zero bound is off", []op{
			{at: 0, mark: true},
			{at: time.Hour, busy: true},
		}},
	}
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Progress
			b := bound
			if tc.name == "zero bound is off" {
				b = 0
			}
			for i, o := range tc.ops {
				now := t0.Add(o.at)
				if o.mark {
					if ended := p.Mark(now); ended != o.changed {
						t.Fatalf("op %d: Mark at %v ended a stall: %v, want %v", i, o.at, ended, o.changed)
					}
					continue
				}
				stalled, changed := p.Check(now, o.busy, b)
				if stalled != o.stalled || changed != o.changed || p.Stalled() != stalled {
					t.Fatalf("op %d at %v (busy %v): stalled %v changed %v, want %v %v", i, o.at, o.busy, stalled, changed, o.stalled, o.changed)
				}
			}
		})
	}
}
