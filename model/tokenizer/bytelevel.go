package tokenizer

import "unicode/utf8"

// Byte-level BPE (GPT-2 style) represents every byte of the UTF-8 input as one
// printable rune. Printable Latin-1 bytes map to themselves; the remaining 68
// bytes map, in increasing byte order, to U+0100 and upwards.

var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelString maps raw bytes to their byte-level representation.
func byteLevelString(s string) string {
	buf := make([]byte, 0, len(s)*2)
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}

// byteLevelDecodeToken appends the bytes a token stands for, following the HF
// ByteLevel decoder: if every rune of the token is a byte-level rune the
// corresponding bytes are produced, otherwise the token's own UTF-8 bytes are
// used unchanged (this is what happens to added tokens such as "<|im_end|>"
// containing characters outside the byte alphabet).
func byteLevelDecodeToken(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// seqLen inspects the (possibly incomplete) UTF-8 sequence at the start of p
// following the Unicode "maximal subpart" rules (the same rules as Rust's
// String::from_utf8_lossy). It returns n, the number of bytes that belong to
// the sequence or maximal ill-formed subpart, and status:
//
//	seqValid:      p[:n] is one well-formed character
//	seqInvalid:    p[:n] is a maximal ill-formed subpart, replaced by one U+FFFD
//	seqIncomplete: p[:n] (== p) is a valid but truncated prefix
const (
	seqValid = iota
	seqInvalid
	seqIncomplete
)

func seqLen(p []byte) (n int, status int) {
	b := p[0]
	if b < 0x80 {
		return 1, seqValid
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case b >= 0xC2 && b <= 0xDF:
		need = 1
	case b == 0xE0:
		need, lo = 2, 0xA0
	case b >= 0xE1 && b <= 0xEC, b == 0xEE, b == 0xEF:
		need = 2
	case b == 0xED:
		need, hi = 2, 0x9F
	case b == 0xF0:
		need, lo = 3, 0x90
	case b >= 0xF1 && b <= 0xF3:
		need = 3
	case b == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, seqInvalid
	}
	i := 1
	for k := 0; k < need; k++ {
		if i >= len(p) {
			return i, seqIncomplete
		}
		c := p[i]
		if c < lo || c > hi {
			return i, seqInvalid
		}
		lo, hi = 0x80, 0xBF
		i++
	}
	return i, seqValid
}

// appendLossy appends p to dst as valid UTF-8, replacing every maximal
// ill-formed subpart (including a truncated tail) with U+FFFD exactly like
// Rust's String::from_utf8_lossy.
func appendLossy(dst []byte, p []byte) []byte {
	for len(p) > 0 {
		n, st := seqLen(p)
		if st == seqValid {
			dst = append(dst, p[:n]...)
		} else {
			dst = append(dst, "\uFFFD"...)
		}
		p = p[n:]
	}
	return dst
}

// toValidUTF8 returns s unchanged when it is valid UTF-8 and otherwise a copy
// with ill-formed subparts replaced by U+FFFD (from_utf8_lossy semantics).
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendLossy(nil, []byte(s)))
}
