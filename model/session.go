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
	st       State
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
	if all {
		return s.StepRows(tokens, nil)
	}
	return s.StepRows(tokens, []int{len(tokens) - 1})
}

// StepRows feeds tokens like Step and returns the logits [len(rows), vocab]
// of the fed positions rows (indices into tokens, ascending or not; nil
// means every position). Only those rows go through the LM head, so a long
// prompt scored at a few positions never materializes [len(tokens), vocab].
// An empty non-nil rows runs the step and returns no logits.
func (s *Session) StepRows(tokens []int32, rows []int) ([]float32, error) {
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("model: session step with no tokens")
	}
	for _, r := range rows {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("model: output row %d outside a step of %d tokens", r, n)
		}
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
	if rows == nil {
		rows = make([]int, n)
		for i := range rows {
			rows[i] = i
		}
	}
	// The model always computes at least one output row; when none is
	// wanted, compute the last and drop it.
	out := rows
	if len(out) == 0 {
		out = []int{n - 1}
	}
	logits, err := s.m.Forward(s.be, s.st, tokens, b, out)
	if err != nil {
		return nil, err
	}
	s.cached += n
	if len(rows) == 0 {
		return nil, nil
	}
	return s.be.Download(logits), nil
}
