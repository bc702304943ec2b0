package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Go's regexp package has no look-around, so the pre-tokenizer regexes that
// HF tokenizers evaluates with Oniguruma are reproduced here by hand-written
// scanners. Each scanner returns the end of the match that a backtracking,
// leftmost-first regex engine finds at position i. For these patterns every
// character is matched by some alternative, so a match always starts exactly
// at i and the pieces tile the input without gaps.
//
// Character classes (Oniguruma, UTF-8 encoding):
//
//	\p{L}  general category L (Lu, Ll, Lt, Lm, Lo)       -> unicode.IsLetter
//	\p{N}  general category N (Nd, Nl, No)               -> unicode.IsNumber
//	\s     U+0009..U+000D, U+0085, Zs, Zl, Zp            -> unicode.IsSpace
//
// unicode.IsSpace is exactly that set (it is the White_Space property).

// Known pre-tokenizer regexes.
const (
	// qwenPattern is used by Qwen2/2.5/3 (and, with \p{N}{1,3}, Llama 3).
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// llama3Pattern differs from qwenPattern only by grouping up to 3 digits.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Pattern is the regex of the HF ByteLevel pre-tokenizer (use_regex).
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// splitter appends the [start,end) byte ranges of the pieces of s to dst.
type splitter func(s string, dst [][2]int) [][2]int

func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// isOther reports membership in [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runEnd returns the end of the maximal run of runes satisfying f from i.
func runEnd(s string, i int, f func(rune) bool) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if !f(r) {
			break
		}
		i += n
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i, returning the end or -1.
// With fold, letters match case-insensitively using Unicode simple case
// folding, under which U+017F LATIN SMALL LETTER LONG S also matches 's'.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	r1, n1 := runeAt(s, i+1)
	lower := func(r rune) rune {
		if !fold {
			return r
		}
		switch {
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		case r == 0x017F:
			return 's'
		}
		return r
	}
	j := i + 1 + n1
	switch lower(r1) {
	case 's', 't', 'm', 'd':
		return j
	case 'r', 'v':
		if r2, n2 := runeAt(s, j); lower(r2) == 'e' {
			return j + n2
		}
	case 'l':
		if r2, n2 := runeAt(s, j); lower(r2) == 'l' {
			return j + n2
		}
	}
	return -1
}

// spaceRun scans the maximal whitespace run starting at i and returns its
// end, the start of its last CR or LF (-1 if none) and the start of its last
// rune.
func spaceRun(s string, i int) (end, lastNL, lastStart int) {
	end, lastNL, lastStart = i, -1, i
	for end < len(s) {
		r, n := runeAt(s, end)
		if !isS(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		lastStart = end
		end += n
	}
	return
}

// qwenSplitter returns the scanner for qwenPattern (maxDigits 1) or
// llama3Pattern (maxDigits 3).
func qwenSplitter(maxDigits int) splitter {
	return func(s string, dst [][2]int) [][2]int {
		for i := 0; i < len(s); {
			end := qwenMatch(s, i, maxDigits)
			dst = append(dst, [2]int{i, end})
			i = end
		}
		return dst
	}
}

func qwenMatch(s string, i, maxDigits int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if e := contraction(s, i, true); e >= 0 {
		return e
	}
	r0, n0 := runeAt(s, i)
	r1, _ := runeAt(s, i+n0)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if r0 != '\r' && r0 != '\n' && !isL(r0) && !isN(r0) {
		if r1 >= 0 && isL(r1) {
			return runEnd(s, i+n0, isL)
		}
	} else if isL(r0) {
		return runEnd(s, i, isL)
	}
	// \p{N} (or \p{N}{1,maxDigits})
	if isN(r0) {
		j := i + n0
		for k := 1; k < maxDigits; k++ {
			r, n := runeAt(s, j)
			if r < 0 || !isN(r) {
				break
			}
			j += n
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := -1
	if r0 == ' ' && r1 >= 0 && isOther(r1) {
		start = i + n0
	} else if isOther(r0) {
		start = i
	}
	if start >= 0 {
		j := runEnd(s, start, isOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// Only whitespace is left at this point.
	end, lastNL, lastStart := spaceRun(s, i)
	// \s*[\r\n]+ : \s* backtracks to the last CR/LF of the run; [\r\n]+
	// then matches that single character (nothing after it in the run is
	// CR/LF).
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : the whole run at end of text, otherwise the run minus its
	// last character (which is then followed by whitespace), if non-empty.
	if end == len(s) {
		return end
	}
	if lastStart > i {
		return lastStart
	}
	// \s+
	return end
}

// gpt2Split is the scanner for gpt2Pattern.
func gpt2Split(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		end := gpt2Match(s, i)
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst
}

func gpt2Match(s string, i int) int {
	if e := contraction(s, i, false); e >= 0 {
		return e
	}
	r0, n0 := runeAt(s, i)
	r1, _ := runeAt(s, i+n0)
	for _, class := range [...]func(rune) bool{isL, isN, isOther} {
		if r0 == ' ' && r1 >= 0 && class(r1) {
			return runEnd(s, i+n0, class)
		}
		if class(r0) {
			return runEnd(s, i, class)
		}
	}
	end, _, lastStart := spaceRun(s, i)
	if end == len(s) {
		return end
	}
	if lastStart > i {
		return lastStart
	}
	return end
}
