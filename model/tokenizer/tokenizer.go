// Package tokenizer implements Hugging Face tokenizer.json byte-level BPE
// tokenizers (as used by Qwen2/2.5/3 and GPT-2 style models), reproducing the
// ids produced by the HF `tokenizers` library.
//
// Encoding follows the HF pipeline:
//
//  1. Added tokens with normalized=false are split out of the raw text
//     (leftmost-longest matching, honouring single_word/lstrip/rstrip).
//  2. Every remaining piece is normalized (e.g. NFC) on its own, then added
//     tokens with normalized=true are split out of it.
//  3. The remaining pieces are pre-tokenized (regex split, byte-level
//     mapping) and each pre-token is encoded by the BPE model.
//
// Input that is not valid UTF-8 is first converted the way Rust's
// String::from_utf8_lossy does (each maximal ill-formed subpart becomes one
// U+FFFD); HF itself only ever sees valid strings.
//
// Supported components: normalizers NFC/NFD/NFKC/NFKD (and Sequence of
// them); pre-tokenizers Split (Qwen, Llama-3 regexes, behavior Isolated),
// ByteLevel (add_prefix_space false, with or without the GPT-2 regex) and
// Sequence of those; model BPE (no dropout, no subword prefix/suffix, no byte
// fallback); decoder ByteLevel (or none). Anything else is rejected by Parse.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	model *bpeModel

	normalizers []norm.Form
	splitters   []splitter
	byteLevel   bool // byte-level pre-tokenizer mapping is applied
	decodeBytes bool // ByteLevel decoder (otherwise tokens are joined by " ")

	added          []*addedToken
	addedByID      map[int32]*addedToken
	addedByContent map[string]int32
	specialSet     map[string]bool // contents of special tokens
	rawMatcher     *matcher        // added tokens with normalized=false
	normMatcher    *matcher        // added tokens with normalized=true (normalized form)

	modelTok    []string // model vocabulary by id (dense ids)
	modelHas    []bool
	modelSparse map[int32]string // used instead when ids are very sparse
	size        int              // max id + 1
}

// maxTokenID bounds ids so that id-indexed tables stay reasonable.
const maxTokenID = 1<<24 - 1

// Load reads and parses a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return Parse(data)
}

type jsonTokenizer struct {
	Version      *string         `json:"version"`
	AddedTokens  []jsonAdded     `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        *jsonModel      `json:"model"`
}

type jsonAdded struct {
	ID         *int64  `json:"id"`
	Content    *string `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    bool    `json:"special"`
}

type jsonModel struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Dropout                 *float64         `json:"dropout"`
}

