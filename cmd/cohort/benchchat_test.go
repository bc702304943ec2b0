package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runChatBench runs `cohort bench --chat` with args (the JSON report
// written to a temporary file) and returns the report and what it printed.
func runChatBench(t *testing.T, args ...string) (chatReport, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "chat.json")
	var stdout bytes.Buffer
	if err := dispatch(context.Background(), append(append([]string{"bench", "--chat"}, args...), "--json", out), &stdout); err != nil {
		t.Fatalf("bench --chat: %v\n%s", err, stdout.String())
	}
	var r chatReport
	data, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, stdout.String()
}

// TestBenchChat runs the chat benchmark on a small shape of the tiny
// preset (one conversation seeded): both runs report every turn, the
// replies agree, and the cache serves most of the later turns' prompts.
func TestBenchChat(t *testing.T) {
	r, text := runChatBench(t, "--preset", "tiny", "--chat-system", "96", "--chat-turns", "3", "--chat-turn-tokens", "12",
		"--chat-reply-tokens", "20", "--chat-conversations", "3", "--chat-temperature", "0.8")
	for _, want := range []string{"TTFT p50 ms (no cache)", "TTFT p50 ms (cache)", "after the first turn", "replies identical with and without the cache: 9 of 9",
		"first token equal in 3 of 3, common prefix median 20 of 20 tokens"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if len(r.Runs) != 2 || r.Runs[0].PrefixCache || !r.Runs[1].PrefixCache || len(r.Runs[1].Turns) != 3 {
		t.Fatalf("runs: %+v", r.Runs)
	}
	if nc, c := r.Runs[0], r.Runs[1]; nc.HitRate != 0 || c.HitRateAfterFirst < 0.6 || c.EngineHits == 0 {
		t.Errorf("hit rates: without the cache %.2f, with it %.2f after the first turn (engine %d of %d)",
			nc.HitRate, c.HitRateAfterFirst, c.EngineHits, c.EngineQueries)
	}
}

func TestChatMode(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--chat"}, true},
		{[]string{"--preset", "tiny", "-chat=true"}, true},
		{[]string{"--chat=false"}, false},
		{[]string{"--batch", "1"}, false},
		{[]string{"--", "--chat"}, false},
	} {
		if got := chatMode(c.args); got != c.want {
			t.Errorf("chatMode(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestAgreement: the replies two runs share, and the shared prefix of
// each conversation's first replies, however the later turns went.
func TestAgreement(t *testing.T) {
	run := func(replies ...[][]int32) chatRun { return chatRun{replies: replies} }
	a := agreement(
		run([][]int32{{1, 2, 3}, {9}}, [][]int32{{4, 5}}, [][]int32{{7}}, nil),
		run([][]int32{{1, 2, 4}, {9}}, [][]int32{{6, 5}}, [][]int32{{7}}, nil))
	if want := []int{2, 0, 1}; !slices.Equal(a.FirstTurnPrefix, want) || a.SameReplies != 2 || a.ComparedReplies != 4 {
		t.Errorf("agreement = %+v, want 2 of 4 replies and first-reply prefixes %v", a, want)
	}
}
