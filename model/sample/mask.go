package sample

import (
	"math"
	"math/bits"
)

// Mask is a set of allowed token ids, the output of constrained decoding
// for one step of one request. A mask is immutable once built, so rows and
// requests in the same grammar state share one.
type Mask struct {
	words []uint64
	vocab int
}

// NewMask returns an empty mask over a vocabulary of vocab ids.
func NewMask(vocab int) *Mask { return &Mask{words: make([]uint64, (vocab+63)/64), vocab: vocab} }

// MaskFromWords builds a mask from its bit words (id i is bit i%64 of word
// i/64), as Words returns them; bits at or beyond vocab are dropped.
func MaskFromWords(words []uint64, vocab int) *Mask {
	m := NewMask(vocab)
	copy(m.words, words)
	if r := vocab % 64; r != 0 && len(m.words) > 0 {
		m.words[len(m.words)-1] &= 1<<r - 1
	}
	return m
}

// Set allows id (while the mask is being built).
func (m *Mask) Set(id int32) {
	if id >= 0 && int(id) < m.vocab {
		m.words[id>>6] |= 1 << (uint(id) & 63)
	}
}

// Has reports whether id is allowed.
func (m *Mask) Has(id int32) bool {
	return id >= 0 && int(id) < m.vocab && m.words[id>>6]&(1<<(uint(id)&63)) != 0
}

// Count returns the number of allowed ids.
func (m *Mask) Count() int {
	n := 0
	for _, w := range m.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// Vocab returns the vocabulary size the mask covers.
func (m *Mask) Vocab() int { return m.vocab }

// Words returns the mask's bit words (read-only).
func (m *Mask) Words() []uint64 { return m.words }

// Apply sets the logit of every id the mask does not allow to -Inf (ids
// beyond the mask's vocabulary included).
func (m *Mask) Apply(work []float32) {
	ninf := float32(math.Inf(-1))
	for w := 0; w*64 < len(work); w++ {
		var word uint64
		if w < len(m.words) {
			word = m.words[w]
		}
		if word == math.MaxUint64 {
			continue
		}
		end := min(w*64+64, len(work))
		for i := w * 64; i < end; i++ {
			if word&(1<<(uint(i)&63)) == 0 {
				work[i] = ninf
			}
		}
	}
}