type jsonComponent struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	// Split
	Pattern  *struct{ Regex, String *string } `json:"pattern"`
	Behavior string                           `json:"behavior"`
	Invert   bool                             `json:"invert"`
	// ByteLevel
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// Parse parses the contents of a tokenizer.json file.
func Parse(data []byte) (*Tokenizer, error) {
	var jt jsonTokenizer
	if err := json.Unmarshal(data, &jt); err != nil {
		return nil, fmt.Errorf("tokenizer: invalid tokenizer.json: %w", err)
	}
	if jt.Version != nil && *jt.Version != "1.0" {
		return nil, fmt.Errorf("tokenizer: unknown tokenizer.json version %q", *jt.Version)
	}
	t := &Tokenizer{
		addedByID:      map[int32]*addedToken{},
		addedByContent: map[string]int32{},
		specialSet:     map[string]bool{},
	}
	if err := t.parseNormalizer(jt.Normalizer, 0); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(jt.PreTokenizer, 0); err != nil {
		return nil, err
	}
	if err := t.parseDecoder(jt.Decoder); err != nil {
		return nil, err
	}
	if jt.Model == nil {
		return nil, fmt.Errorf("tokenizer: missing model")
	}
	if err := t.parseModel(jt.Model); err != nil {
		return nil, err
	}
	if err := t.addTokens(jt.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

// component decodes one tokenizer.json component, a what (normalizer,
// pre_tokenizer or decoder) nested depth deep; nil when the field is null.
func component(raw json.RawMessage, depth int, what string) (*jsonComponent, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > 8 {
		return nil, fmt.Errorf("tokenizer: %s nesting too deep", what)
	}
	var c jsonComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: invalid %s: %w", what, err)
	}
	return &c, nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage, depth int) error {
	c, err := component(raw, depth, "normalizer")
	if c == nil || err != nil {
		return err
	}
	switch c.Type {
	case "NFC":
		t.normalizers = append(t.normalizers, norm.NFC)
	case "NFD":
		t.normalizers = append(t.normalizers, norm.NFD)
	case "NFKC":
		t.normalizers = append(t.normalizers, norm.NFKC)
	case "NFKD":
		t.normalizers = append(t.normalizers, norm.NFKD)
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.parseNormalizer(n, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("tokenizer: unsupported normalizer %q", c.Type)
	}
	return nil
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage, depth int) error {
	c, err := component(raw, depth, "pre_tokenizer")
	if c == nil || err != nil {
		return err
	}
	if t.byteLevel {
		return fmt.Errorf("tokenizer: unsupported pre_tokenizer %q after ByteLevel", c.Type)
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Pretokenizers {
			if err := t.parsePreTokenizer(p, depth+1); err != nil {
				return err
			}
		}
	case "Split":
		if c.Behavior != "Isolated" || c.Invert {
			return fmt.Errorf("tokenizer: unsupported Split behavior %q (invert %v)", c.Behavior, c.Invert)
		}
		if c.Pattern == nil || c.Pattern.Regex == nil {
			return fmt.Errorf("tokenizer: unsupported Split pattern (only known regexes are supported)")
		}
		switch *c.Pattern.Regex {
		case qwenPattern:
			t.splitters = append(t.splitters, qwenSplitter(1))
		case llama3Pattern:
			t.splitters = append(t.splitters, qwenSplitter(3))
		case gpt2Pattern:
			t.splitters = append(t.splitters, gpt2Split)
		default:
			return fmt.Errorf("tokenizer: unsupported Split regex %q", *c.Pattern.Regex)
		}
	case "ByteLevel":
		if c.AddPrefixSpace {
			return fmt.Errorf("tokenizer: unsupported ByteLevel add_prefix_space=true")
		}
		if c.UseRegex == nil || *c.UseRegex {
			t.splitters = append(t.splitters, gpt2Split)
		}
		t.byteLevel = true
	default:
		return fmt.Errorf("tokenizer: unsupported pre_tokenizer %q", c.Type)
	}
	return nil
}

func (t *Tokenizer) parseDecoder(raw json.RawMessage) error {
	c, err := component(raw, 0, "decoder")
	if c == nil || err != nil {
		return err
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("tokenizer: unsupported decoder %q", c.Type)
	}
	t.decodeBytes = true
	return nil
}

func (t *Tokenizer) parseModel(jm *jsonModel) error {
	if jm.Type != "" && jm.Type != "BPE" {
		return fmt.Errorf("tokenizer: unsupported model %q", jm.Type)
	}
	if jm.Dropout != nil && *jm.Dropout > 0 {
		return fmt.Errorf("tokenizer: unsupported BPE dropout")
	}
	if (jm.ContinuingSubwordPrefix != nil && *jm.ContinuingSubwordPrefix != "") ||
		(jm.EndOfWordSuffix != nil && *jm.EndOfWordSuffix != "") {
		return fmt.Errorf("tokenizer: unsupported BPE continuing_subword_prefix/end_of_word_suffix")
	}
	if jm.ByteFallback {
		return fmt.Errorf("tokenizer: unsupported BPE byte_fallback")
	}
	m := &bpeModel{
		vocab:        make(map[string]int32, len(jm.Vocab)),
		merges:       map[uint64]mergeInfo{},
		runeIDs:      map[rune]int32{},
		unkID:        -1,
		fuseUnk:      jm.FuseUnk,
		ignoreMerges: jm.IgnoreMerges,
	}
	maxID := -1
	for tok, id := range jm.Vocab {
		if id < 0 || id > maxTokenID {
			return fmt.Errorf("tokenizer: token id %d of %q out of range", id, tok)
		}
		m.vocab[tok] = int32(id)
		maxID = max(maxID, int(id))
	}
	dense := maxID < 2*len(m.vocab)+1024
	if dense {
		t.modelTok = make([]string, maxID+1)
		t.modelHas = make([]bool, maxID+1)
	} else {
		t.modelSparse = make(map[int32]string, len(m.vocab))
	}
	for tok, id := range m.vocab {
		if dense {
			t.modelTok[id] = tok
			t.modelHas[id] = true
		} else {
			t.modelSparse[id] = tok
		}
		if r, n := runeAt(tok, 0); n == len(tok) && n > 0 {
			m.runeIDs[r] = id
		}
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.runeIDs[byteToRune[b]]; ok {
			m.byteIDs[b] = id
		}
	}
	if jm.UnkToken != nil {
		id, ok := m.vocab[*jm.UnkToken]
		if !ok {
			return fmt.Errorf("tokenizer: unk_token %q not in vocab", *jm.UnkToken)
		}
		m.unkID = id
	}
	pairs, err := parseMerges(jm.Merges)
	if err != nil {
		return err
	}
	for rank, p := range pairs {
		a, ok := m.vocab[p[0]]
		if !ok {
			return fmt.Errorf("tokenizer: merge %d: token %q not in vocab", rank+1, p[0])
		}
		b, ok := m.vocab[p[1]]
		if !ok {
			return fmt.Errorf("tokenizer: merge %d: token %q not in vocab", rank+1, p[1])
		}
		n, ok := m.vocab[p[0]+p[1]]
		if !ok {
			return fmt.Errorf("tokenizer: merge %d: token %q not in vocab", rank+1, p[0]+p[1])
		}
		// Later duplicates overwrite earlier ones, like HF's HashMap collect.
		m.merges[pairKey(a, b)] = mergeInfo{rank: int32(rank), newID: n}
	}
	t.model = m
	t.size = maxID + 1
	return nil
}

// parseMerges accepts both merge encodings of tokenizer.json: a list of
// "a b" strings (older files) or a list of ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, fmt.Errorf("tokenizer: merges must be a list")
	}
	rest := bytes.TrimSpace(raw[1:])
	if len(rest) > 0 && rest[0] == '"' {
		var lines []string
		if err := json.Unmarshal(raw, &lines); err != nil {
			return nil, fmt.Errorf("tokenizer: invalid merges: %w", err)
		}
		out := make([][2]string, 0, len(lines))
		for i, l := range lines {
			if strings.HasPrefix(l, "#version") {
				continue
			}
			parts := strings.Split(l, " ")
			if len(parts) != 2 {
				return nil, fmt.Errorf("tokenizer: merge %d: %q is not two space-separated tokens", i+1, l)
			}
			out = append(out, [2]string{parts[0], parts[1]})
		}
		return out, nil
	}
	var lists [][]string
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, fmt.Errorf("tokenizer: invalid merges: %w", err)
	}
	out := make([][2]string, len(lists))
	for i, l := range lists {
		if len(l) != 2 {
			return nil, fmt.Errorf("tokenizer: merge %d has %d elements, want 2", i+1, len(l))
		}
		out[i] = [2]string{l[0], l[1]}
	}
	return out, nil
}

