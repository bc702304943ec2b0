package tokenizer

import "testing"

func TestByteLevelAlphabet(t *testing.T) {
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '!': '!', 0: 'Ā', 0xAD: 'Ń', 0xFF: 'ÿ', 0x7F: 'ġ'} {
		if got := byteToRune[b]; got != want {
			t.Errorf("byteToRune[%#x] = %q, want %q", b, got, want)
		}
	}
	if len(runeToByte) != 256 {
		t.Fatalf("runeToByte has %d entries", len(runeToByte))
	}
}

// Expected values follow Rust's String::from_utf8_lossy (one U+FFFD per
// maximal ill-formed subpart).
func TestAppendLossy(t *testing.T) {
	const R = "\uFFFD"
	cases := map[string]string{
		"":                 "",
		"abc":              "abc",
		"\xe4\xb8\xad":     "中",
		"\xe4\xb8":         R,
		"\xe4\xb8a":        R + "a",
		"\xe4":             R,
		"\xf0\x9f\x98":     R,
		"\xf0\x9f\x98\x80": "😀",
		"\xc0\x80":         R + R,
		"\xed\xa0\x80":     R + R + R,
		"\xe0\x80\xaf":     R + R + R,
		"\xf4\x90\x80\x80": R + R + R + R,
		"\xf5":             R,
		"\x80\x80":         R + R,
		"a\xffb\xfe":       "a" + R + "b" + R,
		"\xf0\x9f\xe4\xb8": R + R,
	}
	for in, want := range cases {
		if got := string(appendLossy(nil, []byte(in))); got != want {
			t.Errorf("appendLossy(%q) = %q, want %q", in, got, want)
		}
	}
}
