package reasoning

import (
	"strings"
	"testing"

	"cohort/internal/pieces"
)

func split(t testing.TB, startInside bool, text string, piece int) (reasoning, content string) {
	p := NewParser(startInside)
	var r, c strings.Builder
	pieces.Feed(p, text, piece, func(ev Event) {
		if ev.Text == "" {
			t.Fatal("empty event")
		}
		if ev.Reasoning {
			if c.Len() > 0 {
				t.Fatalf("reasoning %q after content %q", ev.Text, c.String())
			}
			r.WriteString(ev.Text)
		} else {
			c.WriteString(ev.Text)
		}
	})
	if p.HasReasoning() != (r.Len() > 0) {
		t.Fatalf("HasReasoning %v with reasoning %q", p.HasReasoning(), r.String())
	}
	return r.String(), c.String()
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name               string
		inside             bool
		text               string
		reasoning, content string
	}{
		{"prompt opened the block", true, "Let me think.\nStep 2.\n</think>\n\nThe answer is 4.", "Let me think.\nStep 2.", "The answer is 4."},
		{"output opens the block", false, "<think>\nHmm.\n</think>\n\nYes.", "Hmm.", "Yes."},
		{"blank before the block", false, "\n <think>x</think>y", "x", "y"},
		{"no block", false, "Just an answer.", "", "Just an answer."},
		{"no block, starts with <", false, "<b>bold</b>", "", "<b>bold</b>"},
		{"later <think> is content", false, "Hi <think>no</think>", "", "Hi <think>no</think>"},
		{"cut off inside", true, "still thinking\n", "still thinking", ""},
		{"cut off inside, opened by output", false, "<think>\nabc", "abc", ""},
		{"empty block", true, "\n\n</think>\n\nok", "", "ok"},
		{"newlines inside kept", true, "a\n\nb\n</think>c", "a\n\nb", "c"},
		{"second </think> is content", true, "r</think>c</think>d", "r", "c</think>d"},
		{"lookalike close", true, "a </thin k> b</think>", "a </thin k> b", ""},
		{"only the opening marker", false, "<think>", "", ""},
		{"partial marker at the end", false, "<thi", "", "<thi"},
		{"tool call after reasoning", true, "plan</think>\n\n<tool_call>\n<function=f>", "plan", "<tool_call>\n<function=f>"},
	}
	for _, tt := range tests {
		for _, piece := range []int{0, 1, 2, 3, 5, 11} {
			r, c := split(t, tt.inside, tt.text, piece)
			if r != tt.reasoning || c != tt.content {
				t.Errorf("%s (pieces of %d): reasoning %q content %q, want %q %q", tt.name, piece, r, c, tt.reasoning, tt.content)
			}
		}
	}
}

// FuzzSplit: any output in any split gives the same reasoning and content
// as fed whole, reasoning never follows content, and no text is invented:
// both are made of the output's bytes in order (markers and framing
// newlines removed).
func FuzzSplit(f *testing.F) {
	f.Add(true, "a\n</think>\n\nb", uint8(1))
	f.Add(false, "<think>x</think>y", uint8(2))
	f.Add(false, " \n<thi", uint8(3))
	f.Fuzz(func(t *testing.T, inside bool, text string, piece uint8) {
		r, c := split(t, inside, text, 0)
		r2, c2 := split(t, inside, text, int(piece%13)+1)
		if r != r2 || c != c2 {
			t.Fatalf("split %d: %q %q, whole %q %q", piece%13+1, r2, c2, r, c)
		}
		if !subsequence(r+c, text) {
			t.Fatalf("reasoning %q + content %q is not drawn from %q", r, c, text)
		}
	})
}

// subsequence reports whether s's bytes appear in t in order.
func subsequence(s, t string) bool {
	i := 0
	for j := 0; i < len(s) && j < len(t); j++ {
		if s[i] == t[j] {
			i++
		}
	}
	return i == len(s)
}