// addTokens registers the added tokens the way HF's AddedVocabulary does
// when loading tokenizer.json: a token whose content is already known keeps
// that id; otherwise it gets the next free id after the model vocabulary
// (HF ignores the "id" field and only warns on mismatch; so do we, silently).
func (t *Tokenizer) addTokens(list []jsonAdded) error {
	modelSize := int64(len(t.model.vocab)) // HF get_vocab_size(): number of entries
	var specials, plain []*addedToken
	type tokenKey struct {
		content                                         string
		singleWord, lstrip, rstrip, normalized, special bool
	}
	present := map[tokenKey]bool{} // tokens as currently registered, per id
	maxAdded := int64(-1)
	for i, ja := range list {
		if ja.Content == nil {
			return fmt.Errorf("tokenizer: added token %d has no content", i)
		}
		normalized := !ja.Special
		if ja.Normalized != nil {
			normalized = *ja.Normalized
		}
		tok := &addedToken{
			content:    *ja.Content,
			singleWord: ja.SingleWord,
			lstrip:     ja.LStrip,
			rstrip:     ja.RStrip,
			normalized: normalized,
			special:    ja.Special,
		}
		if tok.content == "" {
			continue
		}
		if tok.special && !t.specialSet[tok.content] {
			t.specialSet[tok.content] = true
			specials = append(specials, tok)
		}
		key := func(a *addedToken) tokenKey {
			return tokenKey{a.content, a.singleWord, a.lstrip, a.rstrip, a.normalized, a.special}
		}
		if present[key(tok)] {
			continue // HF ignores a token identical to a registered one
		}
		id, ok := t.addedByContent[tok.content]
		if !ok {
			id, ok = t.model.vocab[tok.content]
		}
		if !ok {
			next := modelSize
			if maxAdded >= 0 && (maxAdded >= modelSize || modelSize == 0) {
				next = maxAdded + 1
			}
			if next > maxTokenID {
				return fmt.Errorf("tokenizer: too many added tokens")
			}
			id = int32(next)
		}
		if old, ok := t.addedByID[id]; ok {
			delete(present, key(old))
		}
		present[key(tok)] = true
		tok.id = id
		t.addedByContent[tok.content] = id
		t.addedByID[id] = tok
		maxAdded = max(maxAdded, int64(id))
		if !t.specialSet[tok.content] {
			plain = append(plain, tok)
		}
		t.size = max(t.size, int(id)+1)
	}
	// Matching order: special tokens first, then the others (as HF).
	var raw, normd []matcherPattern
	for _, tok := range append(specials, plain...) {
		id := t.addedByContent[tok.content]
		t.added = append(t.added, tok)
		if tok.normalized {
			normd = append(normd, matcherPattern{t.normalize(tok.content), id})
		} else {
			raw = append(raw, matcherPattern{tok.content, id})
		}
	}
	t.rawMatcher = newMatcher(raw)
	t.normMatcher = newMatcher(normd)
	return nil
}

