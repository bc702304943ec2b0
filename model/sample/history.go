package sample

// History is what the penalties need to know of a request's tokens: which
// ids its prompt or output holds (repetition) and how often each id was
// generated (presence, frequency). It grows one token at a time, so a
// request's owner keeps it across steps instead of rescanning the whole
// sequence for every draw. The zero value is an empty history; nil is too.
type History struct {
	seen      map[int32]bool // in the prompt or the output
	generated map[int32]int  // occurrences in the output
}

// NewHistory returns the history of prompt followed by generated.
func NewHistory(prompt, generated []int32) *History {
	h := &History{}
	for _, id := range prompt {
		h.AddPrompt(id)
	}
	for _, id := range generated {
		h.AddGenerated(id)
	}
	return h
}

// AddPrompt records a prompt token.
func (h *History) AddPrompt(id int32) {
	if h.seen == nil {
		h.seen = map[int32]bool{}
	}
	h.seen[id] = true
}

// AddGenerated records a generated token.
func (h *History) AddGenerated(id int32) {
	h.AddPrompt(id)
	if h.generated == nil {
		h.generated = map[int32]int{}
	}
	h.generated[id]++
}
