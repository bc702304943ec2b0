package grammar

import (
	"errors"
	"fmt"
)

// Regex compiles a regular expression that the whole output must match
// (vLLM's structured_outputs.regex), over raw text.
func Regex(pattern string, v *Vocab) (*Grammar, error) {
	r, err := parseRegex(pattern, false)
	if err != nil {
		return nil, err
	}
	c := newJSONCompiler()
	c.raw = true
	body, err := c.stringBody(r, 0, -1)
	if err != nil {
		return nil, err
	}
	return c.b.Build(body, v)
}

// maxChoices bounds a choice list.
const maxChoices = 4096

// Choice compiles a list of strings, one of which the output must be
// exactly (vLLM's structured_outputs.choice).
func Choice(choices []string, v *Vocab) (*Grammar, error) {
	if len(choices) == 0 {
		return nil, errors.New("grammar: choice needs at least one string")
	}
	if len(choices) > maxChoices {
		return nil, fmt.Errorf("grammar: at most %d choices", maxChoices)
	}
	b := NewBuilder()
	alts := make([]Sym, len(choices))
	for i, s := range choices {
		if s == "" {
			return nil, fmt.Errorf("grammar: choice %d is empty", i)
		}
		alts[i] = b.Lit(s)
	}
	return b.Build(b.Or(alts...), v)
}