func (t *Tokenizer) normalize(s string) string {
	for _, f := range t.normalizers {
		s = f.String(s)
	}
	return s
}

// Encode returns the token ids of text, like HF
// `tokenizer.encode(text, add_special_tokens=False).ids`. Added tokens
// (special or not) appearing in text are recognized. Invalid UTF-8 is
// replaced by U+FFFD first (see the package documentation).
func (t *Tokenizer) Encode(text string) []int32 {
	text = toValidUTF8(text)
	if text == "" {
		return []int32{}
	}
	out := make([]int32, 0, len(text)/3+4)
	var ranges, tmp [][2]int
	for _, seg := range t.addedSegments(text) {
		if seg.id >= 0 {
			out = append(out, seg.id)
			continue
		}
		ranges = append(ranges[:0], [2]int{0, len(seg.text)})
		for _, sp := range t.splitters {
			tmp = tmp[:0]
			for _, r := range ranges {
				n := len(tmp)
				tmp = sp(seg.text[r[0]:r[1]], tmp)
				for k := n; k < len(tmp); k++ {
					tmp[k][0] += r[0]
					tmp[k][1] += r[0]
				}
			}
			ranges, tmp = tmp, ranges
		}
		for _, r := range ranges {
			out = t.model.tokenize(out, seg.text[r[0]:r[1]], t.byteLevel)
		}
	}
	return out
}

// addedSegments splits valid UTF-8 text into added tokens and normalized
// plain text (steps 1 and 2 of the package documentation).
func (t *Tokenizer) addedSegments(text string) []segment {
	var out []segment
	for _, seg := range t.splitAdded(nil, text, t.rawMatcher) {
		if seg.id >= 0 {
			out = append(out, seg)
			continue
		}
		out = t.splitAdded(out, t.normalize(seg.text), t.normMatcher)
	}
	return out
}

// Decode returns the text of ids like HF `decode(ids,
// skip_special_tokens=False)`: ids that are not in the vocabulary are
// ignored, and byte sequences that are not valid UTF-8 become U+FFFD (one per
// maximal ill-formed subpart, as Rust's from_utf8_lossy).
func (t *Tokenizer) Decode(ids []int32) string {
	if !t.decodeBytes {
		toks := make([]string, 0, len(ids))
		for _, id := range ids {
			if tok, ok := t.Token(id); ok {
				toks = append(toks, tok)
			}
		}
		return strings.Join(toks, " ")
	}
	var buf []byte
	for _, id := range ids {
		if tok, ok := t.Token(id); ok {
			buf = byteLevelDecodeToken(buf, tok)
		}
	}
	return string(appendLossy(make([]byte, 0, len(buf)), buf))
}

// VocabSize returns the largest token id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.size }

// TokenID returns the id of a token string (added tokens first, then the
// model vocabulary, in its byte-level form such as "Ġworld").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if id, ok := t.addedByContent[token]; ok {
		return id, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// Token returns the token string of an id.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if tok, ok := t.addedByID[id]; ok {
		return tok.content, true
	}
	if id >= 0 && int(id) < len(t.modelTok) && t.modelHas[id] {
		return t.modelTok[id], true
	}
	if t.modelSparse != nil {
		tok, ok := t.modelSparse[id]
		return tok, ok
	}
	return "", false
}

// IsSpecial reports whether id is an added token marked special (the
// tokens HF drops with skip_special_tokens=True).
func (t *Tokenizer) IsSpecial(id int32) bool {
	tok, ok := t.addedByID[id]
	return ok && t.specialSet[tok.content]
}

// TokenBytes returns the bytes id stands for in decoded text: a model
// token's bytes, or an added token's content. It reports false for special
// tokens and unknown ids (constrained decoding never matches them).
func (t *Tokenizer) TokenBytes(id int32) ([]byte, bool) {
	if t.IsSpecial(id) {
		return nil, false
	}
	if tok, ok := t.addedByID[id]; ok {
		return []byte(tok.content), true
	}
	tok, ok := t.Token(id)
	if !ok {
		return nil, false
	}
	if !t.decodeBytes {
		return []byte(tok), true
	}
	return byteLevelDecodeToken(nil, tok), true
}
