package model

import (
	"fmt"

	"cohort/kernels"
)

// Session runs one sequence on one rank without a scheduler: the CLI's
// generate and score, and the numerical tests. It owns a one-slot state.
type Session struct {
	be       kernels.Backend
	m        Model
	st       *State
	pageSize int
	maxLen   int
	cached   int
}

// NewSession prepares a sequence of at most maxLen tokens.
func NewSession(be kernels.Backend, m Model, maxLen int) *Session {
	const pageSize = 16
	pages := (maxLen + pageSize - 1) / pageSize
	return &Session{be: be, m: m, st: m.NewState(be, 1, pages, pageSize), pageSize: pageSize, maxLen: maxLen}
}

// Len returns the number of tokens processed so far.
func (s *Session) Len() int { return s.cached }

// Step feeds tokens (a prefill chunk or one decode token) and returns the
// logits [rows, vocab] of every fed position when all is true, else of the
// last one only.
func (s *Session) Step(tokens []int32, all bool) ([]float32, error) {
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("model: session step with no tokens")
	}
	if s.cached+n > s.maxLen {
		return nil, fmt.Errorf("model: session of %d tokens cannot take %d more after %d", s.maxLen, n, s.cached)
	}
	b := &kernels.Batch{Positions: make([]int32, n)}
	for i := range b.Positions {
		b.Positions[i] = int32(s.cached + i)
	}
	pages := make([]int32, (s.cached+n+s.pageSize-1)/s.pageSize)
	for i := range pages {
		pages[i] = int32(i)
	}
	b.Seqs = []kernels.Seq{{Slot: 0, Start: 0, Len: n, Cached: s.cached, Pages: pages}}
	rows := []int{n - 1}
	if all {
		rows = make([]int, n)
		for i := range rows {
			rows[i] = i
		}
	}
	logits, err := s.m.Forward(s.be, s.st, tokens, b, rows)
	if err != nil {
		return nil, err
	}
	s.cached += n
	return s.be.Download(logits), nil
}
