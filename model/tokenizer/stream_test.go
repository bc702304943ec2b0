package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkStream verifies that streaming ids yields valid UTF-8 deltas whose
// concatenation equals Decode(ids).
func checkStream(t testing.TB, tk *Tokenizer, ids []int32) {
	t.Helper()
	d := tk.NewStreamDecoder()
	var b strings.Builder
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			t.Fatalf("Add(%d) returned invalid UTF-8 %q (ids %v)", id, s, ids)
		}
		b.WriteString(s)
	}
	s := d.Flush()
	if !utf8.ValidString(s) {
		t.Fatalf("Flush returned invalid UTF-8 %q", s)
	}
	b.WriteString(s)
	if want := tk.Decode(ids); b.String() != want {
		t.Fatalf("stream of %v = %q, Decode = %q", ids, b.String(), want)
	}
}

func randomIDs(r *rand.Rand, vocab int) []int32 {
	ids := make([]int32, r.IntN(40))
	for i := range ids {
		switch r.IntN(10) {
		case 0:
			ids[i] = int32(r.IntN(vocab + 10)) // possibly unknown
		case 1, 2, 3, 4:
			ids[i] = int32(r.IntN(256)) // single bytes: many partial sequences
		default:
			ids[i] = int32(r.IntN(vocab))
		}
	}
	return ids
}

func TestStreamQwen3Random(t *testing.T) {
	tk := qwen3(t)
	r := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		checkStream(t, tk, randomIDs(r, tk.VocabSize()))
	}
}

func TestStreamSynthetic(t *testing.T) {
	tk := synthetic(t)
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		checkStream(t, tk, randomIDs(r, tk.VocabSize()))
	}
}

func TestStreamReuseAfterFlush(t *testing.T) {
	tk := synthetic(t)
	d := tk.NewStreamDecoder()
	euro := tk.Encode("€") // 3 byte tokens at most
	if got := d.Add(euro[0]); got != "" && len(euro) > 1 {
		t.Fatalf("partial sequence produced %q", got)
	}
	if got := d.Flush(); got != "\uFFFD" && len(euro) > 1 {
		t.Fatalf("Flush = %q, want U+FFFD", got)
	}
	var b strings.Builder
	for _, id := range tk.Encode("ok €") {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	if b.String() != "ok €" {
		t.Fatalf("after Flush: %q", b.String())
	}
}
