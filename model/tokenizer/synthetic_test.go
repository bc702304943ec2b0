package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var syntheticSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// syntheticTok is the synthetic tokenizer of 400 merges, made once.
var syntheticTok = onceTokenizer(func(string) (*Tokenizer, error) {
	data, err := Synthetic(400, syntheticSpecials)
	if err != nil {
		return nil, err
	}
	return Parse(data)
})

func synthetic(t testing.TB) *Tokenizer {
	t.Helper()
	return syntheticTok(t, "Synthetic(400)")
}

func TestSyntheticDeterministic(t *testing.T) {
	a, err := Synthetic(300, syntheticSpecials)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Synthetic(300, syntheticSpecials)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("Synthetic output is not deterministic")
	}
}

func TestSyntheticShape(t *testing.T) {
	for _, n := range []int{0, 1, 50, 400, 6000} {
		data, err := Synthetic(n, syntheticSpecials)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := Parse(data)
		if err != nil {
			t.Fatalf("Synthetic(%d) does not parse: %v", n, err)
		}
		if got, want := tk.VocabSize(), 256+n+len(syntheticSpecials); got != want {
			t.Errorf("Synthetic(%d): VocabSize = %d, want %d", n, got, want)
		}
		if got := len(tk.model.merges); got != n {
			t.Errorf("Synthetic(%d): %d merges", n, got)
		}
		for i, s := range syntheticSpecials {
			id := int32(256 + n + i)
			if got, ok := tk.TokenID(s); !ok || got != id || !tk.IsSpecial(id) {
				t.Errorf("Synthetic(%d): special %q: id %d %v, want %d", n, s, got, ok, id)
			}
		}
		for b := 0; b < 256; b++ {
			if tok, _ := tk.Token(int32(b)); tok != string(byteToRune[b]) {
				t.Fatalf("token %d = %q", b, tok)
			}
		}
		text := "The quick brown fox: <|im_start|>user\nhi<|im_end|>"
		ids := tk.Encode(text)
		if tk.Decode(ids) != text {
			t.Errorf("Synthetic(%d): round trip of %q = %q", n, text, tk.Decode(ids))
		}
		if n >= 400 && len(ids) >= len(text)/2 {
			t.Errorf("Synthetic(%d): %d ids for %d bytes: merges not effective", n, len(ids), len(text))
		}
	}
}

func TestSyntheticErrors(t *testing.T) {
	for _, c := range []struct {
		n        int
		specials []string
	}{{-1, nil}, {10, []string{""}}, {10, []string{"<a>", "<a>"}}, {10, []string{"a"}}} {
		if _, err := Synthetic(c.n, c.specials); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("Synthetic(%d, %q): err = %v", c.n, c.specials, err)
		}
	}
}

var runePools = [][2]rune{
	{0x00, 0x7f}, {0x20, 0x7e}, {0x20, 0x7e}, {0xa0, 0x24f}, {0x300, 0x36f}, {0x370, 0x52f},
	{0x590, 0x6ff}, {0x900, 0x97f}, {0xe00, 0xe7f}, {0x1100, 0x11ff}, {0x2000, 0x206f},
	{0x3000, 0x30ff}, {0x4e00, 0x4fff}, {0xac00, 0xad00}, {0xfe00, 0xfe0f}, {0x1f300, 0x1f6ff},
	{0x10000, 0x10ffff},
}

func randomText(r *rand.Rand) string {
	var b strings.Builder
	n := r.IntN(30)
	for range n {
		p := runePools[r.IntN(len(runePools))]
		c := p[0] + rune(r.IntN(int(p[1]-p[0]+1)))
		if !utf8.ValidRune(c) {
			c = ' '
		}
		if r.IntN(4) == 0 {
			c = rune(" \t\n\r'sS"[r.IntN(7)])
		}
		b.WriteRune(c)
	}
	return b.String()
}

func TestSyntheticRoundTrip(t *testing.T) {
	tk := synthetic(t)
	r := rand.New(rand.NewPCG(5, 6))
	for range 5000 {
		s := randomText(r)
		ids := tk.Encode(s)
		if got, want := tk.Decode(ids), norm.NFC.String(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	}
}

// The BPE merge result does not depend on the cache.
func TestCacheConsistency(t *testing.T) {
	tk := synthetic(t)
	r := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		s := randomText(r)
		if first, second := tk.Encode(s), tk.Encode(s); !slices.Equal(first, second) {
			t.Fatalf("cached encoding of %q differs: %v, then %v", s, first, second)
		}
	}
}
