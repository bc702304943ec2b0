package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json "added_tokens".
type addedToken struct {
	id         int32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// matcher finds added tokens with leftmost-longest semantics (like the
// aho-corasick MatchKind::LeftmostLongest automaton HF uses): at the leftmost
// position where any pattern matches, the longest matching pattern wins; the
// search then resumes after the match.
type matcher struct {
	byFirst map[byte][]matcherPattern // sorted by decreasing length
}

type matcherPattern struct {
	text string
	id   int32
}

func newMatcher(pats []matcherPattern) *matcher {
	m := &matcher{byFirst: map[byte][]matcherPattern{}}
	for _, p := range pats {
		if p.text == "" {
			continue
		}
		m.byFirst[p.text[0]] = append(m.byFirst[p.text[0]], p)
	}
	for _, l := range m.byFirst {
		// Stable: among equal lengths the earlier pattern wins.
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].text) > len(l[j].text) })
	}
	return m
}

func (m *matcher) empty() bool { return m == nil || len(m.byFirst) == 0 }

// next returns the leftmost-longest match starting at or after from.
func (m *matcher) next(s string, from int) (start, end int, id int32, ok bool) {
	for i := from; i < len(s); i++ {
		for _, p := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], p.text) {
				return i, i + len(p.text), p.id, true
			}
		}
	}
	return 0, 0, 0, false
}

// segment is a piece of the input: either an added token (id >= 0) or text
// still to be processed (id < 0).
type segment struct {
	text string
	id   int32
}

// isWordChar is Rust regex's Unicode \w: Alphabetic, M, Nd, Pc, Join_Control.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

// splitAdded mirrors HF AddedVocabulary::find_matches: it splits s into
// added-token and plain segments, honouring single_word, lstrip and rstrip.
// Empty segments are dropped (as PreTokenizedString::split does).
func (t *Tokenizer) splitAdded(dst []segment, s string, m *matcher) []segment {
	if m.empty() || s == "" {
		if s != "" {
			dst = append(dst, segment{s, -1})
		}
		return dst
	}
	startOffset := 0
	pos := 0
	for {
		start, stop, id, ok := m.next(s, pos)
		if !ok {
			break
		}
		pos = stop
		tok := t.addedByID[id]
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			newStart := len(strings.TrimRightFunc(s[:start], unicode.IsSpace))
			start = max(newStart, startOffset)
		}
		if tok.rstrip {
			rest := s[stop:]
			stop += len(rest) - len(strings.TrimLeftFunc(rest, unicode.IsSpace))
		}
		if startOffset < start {
			dst = append(dst, segment{s[startOffset:start], -1})
		}
		if start < stop {
			dst = append(dst, segment{s[start:stop], id})
		}
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, segment{s[startOffset:], -1})
	}
	return dst
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	for _, r := range s {
		return isWordChar(r)
	}
	return false
}
